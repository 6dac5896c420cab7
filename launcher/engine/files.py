"""Durable file writes and the run dir's checkpoint list; standard library only, so the sweep process and
``launcher.sweep.summary`` import it without torch."""
from __future__ import annotations

import contextlib
import os
import re
import time
import zipfile
from pathlib import Path
from typing import Any, List, Optional, Union

PathLike = Union[str, Path]


def fsync_dir(directory: PathLike) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: PathLike, data: Union[bytes, memoryview], sync: bool) -> None:
    """Create or truncate ``path`` and write ``data`` (fsynced if ``sync``) with raw os calls."""
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
    """Write ``data`` to a temporary file beside ``path``, fsync it (``sync``), rename it over ``path``, then fsync
    the directory (``sync_dir``; false for a caller that renames several files and fsyncs once)."""
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


# the names the checkpointer writes (hooks/checkpoint.py): only these are resumed from
CHECKPOINT_NAME = re.compile(r"epoch_\d{4,}\.pt|iter_\d{7,}\.pt|final\.pt")


def candidates(directory: PathLike) -> List[Path]:
    """The checkpoints this launcher wrote in ``directory``, newest first: the one ``last`` names, then the
    checkpointer's names by modification time; never a link to a file outside the run dir."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    files = sorted((p for p in directory.iterdir() if CHECKPOINT_NAME.fullmatch(p.name) and in_run_dir(p, directory)),
                   key=lambda p: p.stat().st_mtime_ns, reverse=True)
    named = pointed_to(directory)
    if named is not None:
        if named in files:
            files.remove(named)
        files.insert(0, named)
    return files


def pointed_to(directory: PathLike) -> Optional[Path]:
    """The file that ``<directory>/last`` names (one plain file name, no path), or None."""
    directory = Path(directory)
    pointer = directory / "last"
    if pointer.is_symlink() or not pointer.is_file():
        return None
    try:
        with open(pointer, "rb") as file:
            name = file.read(256).decode().strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not name or name.startswith(".") or any(c in name for c in ("/", "\\", "\0")):
        return None
    path = directory / name
    return path if in_run_dir(path, directory) else None


def in_run_dir(path: Path, directory: PathLike) -> bool:
    """Whether ``path`` is a file of the run dir (a link to a file elsewhere is not)."""
    if not path.is_file():
        return False
    if not path.is_symlink():
        return True
    target = path.resolve()
    return any(target.is_relative_to(Path(d).resolve()) for d in (directory, Path(directory).parent))


def readable_archive(path: Path) -> bool:
    """Whether ``path`` is a whole ``torch.save`` file, by its zip directory (at the end: a truncated file fails),
    without reading the tensors."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("/data.pkl") or name == "data.pkl" for name in archive.namelist())
    except (OSError, zipfile.BadZipFile, ValueError):
        return False
