"""Checkpoint files: atomic writes, a ``last`` pointer, and retention of periodic ones."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict, Union

import torch

PathLike = Union[str, Path]


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: PathLike, write: Any) -> None:
    """Write through ``write(file)`` into a temporary file beside ``path``, fsync, then rename over it.

    A reader sees either the old file or the complete new one, never a partial file.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(path.parent)


def save_checkpoint(state: Dict[str, Any], path: PathLike) -> Path:
    """Save ``state`` atomically to ``path`` and point ``<dir>/last`` at it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, lambda f: torch.save(state, f))
    atomic_write_bytes(path.parent / "last", lambda f: f.write(path.name.encode() + b"\n"))
    return path


def load_checkpoint(path: PathLike, map_location: Any = "cpu") -> Dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    return torch.load(path, map_location=map_location, weights_only=False)
