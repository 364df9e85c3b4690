#!/usr/bin/env bash
# Builds and checks the VS Code extension: the toolchain (cached per machine), the locked
# npm packages, a strict type check, the unit tests, the bundle and the .vsix. Writes
# .toolchain.json for tests/editors/test_vscode.py, which drives the .vsix in code-server.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/toolchain.sh
CACHE="${COMPLETER_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/completer-e2e}"
NODE_BIN=$(ls -d "$CACHE"/node-*/node_modules/node/bin | sort -V | tail -1)
CODE_SERVER=$(ls -d "$CACHE"/code-server-*/node_modules/code-server | sort -V | tail -1)
export PATH="$NODE_BIN:$PATH"

# The locked versions. Not `npm ci`: it refuses the lock because vite's optional
# napi-windows-process-start-time (Windows only) is not on the registry here, which
# `npm install` skips, as it skips any optional package it cannot get.
if [[ ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
  npm install --no-audit --no-fund --loglevel=error
fi
npm run --silent typecheck
npm test --silent
npm run --silent build
npm run --silent package >/dev/null
echo "vscode: $(du -k completer.vsix | cut -f1) KB completer.vsix"
printf '{"node": "%s", "code_server": "%s"}\n' "$NODE_BIN/node" "$CODE_SERVER/out/node/entry.js" > .toolchain.json
