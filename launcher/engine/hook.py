"""HookBase: one task of a training run (timing, logging, checkpointing...) as a set of events.

Every event is a no-op here, and the trainer calls a hook only for the events it overrides and has not set to
``None`` on the instance before registration (the checkpointer's ``self.after_step = None`` when saving by epoch).

Order: lower ``priority`` runs first; hooks of equal priority keep registration order.

==========================  ========  =========================================
hook                        priority  why there
==========================  ========  =========================================
Profiler                    0         marks step ends before other hooks add work
IterationTimer              10        time the step before others add to it
OptimizerStep               30        (owns the optimizer step; see hooks/optim.py)
LRScheduler, ParamSchedule  30        record the values the step used, then step
EMA                         40        weights ready for validation (EMA's put in)
PreciseBN                   41        BN statistics of the weights to be validated
Evaluator                   50        validate before anything reads val/*
EarlyStopping               60        judge the validation the Evaluator recorded
ProgressBar                 79        count the step before a writer logs it
ConsoleWriter, JSONWriter,  80        write what the hooks above recorded
TensorBoardWriter
PeriodicCheckpointer        90        save after every other hook's update
==========================  ========  =========================================
"""
from __future__ import annotations

import enum
import numbers
from typing import Any, Dict, Mapping, Optional


class Priority(enum.IntEnum):
    """Named priority levels (mmengine's); any int works."""

    HIGHEST = 0
    VERY_HIGH = 10
    HIGH = 30
    ABOVE_NORMAL = 40
    NORMAL = 50
    BELOW_NORMAL = 60
    LOW = 70
    LOWER = 80
    VERY_LOW = 90
    LOWEST = 100


EVENTS = (
    "before_train",
    "after_train",
    "before_epoch",
    "after_epoch",
    "before_step",
    "after_step",
    "before_val",
    "after_val",
    "val_failed",
)


class HookBase:
    """Base class of every hook. ``self.trainer`` is a ``weakref.proxy`` set at registration, so neither keeps the
    other alive; in the ``*_step`` events ``trainer.iter`` (and ``trainer.storage.iter``) is the step's 0-based index."""

    priority: int = Priority.NORMAL
    trainer: Any = None  # weakref.proxy to the trainer, set by register_hooks
    name: str = ""  # the key its state is checkpointed under (the config key, e.g. "checkpointer")
    # asked by the run's checks without importing the hook: it validates (with period, by_epoch and at_end, as
    # Evaluator), or it saves the checkpoints a rerun resumes from (as PeriodicCheckpointer)
    validates: bool = False
    saves_checkpoints: bool = False

    def __init__(self, priority: Optional[int] = None) -> None:
        if priority is not None:
            if not isinstance(priority, int):
                raise TypeError(f"{type(self).__name__}: priority must be an int, got {priority!r}")
            self.priority = int(priority)

    def before_train(self) -> None:
        """Called once before the first step (after any resume)."""

    def after_train(self) -> None:
        """Called once at the end, also when training raised."""

    def before_epoch(self) -> None:
        """Called before each pass over the training data."""

    def after_epoch(self) -> None:
        """Called after each full pass over the training data."""

    def before_step(self) -> None:
        """Called before each training iteration."""

    def after_step(self) -> None:
        """Called after each training iteration (after the optimizer step)."""

    def before_val(self) -> None:
        """Called before each validation pass; here and in ``after_val``, ``trainer.epoch`` is the epochs completed."""

    def after_val(self) -> None:
        """Called after each validation pass; its metrics are in the storage as ``val/*``."""

    def val_failed(self) -> None:
        """Called instead of ``after_val`` when the validation pass raised: undo what ``before_val`` did to the model
        (weights swapped in), as the run may still save a checkpoint before the error goes on."""

    def state_dict(self) -> Dict[str, Any]:
        """What this hook needs to continue exactly after a resume."""
        return {}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""


def iterations_per_step(trainer: Any) -> int:
    """Iterations per optimizer step: ``hooks.optimizer_step.accumulate``, else 1 (a schedule or an EMA moves once
    per this many iterations)."""
    owner = getattr(trainer, "_step_hook", None)
    accumulate = getattr(owner, "accumulate", 1)
    return accumulate if isinstance(accumulate, int) and accumulate > 1 else 1


def is_number(value: Any) -> bool:
    """A real number, not true/false (``window=true`` is not a window of 1)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def run_file_name(owner: str, key: str, value: Any, example: str) -> str:
    """``value``, the name of a file the hook writes in the run dir; a ValueError naming ``key`` for one that names no
    file (``''``, ``/``) or one of the launcher's own files there."""
    import posixpath

    text = value if isinstance(value, str) else None
    normal = posixpath.normpath(text.replace("\\", "/")) if text else "."
    if text is None or normal in (".", "/", "..") or text.endswith(("/", "\\")):
        raise ValueError(f"{owner}: {key} should name a file in the run dir (e.g. {example}), got {value!r}")
    if normal in ("run.json", "submitted.json", "failure.json") or normal.startswith((".hydra/", "checkpoints/")):
        raise ValueError(f"{owner}: {key}={value!r} is a file the launcher keeps in the run dir; name another (e.g. {example})")
    return text
