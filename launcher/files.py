"""Durable small-file writes and the run dir's checkpoint list, with the standard library alone (no torch:
a sweep's own process and ``python -m launcher.summary`` import this without paying for torch)."""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path
from typing import Any, List, Union

PathLike = Union[str, Path]


def fsync_dir(directory: PathLike) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: PathLike, data: Union[bytes, memoryview], sync: bool) -> None:
    """Create or truncate ``path`` and write ``data`` (fsynced if ``sync``): os calls only, each a system call."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: PathLike, data: Union[bytes, memoryview], delay: float = 0.0, sync_dir: bool = True,
                 sync: bool = True) -> None:
    """Write ``data`` into a temporary file beside ``path``, fsync (unless not ``sync``), then rename over it.

    ``sync_dir`` then fsyncs the directory so the rename itself is durable; a caller renaming
    several files in one directory can leave it false and fsync the directory once.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        write_file(tmp, data, sync=sync)
        if delay:
            time.sleep(delay)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def resume_off(value: Any) -> bool:
    """Whether a ``trainer.resume`` value says to ignore the run dir's checkpoints (false, no, none)."""
    return value is None or value is False or (isinstance(value, str) and value.lower() in ("false", "no", "none", ""))


def candidates(directory: PathLike) -> List[Path]:
    """Checkpoints in ``directory``, newest first: the one ``last`` names, then by modification time."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    # files only: a directory named like one (final.pt made a dir) failed the resume as "does not exist"
    files = sorted((p for p in directory.glob("*.pt") if p.is_file()), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    pointer = directory / "last"
    if pointer.is_file():
        named = directory / pointer.read_text().strip()
        if named in files:
            files.remove(named)
            files.insert(0, named)
    return files
