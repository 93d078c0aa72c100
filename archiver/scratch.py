"""Each archiver process's scratch directory: every temporary file it makes (a file being
written or restored, an erasure's rewrite, a download) goes under
`<tmp>/archiver-<command>-<pid>-<random>/`, removed when the process ends. A process
killed outright (SIGKILL, the OOM killer, a power cut) cannot remove its own, so each
process starting removes those whose process is gone: what SIGKILLed commands and workers
left stops at one directory per dead process, until the next start.

A directory whose process id is alive is kept, whoever has that id now (an id reused by
another program keeps a dead command's directory until the id is free again). Processes
that share a temporary directory but not a process-id namespace (containers mounting one
host directory) should each have their own TMPDIR."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

_NAME = re.compile(r"archiver-[a-z-]+-(\d+)-[a-z0-9_]+")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


def remove_stale(root: Path) -> list[Path]:
    """Remove the scratch directories under `root` whose process is gone: those removed."""
    removed = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(root):
            match = _NAME.fullmatch(entry.name)
            if match and entry.is_dir(follow_symlinks=False) and not _alive(int(match[1])):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(Path(entry.path))
    return removed


@contextlib.contextmanager
def directory(command: str) -> Iterator[Path]:
    """This process's scratch directory for `command`, made the default of `tempfile`
    (so every temporary file and directory goes in it), removed at the end; the
    directories of dead processes removed first."""
    before = tempfile.tempdir
    root = Path(tempfile.gettempdir())
    remove_stale(root)
    path = Path(tempfile.mkdtemp(prefix=f"archiver-{command}-{os.getpid()}-", dir=root))
    tempfile.tempdir = str(path)
    try:
        yield path
    finally:
        tempfile.tempdir = before
        shutil.rmtree(path, ignore_errors=True)
