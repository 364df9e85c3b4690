"""Writes the server's options (completer/config.py) into package.json's settings, after
the extension's own: `python editor-extensions/vscode/scripts/sync-settings.py` from the
repository root, with completer installed. tests/editors/test_vscode.py fails until they agree."""

import json
from pathlib import Path

from completer.config import settings_schema

MANIFEST = Path(__file__).resolve().parent.parent / "package.json"

manifest = json.loads(MANIFEST.read_text())
properties = manifest["contributes"]["configuration"]["properties"]
own = {key: value for key, value in properties.items() if key.count(".") == 1}  # completer.<name>
server = {f"completer.{key}": value for key, value in settings_schema().items()}
manifest["contributes"]["configuration"]["properties"] = {**own, **server}
MANIFEST.write_text(json.dumps(manifest, indent=2) + "\n")
