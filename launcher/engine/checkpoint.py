"""Checkpoint files: atomic writes, a ``last`` pointer, and loading that never trusts a bad file.

A checkpoint goes to a temporary file, fsynced and renamed over its name; then ``last`` (a one-line file naming
the newest checkpoint) is replaced the same way. A kill leaves the old files or the new ones, and at worst a stray
temporary file that the next save removes.
"""
from __future__ import annotations

import _compat_pickle
import io
import logging
import os
import pickle
import pickletools
import queue
import re
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

from launcher.engine.errors import CheckpointWriteError, HookStateError
from launcher.engine.files import atomic_write, candidates, fsync_dir, readable_archive, resume_off, write_file  # noqa: F401 -- re-exported

logger = logging.getLogger(__name__)

PathLike = Union[str, Path]

# Test-only: seconds to sleep between writing and renaming, so a test can kill a process inside a write.
_WRITE_DELAY_ENV = "LAUNCHER_TEST_CHECKPOINT_WRITE_DELAY"


def serialize(state: Dict[str, Any], buffer: Optional[io.BytesIO] = None) -> memoryview:
    """The bytes ``torch.save`` would write: a snapshot that later training cannot change.

    Given a ``buffer`` of an earlier checkpoint, they overwrite it in place (2.5x faster than a new buffer for
    33 MB); every view of that checkpoint must be released first (``BufferError`` otherwise).
    """
    if buffer is None:
        buffer = io.BytesIO()
    buffer.seek(0)
    torch.save(state, buffer)
    return buffer.getbuffer()[: buffer.tell()]


class _TensorsByReference(pickle.Pickler):
    """A pickler that writes tensors and storages as references: cheap for a large state."""

    def persistent_id(self, value: Any) -> Optional[int]:
        return id(value) if isinstance(value, (torch.Tensor, torch.UntypedStorage, torch.TypedStorage)) else None


def pickling_error(obj: Any) -> Optional[str]:
    """Why ``torch.save`` cannot take ``obj`` (a lambda, a lock, an open file in it), or None."""
    class Nowhere:
        write = staticmethod(len)

    try:
        _TensorsByReference(Nowhere(), protocol=2).dump(obj)  # torch.save's protocol
    except Exception as err:  # noqa: BLE001 -- pickle raises several kinds (PicklingError, AttributeError, TypeError)
        return f"{type(err).__name__}: {err}"
    return None


def unsaveable_hook_state(states: Dict[str, Any], hooks: Sequence[Any]) -> Optional[HookStateError]:
    """The error naming the first hook whose state (``states[name]``) ``torch.save`` cannot take, or None."""
    for hook in hooks:
        why = pickling_error(states.get(hook.name)) if hook.name in states else None
        if why:
            return HookStateError(
                f"hook {hook.name} ({type(hook).__module__}.{type(hook).__qualname__}): its state_dict() holds what a "
                f"checkpoint cannot save ({why}); return plain values from it: numbers, strings, lists, dicts, tensors")
    return None


def write_checkpoint(data: Union[bytes, memoryview], path: PathLike) -> Path:
    """Write serialized checkpoint bytes atomically to ``path`` (its directory exists), then point ``<dir>/last`` at
    it; one directory fsync makes both renames durable (a lost ``last`` falls back to modification times).
    Raw system calls: on a background thread each one hands the GIL back to the training step."""
    path = Path(path)
    directory = path.parent
    delay = float(os.environ.get(_WRITE_DELAY_ENV, "0") or 0)
    atomic_write(path, data, delay, sync_dir=False)
    pointer_tmp = os.path.join(directory, f".last.tmp{os.getpid()}")
    write_file(pointer_tmp, path.name.encode() + b"\n", sync=False)
    os.replace(pointer_tmp, os.path.join(directory, "last"))
    fsync_dir(directory)
    return path


def remove_stale_temporaries(directory: PathLike, pattern: str = ".*.tmp*") -> None:
    """Remove the temporary files a process killed inside an atomic write left in ``directory``."""
    for stale in Path(directory).glob(pattern):
        stale.unlink(missing_ok=True)


def save_checkpoint(state: Dict[str, Any], path: PathLike) -> Path:
    """Save ``state`` atomically to ``path`` (making its directory), then point ``<dir>/last`` at it."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    return write_checkpoint(serialize(state), path)


class BackgroundWriter:
    """Writes checkpoints on one thread, in order: the state is serialized at once, the disk work overlaps training.

    A failed write is raised by the next :meth:`write` or by :meth:`wait`, never lost. Each checkpoint reuses the
    previous one's memory (up to ``REUSE_LIMIT``), given back by :meth:`close`.
    """

    def __init__(self) -> None:
        self._jobs: "queue.Queue[Optional[Tuple[memoryview, Path, Sequence[Path]]]]" = queue.Queue()
        self._thread: Optional[threading.Thread] = None
        self._error: Optional[CheckpointWriteError] = None  # a failed background write's, raised by the next call
        self._ready: set = set()  # directories made and cleared of stale temporary files
        self._buffer: Optional[io.BytesIO] = None
        self.rerun_hint = "the same command"  # for the advice of a failed write

    def write(self, state: Dict[str, Any], path: PathLike, then_remove: Sequence[Path] = (), background: bool = True) -> Path:
        # the previous write still going: serialize into new memory meanwhile
        data = serialize(state) if self._thread is not None and self._jobs.unfinished_tasks else None
        self.wait()
        if data is None:
            data = self._serialize(state)  # the previous checkpoint is on disk: its memory takes this one
        path = Path(path)
        self.prepare(path.parent)
        if not background:
            self._write_now(data, path, then_remove)
            return path
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name="checkpoint-writer", daemon=True)
            self._thread.start()
        self._jobs.put((data, path, then_remove))
        return path

    def prepare(self, directory: PathLike) -> None:
        """Make ``directory``, clear stale temporary files and check that a file can be written there (once per
        directory), so a run whose checkpoints cannot be written stops before training."""
        directory = Path(directory)
        if directory in self._ready:
            return
        probe = directory / f".probe.tmp{os.getpid()}"
        try:
            directory.mkdir(parents=True, exist_ok=True)
            remove_stale_temporaries(directory)
            write_file(probe, b"", sync=False)
            probe.unlink()
        except OSError as err:
            raise _write_failed(f"writing checkpoints in {directory}", directory, err, self.rerun_hint) from err
        self._ready.add(directory)

    REUSE_LIMIT = 1 << 30  # bytes: memory kept between saves for at most this big a checkpoint

    def _serialize(self, state: Dict[str, Any]) -> memoryview:
        data = None
        if self._buffer is not None:
            try:
                data = serialize(state, self._buffer)
            except BufferError:  # a view of the previous checkpoint is still held
                pass
        if data is None:
            self._buffer = io.BytesIO()
            data = serialize(state, self._buffer)
        if len(data) > self.REUSE_LIMIT:
            self._buffer = None
        return data

    def _write_now(self, data: memoryview, path: Path, then_remove: Sequence[Path], catch: Any = OSError) -> None:
        try:
            write_checkpoint(data, path)
        except catch as err:
            raise _write_failed(f"writing checkpoint {path}", path.parent, err, self.rerun_hint) from err
        data.release()
        for old in then_remove:  # retention: only once the new file is safe
            try:
                old.unlink(missing_ok=True)
            except OSError as err:
                raise _write_failed(f"removing the old checkpoint {old}", old.parent, err, self.rerun_hint) from err

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                data, path, then_remove = job
                job = None  # the buffer's next checkpoint needs every view of this one gone
                self._write_now(data, path, then_remove, catch=BaseException)
            except CheckpointWriteError as err:
                self._error = err
            except BaseException as err:  # noqa: B036 -- never lost: the next write or wait raises it
                self._error = _write_failed("writing a checkpoint", path.parent, err, self.rerun_hint)
                self._error.__cause__ = err
            finally:
                self._jobs.task_done()

    def wait(self) -> None:
        """Block until every write asked for is on disk; raise a failed write's error."""
        if self._thread is not None:
            self._jobs.join()
        if self._error is not None:
            err, self._error = self._error, None
            raise err

    def close(self) -> None:
        """Wait for the writes, then end the thread (a later write starts another)."""
        try:
            self.wait()
        finally:
            self._buffer = None
            if self._thread is not None:
                self._jobs.put(None)
                self._thread.join()
                self._thread = None


def _write_failed(what: str, directory: Path, err: BaseException, rerun_hint: str = "the same command") -> CheckpointWriteError:
    """The error of a failed checkpoint write or removal: the file, the reason and the way on."""
    earlier = bool(candidates(directory))
    rerun = f"run {rerun_hint} to " + ("resume from the newest" if earlier else "start it again")
    if isinstance(err, OSError):
        where = err.filename2 or err.filename  # the file in the way
        why = f"{type(err).__name__}: {err.strerror or err}" + (f": {where}" if where and str(where) not in what else "")
        advice = f"free space, or make {directory} a directory you can write to, then {rerun}"
    else:
        why, advice = f"{type(err).__name__}: {err}", rerun
    kept = "the checkpoints written before it are kept" if earlier else "no checkpoint was written before it"
    return CheckpointWriteError(f"{what} failed ({why}); {kept}: {advice}")


class UntrustedCheckpointError(RuntimeError):
    """A file that ``torch.load(weights_only=True)`` refuses for the Python objects it holds (``objects``)."""

    def __init__(self, message: str, objects: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.objects = list(objects)


TRUST_RISK = "unpickling them can run any code the file holds"


def load_checkpoint(path: PathLike, map_location: Any = "cpu", trust: bool = False) -> Dict[str, Any]:
    """Load one checkpoint with ``torch.load(weights_only=True)``. A file holding Python objects raises
    :class:`UntrustedCheckpointError`, or with ``trust`` loads in full with a warning; a missing or corrupt file
    raises naming it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    try:
        with torch.serialization.safe_globals(_data_globals()):
            state = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:
        objects, reason = _refused_objects(path, err)
        if not objects:
            raise _unreadable(path, reason) from err
        listed = ", ".join(objects[:5]) + (", ..." if len(objects) > 5 else "")
        if not trust:
            raise UntrustedCheckpointError(f"{str(path)!r} holds Python objects ({listed}) besides tensors and plain "
                                           f"types, which torch.load(weights_only=True) does not unpickle", objects) from err
        logger.warning("Loading %s in full with its Python objects (%s), as trainer.trust_checkpoint=true allows: %s",
                       path, listed, TRUST_RISK)
        try:
            state = torch.load(path, map_location=map_location, weights_only=False)
        except Exception as full:
            raise _unreadable(path, full) from full
    if not isinstance(state, dict):
        raise RuntimeError(f"checkpoint {str(path)!r} holds a {type(state).__name__}, not a dict of state")
    return state


def _unreadable(path: Path, err: BaseException) -> RuntimeError:
    return RuntimeError(f"checkpoint {str(path)!r} is unreadable (truncated or corrupt): {brief(err)}")


def _refused_objects(path: Path, err: Exception) -> Tuple[List[str], BaseException]:
    """The objects ``torch.load(weights_only=True)`` refused in ``path`` ([]: the file is corrupt), and the error."""
    if not isinstance(err, pickle.UnpicklingError):
        return [], err
    allowed = {g[1] if isinstance(g, tuple) else f"{g.__module__}.{g.__qualname__}" for g in _data_globals()}
    try:
        objects = [o for o in torch.serialization.get_unsafe_globals_in_checkpoint(path) if o not in allowed]
    except Exception as why:  # not a zip archive: a raw pickle, or torch's legacy format
        objects = [o for o in _globals_in_pickle(path) if o not in allowed]
        if not objects:
            return [], why
    # every global allowed, yet refused: a NumPy array of strings or objects
    refused = re.search(r"but got <class '([\w.]+)'>", str(err)) if not objects and "Weights only load failed" in str(err) else None
    if refused:
        objects = [refused.group(1)]
    return objects, err


def _globals_in_pickle(path: Path) -> List[str]:
    """The functions and classes the first pickle in ``path`` names, read without unpickling."""
    found: List[str] = []
    strings: List[str] = []
    try:
        with open(path, "rb") as file:
            for op, arg, _ in pickletools.genops(file):
                if op.name == "GLOBAL":
                    found.append(str(arg).replace(" ", ".", 1))
                elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                    found.append(f"{strings[-2]}.{strings[-1]}")
                elif isinstance(arg, str):
                    strings.append(arg)
    except Exception:  # noqa: BLE001 -- garbage, or a pickle cut short: what was read so far
        pass
    return list(dict.fromkeys(found))


def objects_beyond_weights(obj: Any) -> List[str]:
    """The Python objects in ``obj`` (``module.name``) that ``torch.load(weights_only=True)`` refuses; [] for
    tensors and plain values."""
    buffer = io.BytesIO()
    try:
        _TensorsByReference(buffer, protocol=2).dump(obj)  # torch.save's protocol: every function or class a GLOBAL
    except Exception:  # noqa: BLE001 -- what pickle cannot take at all is pickling_error's to name
        return []
    names = list(dict.fromkeys(str(arg) for op, arg, _ in pickletools.genops(buffer.getvalue()) if op.name == "GLOBAL"))
    if not names:
        return []
    found, unknown = [], []
    for name in names:  # "module qualname"
        module, _, qualname = name.partition(" ")
        # protocol 2 names builtins as Python 2 did (__builtin__.set): map them back
        module, qualname = _compat_pickle.NAME_MAPPING.get((module, qualname),
                                                           (_compat_pickle.IMPORT_MAPPING.get(module, module), qualname))
        target: Any = sys.modules.get(module)
        for part in qualname.split("."):
            target = getattr(target, part, None)
        (unknown if target is None else found).append((name.replace(" ", ".", 1), target))
    probe = io.BytesIO()
    try:
        torch.save([target for _, target in found], probe)
        probe.seek(0)
        with torch.serialization.safe_globals(_data_globals()):
            refused = set(torch.serialization.get_unsafe_globals_in_checkpoint(probe))
    except Exception:  # noqa: BLE001 -- not pickled by reference as named: torch would not read it either
        refused = {name for name, _ in found}
    return [name for name, _ in unknown] + [name for name, _ in found if name in refused]


def _data_globals() -> List[Any]:
    """What ``weights_only`` loading reads besides torch's defaults: ``bytes`` (protocol 2 writes an empty one as
    a call) and NumPy arrays of numbers."""
    return [bytes, *_numpy_array_globals()]


def _numpy_array_globals() -> List[Any]:
    """What a NumPy array of numbers unpickles through (as torch's docs list them for ``weights_only``)."""
    try:
        import numpy as np
    except ImportError:
        return []
    core = getattr(np, "_core", None) or np.core
    kinds = [type(np.dtype(t)) for t in ("b", "B", "h", "H", "i", "I", "l", "L", "q", "Q", "e", "f", "d", "?")]
    # under the name each NumPy pickles them by: numpy.core.* before NumPy 2, numpy._core.* since
    named = [(f, f"numpy.{where}.multiarray.{f.__name__}") for f in (core.multiarray._reconstruct, core.multiarray.scalar)
             for where in ("core", "_core")]
    return [*named, np.ndarray, np.dtype, *dict.fromkeys(kinds)]


def brief(err: BaseException) -> str:
    """An exception in one short line: torch's loading errors run to paragraphs of advice."""
    text = (str(err).strip().splitlines() or [""])[0]
    cut = text.find(". ", 40)
    return f"{type(err).__name__}: {text[:cut] if len(text) > 160 and cut > 0 else text}"


def load_newest_valid(directory: PathLike, map_location: Any = "cpu", trust: bool = False) -> Optional[Tuple[Path, Dict[str, Any]]]:
    """The newest checkpoint in ``directory`` that loads, skipping bad ones with a warning naming both files.

    One that holds Python objects raises :class:`UntrustedCheckpointError` (unless ``trust``) rather than lose the
    training since; a raw pickle is no file this launcher wrote: skipped, never unpickled.
    """
    skipped: List[Tuple[Path, str]] = []
    for path in candidates(directory):
        archive = readable_archive(path)
        try:
            state = load_checkpoint(path, map_location, trust=trust and archive)
        except UntrustedCheckpointError as err:
            if archive:
                raise
            skipped.append((path, f"not a torch.save archive, and it holds Python objects ({', '.join(err.objects[:5])}): "
                                  f"not a file this launcher wrote, and never unpickled"))
            continue
        except RuntimeError as err:
            skipped.append((path, brief(err.__cause__) if err.__cause__ else str(err)))
            continue
        for bad, why in skipped:
            logger.warning("Checkpoint %s is unreadable (%s); resuming from %s instead", bad, why, path)
        return path, state
    for bad, why in skipped:
        logger.warning("Checkpoint %s is unreadable (%s) and no older checkpoint loads", bad, why)
    if skipped:
        logger.warning("No checkpoint in %s loads: training starts from the beginning", directory)
    return None
