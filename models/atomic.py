"""Files written whole: a reader never sees half of one, and a writer killed midway
leaves a temporary file named with its pid, which the next write of the same file
sweeps."""

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def sweep_partial_files(destination: Path) -> None:
    """Remove the temporary files of earlier writes of `destination` whose process died
    (killed mid-write: no `finally` ran). A live writer's file is left alone."""
    for partial in destination.parent.glob(f".{destination.name}.*.part"):
        pid = partial.name[len(destination.name) + 2 :].split(".", 1)[0]
        if pid.isdigit() and not process_alive(int(pid)):
            partial.unlink(missing_ok=True)


def write_atomically(destination: Path, write: Callable[[Path], Any], mode: int = 0o666) -> Path:
    """Call write(temporary_path), then move the finished file into place: a reader
    never sees half a file, and an interrupted write leaves nothing behind (a killed
    one leaves a temporary file, named with its pid, which the next write sweeps).
    `mode` before the umask: 0o777 for a program."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    sweep_partial_files(destination)
    handle, temporary = tempfile.mkstemp(dir=destination.parent, prefix=f".{destination.name}.{os.getpid()}.",
                                         suffix=".part")
    os.close(handle)
    try:
        write(Path(temporary))
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, mode & ~umask)  # mkstemp makes 0600; a cache file is as readable as any other
        os.replace(temporary, destination)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return destination
