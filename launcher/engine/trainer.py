"""The trainers: the whole training loop, in one file (see :class:`TrainerBase` for its pseudocode).

Model contract: ``model(batch)`` gets the batch as the loader yields it (on the device). In train mode it returns
the loss: a scalar tensor, or a dict of scalar tensors that are summed. In eval mode it returns a dict of scalar
metrics (or one tensor, taken as ``loss``), each averaged over the val samples and recorded as ``val/<name>``.
"""
from __future__ import annotations

import contextlib
import difflib
import inspect
import itertools
import logging
import math
import os
import re
import sys
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import torch
from torch.utils.data import IterableDataset
from torch import nn

from launcher.engine.hook import EVENTS, HookBase, is_number
from launcher.engine import distributed
from launcher.engine.loaders import DeadWorkerWatch, is_sized
from launcher.engine.checkpoint import TRUST_RISK, UntrustedCheckpointError, brief, load_checkpoint, load_newest_valid, resume_off
from launcher.engine.errors import (BatchCollateError, CheckpointWriteError, ConfigError, HookStateError, ModelInputError,  # noqa: F401
                             ModelOutputError, NonFiniteLoss, RunError, DataError, describe, what_to_mend)
from launcher.engine.rng import get_rng_state, set_rng_state
from launcher.engine.storage import EventStorage

# Errors found at a step's, epoch's or validation's end (a hook's config, the model's eval output, a batch that
# could not be loaded): the training so far is whole, so the run stops there with a checkpoint (TrainerBase._stop_for).
STOPS_AT_BOUNDARY = (ConfigError, ModelOutputError, BatchCollateError, DataError)

logger = logging.getLogger(__name__)

HookList = Union[Mapping[str, Optional[HookBase]], Sequence[Optional[HookBase]], None]


def resolve_device(device: str, local_rank: int = 0) -> torch.device:
    """``auto`` picks CUDA when present (the local rank's GPU), else the CPU; anything else goes to ``torch.device``."""
    if device == "auto" or (device == "cuda" and local_rank):
        return torch.device(f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ConfigError(f"trainer.device: {device!r} is not a device; use auto, cpu, cuda or cuda:N") from e
    if dev.type == "meta":  # tensors without data: the first loss.item() failed with torch's traceback
        raise ConfigError(f"trainer.device: {device!r} holds no data and cannot train; use auto, cpu, cuda or cuda:N")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"trainer.device: {device!r} was asked for but CUDA is not available here; use auto or cpu")
    if dev.type not in ("cpu", "cuda"):  # CUDA was checked above; probing it here would start its context early
        try:  # e.g. mps or xpu on a build or machine without them
            torch.empty(0, device=dev)
        except (RuntimeError, AssertionError) as e:
            raise ConfigError(f"trainer.device: {device!r} is not usable here ({brief(e)}); use auto, cpu, cuda or cuda:N") from e
    return dev


def move_to_device(batch: Any, device: torch.device, non_blocking: bool = False) -> Any:
    """Move every tensor in a (nested) tuple, list or dict to ``device``."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, Mapping):
        return type(batch)({k: move_to_device(v, device, non_blocking) for k, v in batch.items()})  # type: ignore[call-arg]
    if isinstance(batch, (list, tuple)):
        moved = [move_to_device(v, device, non_blocking) for v in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    return batch


def batch_size_of(batch: Any) -> int:
    """The first dimension of the first tensor found in the batch."""
    if isinstance(batch, torch.Tensor):
        return batch.shape[0] if batch.dim() else 1
    values = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else ()
    for v in values:
        n = batch_size_of(v)
        if n:
            return n
    return 0


# Other engines' event names, and the event that a hook here overrides instead.
_EVENT_ALIASES = {
    "before_run": "before_train", "after_run": "after_train",
    "before_train_epoch": "before_epoch", "after_train_epoch": "after_epoch",
    "before_train_iter": "before_step", "after_train_iter": "after_step", "before_iter": "before_step",
    "after_iter": "after_step", "before_val_epoch": "before_val", "after_val_epoch": "after_val",
    "before_validation": "before_val", "after_validation": "after_val", "before_val_iter": "before_val",
    "after_val_iter": "after_val", "on_train_start": "before_train", "on_train_end": "after_train",
    "on_train_epoch_start": "before_epoch", "on_train_epoch_end": "after_epoch",
    "on_train_batch_start": "before_step", "on_train_batch_end": "after_step",
    "on_validation_start": "before_val", "on_validation_end": "after_val",
}


def _warn_unknown_events(hook: HookBase) -> None:
    """Warn about a hook's methods named like events that are none of ``EVENTS`` (mmcv's ``after_train_iter``,
    Lightning's ``on_train_batch_end``): the trainer never calls them, and would say nothing."""
    stray = [n for n in dir(type(hook)) if (n.startswith(("before_", "after_")) or n in _EVENT_ALIASES)
             and n not in EVENTS and callable(getattr(type(hook), n, None))]
    for n in stray:
        close = _EVENT_ALIASES.get(n) or next(iter(difflib.get_close_matches(n, EVENTS, n=1)), None)
        logger.warning("hook %s: %s.%s is not an event of this trainer and is never called%s; the events are %s",
                       hook.name, type(hook).__name__, n, f" (did you mean {close}?)" if close else "", ", ".join(EVENTS))


def _qualified(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _draining(queue: List[Callable[[], None]]) -> Iterator[Callable[[], None]]:
    """The functions of ``queue``, each taken off it as it is reached (those appended meanwhile too)."""
    while queue:
        yield queue.pop(0)


class StreamEnded(Exception):
    """A stream's pass ran out of batches (where ``next`` would raise StopIteration)."""


class StreamPass:
    """One pass over a stream, ending in :class:`StreamEnded`, so a StopIteration raised inside a step is never taken
    for the data's end. Under DDP (``ranks``: the trainer) the ranks agree at each batch whether all of them have
    one, so a rank with fewer batches ends the pass on all of them instead of leaving them in a collective."""

    __slots__ = ("_batches", "_ranks")

    def __init__(self, batches: Iterator, ranks: Optional["TrainerBase"] = None) -> None:
        self._batches = batches
        self._ranks = ranks

    def __iter__(self) -> "StreamPass":
        return self

    def __next__(self) -> Any:
        try:
            batch = next(self._batches)
        except StopIteration:
            if self._ranks is not None:
                distributed.max_int(1)  # this rank has run out: the others end the pass with it
            raise StreamEnded from None
        if self._ranks is not None and distributed.max_int(0):
            self._ranks._stream_ended_elsewhere()
            raise StreamEnded
        return batch


_END = object()  # what _fetch returns at the end of a pass that has an end


def _fetch(batches: Iterator, split: str, which: Callable[[], str], *end: Any) -> Any:
    """``next(batches, *end)``; an error of the data's own loading raised as the launcher's, naming ``split``'s batch
    (``which()``: its text is built only then, not on every step)."""
    try:
        return next(batches, *end)
    except (StreamEnded, StopIteration, ConfigError, RunError):
        raise
    except Exception as err:
        raise _load_failure(err, split, which()) from err


_UNSTACKABLE = ("stack expects each tensor to be equal size", "Trying to resize storage that is not resizable",
                "each element in list of batch should be of equal size")


def _said(err: BaseException) -> str:
    """``Type: last line`` of ``err``; a DataLoader worker's error already ends its message (its traceback) so."""
    text = str(err)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    return lines[-1] if "Original Traceback" in text else f"{type(err).__name__}: {lines[-1]}"


def _load_failure(err: Exception, split: str, which: str) -> Exception:
    """A :class:`BatchCollateError` where torch's collate could not stack the samples, else a :class:`DataError`."""
    return _collate_failure(err, split, which) or _data_failure(err, split, which)


def _collate_failure(err: Exception, split: str, which: str) -> Optional[Exception]:
    """A :class:`BatchCollateError` for torch's collate failing on samples of other shapes, else None."""
    import traceback

    text = str(err)
    if not any(words in text for words in _UNSTACKABLE):
        return None
    in_collate = "utils/data/_utils/collate.py" in text or any(  # a worker's: its traceback is in the message
        frame.filename.replace("\\", "/").endswith("utils/data/_utils/collate.py") for frame in traceback.extract_tb(err.__traceback__))
    if not in_collate:
        return None
    said = _said(err)
    return BatchCollateError(
        f"{split}: {which} could not be made of its samples (torch's collate: {said}); the samples of a batch need one "
        f"structure and shape{'' if 'but got' in said else ' (with data.num_workers=0 torch names the shapes that differ)'}")


def _data_failure(err: Exception, split: str, which: str) -> DataError:
    """A :class:`DataError` naming the error's type and last line, and the innermost line of the user's code."""
    import sysconfig
    import traceback

    text = str(err).strip()
    libraries = tuple(os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("stdlib", "purelib", "platlib")) + \
        (os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep,)  # not the user's: Python's, packages', the launcher's
    if "Original Traceback" in text:  # a worker's: torch puts its traceback in the message
        frames = [(f, int(n), fn) for f, n, fn in re.findall(r'File "([^"]+)", line (\d+), in (\S+)', text)]
    else:
        frames = [(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(err.__traceback__)]
    own = [f for f in frames if not os.path.realpath(f[0]).startswith(libraries)]  # none: a worker killed, a timeout
    where = f" (at {own[-1][0]}:{own[-1][1]}, in {own[-1][2]})" if own else ""
    return DataError(f"{split}: loading {which} raised {_said(err)}{where}")


def _check_capturable(optimizer: torch.optim.Optimizer, device: torch.device) -> None:
    """``capturable=true`` (a CUDA-graph optimizer) on a device it does not run on failed after the first step."""
    if not any(group.get("capturable") for group in optimizer.param_groups):
        return
    try:
        from torch.optim.optimizer import _get_capturable_supported_devices  # private: the list torch checks against

        supported = list(_get_capturable_supported_devices())
    except Exception:  # noqa: BLE001 -- moved or changed: CUDA is where it runs
        supported = ["cuda"]
    if device.type not in supported:
        raise ConfigError(f"optimizer.capturable=true: {type(optimizer).__name__} captures its steps on "
                          f"{', '.join(supported)} only, and this run trains on {device}; leave capturable out")


def _check_forward_takes_a_batch(model: nn.Module) -> None:
    """A ``forward(self, x, y)`` cannot take ``model(batch)``: said before training, not as a TypeError at step 0."""
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(None)
    except TypeError:
        raise ConfigError(f"model._target_: {_qualified(type(model))}.forward{signature} cannot take what the trainer "
                          f"passes: model(batch), the batch as the loader yields it (unpack it in forward: x, y = batch)") from None


def check_devices(devices: Any, device: Any = "auto", spawned: bool = True) -> int:
    """``trainer.devices``, checked before anything is built: processes this launcher starts (``spawned``) are one
    per GPU on CUDA and at most one per usable core on the CPU (each imports torch, a few hundred MB)."""
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise ConfigError(f"trainer.devices should be an integer of at least 1 (processes to train with), got {devices!r}")
    if devices == 1 or not spawned:  # torchrun or srun started the processes: they are theirs to count
        return devices
    kind = resolve_device(str(device)).type  # a device this machine lacks is named here
    if kind == "cuda" and devices > torch.cuda.device_count():
        raise ConfigError(f"trainer.devices={devices}: this machine has {torch.cuda.device_count()} CUDA device(s), "
                          f"one process each; use trainer.devices={torch.cuda.device_count()} or fewer")
    if kind == "cpu" and devices > distributed.usable_cores():
        raise ConfigError(f"trainer.devices={devices}: training on the CPU takes one process per core, and this process "
                          f"may use {distributed.usable_cores()}; use trainer.devices={distributed.usable_cores()} or fewer")
    return devices


MAX_LENGTH = 2**31 - 1  # epochs or steps: more is no run's length, but a typo


def _positive_length(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ConfigError(f"trainer.{key} should be an integer greater than zero, got {value!r}")
    if value > MAX_LENGTH:
        raise ConfigError(f"trainer.{key} should be an integer from 1 to 2**31-1 ({MAX_LENGTH}), got {value!r}")
    return value


def _as_tensor_dict(out: Any, model: nn.Module, mode: str) -> Dict[str, torch.Tensor]:
    """``out`` as a dict of scalar tensors; in eval mode a metric may also be a plain number (``acc.item()``)."""
    if isinstance(out, torch.Tensor):
        if out.numel() == 1:
            return {"loss": out}
    elif isinstance(out, Mapping) and out:
        if all(isinstance(v, torch.Tensor) and v.numel() == 1 for v in out.values()):
            return dict(out)
        if mode == "eval" and all((isinstance(v, torch.Tensor) and v.numel() == 1) or is_number(v) for v in out.values()):
            return {k: v if isinstance(v, torch.Tensor) else torch.tensor(float(v)) for k, v in out.items()}
    logits = f" (outputs such as logits? in {mode} mode forward computes {'the loss' if mode == 'train' else 'the loss or metrics'} " \
        "from the batch; docs/contracts.md)" if isinstance(out, torch.Tensor) else ""
    raise ModelOutputError(f"{type(model).__name__}.forward returned {_describe_output(out, mode)} in {mode} mode; the trainer "
                           f"accepts a scalar loss tensor or a non-empty dict of scalar tensors{' or numbers' if mode == 'eval' else ''}"
                           f"{logits}")


def _batch_misfit(model: nn.Module, batch: Any, err: BaseException) -> Optional[ModelInputError]:
    """A :class:`ModelInputError` where ``err`` (from ``model(batch)``) comes of a batch of several parts (``(x, y)``,
    a dict) given to a forward that takes one tensor; else None."""
    if not isinstance(batch, (list, tuple, Mapping)):
        return None
    text = str(err)
    kind = re.escape(type(batch).__name__)
    # torch's argument parser given the batch first, or the batch used as a tensor; other errors are the model's own
    given_first = rf"\(position 1\) must be \w+, not {kind}\b|invalid combination of arguments - got \({kind}\b"
    if not re.search(rf"{given_first}|^'{kind}' object has no attribute", text):
        return None
    given = describe(dict(batch) if isinstance(batch, Mapping) else batch)
    return ModelInputError(
        f"{type(model).__name__}.forward failed on the first batch: {type(err).__name__}: {text.splitlines()[0].rstrip(':')}. "
        f"model(batch) gets the batch as loaded, here {given}: forward takes the whole batch, unpacks it (x, y = batch) and returns the loss")


def _describe_output(out: Any, mode: str = "train") -> str:
    """What a model returned that is not a loss (or metrics), named so that the fix is plain."""
    if isinstance(out, Mapping):
        if not out:
            return "an empty dict"
        bad = [f"{k!r}: {describe(v)}" for k, v in out.items()
               if not (isinstance(v, torch.Tensor) and v.numel() == 1) and not (mode == "eval" and is_number(v))]
        return f"a dict whose values are not all scalar tensors ({', '.join(bad)})"
    return describe(out)


class TrainerBase:
    """Holds the model, optimizer, data, hooks and :class:`EventStorage`, and runs the loop::

        resume_or_load()                     # the newest valid checkpoint, or load_from's weights
        before_train
        try:
            run()                            # IterTrainer: epochs until max_iters; EpochTrainer: the workflow
                train_epoch():
                    [boundary]; before_epoch (at an epoch's start)
                    for each batch left in the epoch:
                        before_step; run_step(); after_step
                        [boundary]           # not after the epoch's last step
                    after_epoch
                validate():                  # from a hook, or a workflow's val phase
                    before_val; eval loop; after_val (val_failed if the pass raised)
            [boundary]
        finally:
            after_train                      # always; then what hooks queued in it

    At a step boundary every hook is done with the steps so far: the functions hooks gave :meth:`call_at_boundary`
    run (a checkpoint), and a stop asked for (a hook, a signal; under DDP agreed by the ranks) takes effect.
    ``iter`` counts optimizer steps done; in ``before_step``/``after_step`` it is the running step's 0-based index,
    and the storage keys what is recorded by it, so a checkpoint after N steps covers the scalars with ``iter < N``.
    ``epoch`` counts finished passes the same way; in ``before_val``/``after_val`` it is the epochs completed.
    Subclasses decide how long to train (:meth:`run`).
    """

    FINITE_CHECK_PERIOD = 20  # steps between finiteness checks of losses on an accelerator
    SYNC_FREE_DEVICES = ("cpu",)  # reading a scalar there costs no device sync: check every step
    STOP_SYNC_PERIOD = 10  # steps between the ranks' agreement on a stop, under DDP
    LENGTH_KEY = "max_iters"  # the trainer.* setting that gives the run's length

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> None:
        """Refuse (ConfigError) what ``cfg.trainer`` (plain values) gets wrong, before the data and hooks are built."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: Union[torch.optim.Optimizer, Callable[..., torch.optim.Optimizer]],
        data: Any,
        hooks: HookList = None,
        device: str = "auto",
        work_dir: Union[str, Path] = ".",
        resume: Union[str, bool] = "auto",
        load_from: Optional[str] = None,
        devices: int = 1,
        trust_checkpoint: bool = False,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.devices = check_devices(devices, spawned=False)  # the run layer spawns the processes
        self.dist = distributed.current()  # None in a single process
        self.rank = self.dist.rank if self.dist else 0
        self.world_size = self.dist.world_size if self.dist else 1
        self.is_main = self.rank == 0  # only the main process writes files: logs, checkpoints, run.json
        self.device = resolve_device(device, self.dist.local_rank if self.dist else 0)
        if type(self).run_step is TrainerBase.run_step and type(self).validate is TrainerBase.validate:
            _check_forward_takes_a_batch(model)
        self.model = model.to(self.device)
        self.optimizer = optimizer if isinstance(optimizer, torch.optim.Optimizer) else optimizer(self.model.parameters())
        _check_capturable(self.optimizer, self.device)
        # What the step calls (the model, or its DDP wrapper); hooks and checkpoints use ``model``.
        self.train_model: nn.Module = self.model
        if self.dist is not None:
            from torch.nn.parallel import DistributedDataParallel

            ids = [self.device.index or 0] if self.device.type == "cuda" else None
            self.train_model = DistributedDataParallel(self.model, device_ids=ids, gradient_as_bucket_view=True)
        self.data = data
        self.work_dir = Path(work_dir)
        self.checkpoint_dir = self.work_dir / "checkpoints"
        self.resume = self._check_resume(resume)
        if not isinstance(trust_checkpoint, bool):
            raise ConfigError(f"trainer.trust_checkpoint: {trust_checkpoint!r} is not accepted; use true or false")
        self.trust_checkpoint = trust_checkpoint  # resume from a checkpoint that holds Python objects (runs code)
        self.load_from = load_from
        self._check_load_from(load_from)
        self.storage = EventStorage(reduce=distributed.mean_across_ranks if self.dist else None,
                                    gather=distributed.all_gather_object if self.dist else None)
        self.iter = 0
        self.epoch = 0
        self.inner_iter = 0  # steps done in the current epoch
        self.phase_index = 0  # workflow phases done (EpochTrainer)
        self.max_iters = 0
        # created, running, then: completed, stopped (asked to, finished), interrupted (resumable), failed, aborted
        self.status = "created"
        self.stop_reason: Optional[str] = None
        self._interrupt = False
        self._stop_wanted = 0  # under DDP: 1 stop, 2 interrupt, asked for on this rank and not yet agreed
        self._stop_asked_reason: Optional[str] = None
        self._deferred: Optional[Exception] = None  # the error the run stops for at a boundary: see _stop_for
        self._val_raised_under_ddp = False  # a rank's validation pass raised: its peers may wait in a collective
        self._at_boundary: List[Callable[[], None]] = []
        self._in_step = False  # between before_step and the end of after_step
        self._epoch_ending = False  # in after_epoch, where epoch is still the 0-based index of the epoch ending
        self._rng_to_restore: Optional[Dict[str, Any]] = None
        self._epoch_start: Optional[tuple] = None  # (epoch, the random state a loader of the user's began it from)
        self.resumed_from: Optional[Path] = None
        self._train_started = 0.0  # time.time() as train() began
        self._resumed_length: Optional[int] = None  # max_iters of the run that wrote the checkpoint resumed from
        self.started_at: Optional[int] = None  # the iteration this train() began from, once resumed
        self.last_val: Dict[str, float] = {}
        self._validated_at: Optional[int] = None  # steps done at the last validation
        self._said_nonfinite: set = set()  # val metrics warned of as NaN or infinite
        self.batch: Any = None  # the batch of the current step, as the model received it
        self.data_time = 0.0  # seconds the current step waited for its batch
        this = weakref.proxy(self)  # held weakly, as hooks hold it: no cycle keeps the trainer alive
        self._dead_workers = DeadWorkerWatch(lambda err: this._worker_died(err))
        self._validating = False
        self.meta: Dict[str, Any] = {}  # about the run, for hooks: e.g. {"overrides": [...], "seed": 0}
        self.rerun_hint = "the same command"  # how to run this run again in its dir, for advice (the run layer's)
        self.train_loader = self.build_train_loader()
        self.val_loader = self.build_val_loader()
        # None for a stream of unknown length (an IterableDataset without __len__): its epochs end where it does
        self.steps_per_epoch: Optional[int] = len(self.train_loader) if is_sized(self.train_loader) else None  # type: ignore[arg-type]
        self._non_blocking = bool(getattr(self.train_loader, "pin_memory", False)) and self.device.type == "cuda"
        self._move = self.device.type != "cpu"
        self._read_loss = self._reads_loss_each_step()
        self._train_keys: Dict[str, str] = {}  # loss name -> "train/<name>"
        self._unchecked: List[tuple] = []  # losses not yet checked for finiteness (accelerators)
        self._said_once: set = set()  # warnings a run says once
        self._hooks: List[HookBase] = []
        self._handlers: Dict[str, List[Callable[[], None]]] = {e: [] for e in EVENTS}
        self._step_hook: Any = None  # the hook that takes over backward and the optimizer step, if any
        self._forward_context: Callable[[], Any] = contextlib.nullcontext
        self.register_hooks(hooks)

    @staticmethod
    def _check_load_from(load_from: Any) -> None:
        if load_from in ("True", "False") and not Path(load_from).exists():  # true/false, made a string by the schema
            load_from = load_from == "True"
        if isinstance(load_from, bool) or (load_from is not None and not isinstance(load_from, (str, os.PathLike))):
            given = str(load_from).lower() if isinstance(load_from, bool) else repr(load_from)
            raise ConfigError(f"trainer.load_from: {given} is not a file path; give a checkpoint or state_dict file, "
                              f"or null to start from fresh weights")
        if load_from is not None and Path(load_from).is_dir():
            raise ConfigError(f"trainer.load_from: {load_from!r} is a directory; give a checkpoint or state_dict file "
                              f"(in a run's checkpoints/, final.pt, or the file its 'last' names)")
        if load_from is not None and not Path(load_from).is_file():
            raise ConfigError(f"trainer.load_from: {load_from!r} does not exist (expected a checkpoint or state_dict file)")

    # -- construction points a subclass may override --------------------------------------------
    def build_train_loader(self) -> Iterable:
        return self.data.train_loader(**self.data_shard())

    def build_val_loader(self) -> Optional[Iterable]:
        return self.data.val_loader(**self.data_shard())

    @property
    def no_val_set(self) -> str:
        """Why there is no val loader, in words for a message."""
        if getattr(self.data, "val", None) is None and hasattr(self.data, "val"):
            return "the data config has no val set (data.val is null)"
        return f"the data object's val_loader() ({type(self.data).__name__}) returned None"

    def data_shard(self) -> Dict[str, int]:
        """``{rank, world_size}`` for the data's loaders under DDP (each process reads its share); else ``{}``."""
        return {"rank": self.rank, "world_size": self.world_size} if self.dist else {}

    # -- hooks -------------------------------------------------------------------------------
    def register_hooks(self, hooks: HookList) -> None:
        """Add hooks (a list, or a ``{name: hook}`` mapping); ``None`` entries are dropped."""
        items = list(hooks.items()) if isinstance(hooks, Mapping) else [(None, h) for h in hooks or ()]
        taken = {h.name for h in self._hooks}
        for name, hook in items:
            if hook is None:
                continue
            if not isinstance(hook, HookBase):
                raise TypeError(f"hook {name or ''!s} is a {_qualified(type(hook))}, not a hooks.HookBase; "
                                f"subclass HookBase to use it as a hook")
            name = name or type(hook).__name__
            base, n = name, 1
            while name in taken:
                name, n = f"{base}_{n}", n + 1
            taken.add(name)
            hook.name = name
            hook.trainer = weakref.proxy(self)
            self._hooks.append(hook)
            _warn_unknown_events(hook)
        self._hooks.sort(key=lambda h: h.priority)  # stable: equal priorities keep their order
        for event in EVENTS:  # call a hook only for the events it overrides and has not set to None
            self._handlers[event] = [
                getattr(h, event) for h in self._hooks
                if getattr(type(h), event) is not getattr(HookBase, event) and getattr(h, event) is not None
            ]
        owners = [h for h in self._hooks if callable(getattr(h, "optimizer_step", None))]
        if len(owners) > 1:
            raise TypeError(f"hooks {[h.name for h in owners]} each take over the optimizer step; keep one of them")
        self._step_hook = owners[0] if owners else None
        context = getattr(self._step_hook, "forward_context", None)
        self._forward_context = context if callable(context) else contextlib.nullcontext

    @property
    def hooks(self) -> List[HookBase]:
        return list(self._hooks)

    @property
    def steps_done(self) -> int:
        """Steps run so far, the one running included (in its ``after_step``, :attr:`iter` is its 0-based index)."""
        return self.iter + 1 if self._in_step else self.iter

    @property
    def last_step(self) -> int:
        """0-based index of the last step run (0 before any): what scalars recorded now are keyed by."""
        return self.iter if self._in_step else max(self.iter - 1, 0)

    @property
    def last_epoch(self) -> int:
        """0-based epoch of :attr:`last_step`: between epochs, the one just trained."""
        return self.epoch if self._in_step or self.inner_iter > 0 else max(self.epoch - 1, 0)

    def _call(self, event: str) -> None:
        for handler in self._handlers[event]:
            handler()

    def _call_at_end(self, event: str) -> None:
        """:meth:`_call` for an event at a step's, epoch's or validation's end, where a hook's config error
        stops the run with a checkpoint (:meth:`_stop_for`)."""
        handlers = self._handlers[event]
        try:  # costs nothing until it raises (Python 3.11+)
            for handler in handlers:
                handler()
        except STOPS_AT_BOUNDARY as err:
            self._stop_for(err, handlers, handler)

    # -- stops and boundaries --------------------------------------------------------------------
    def request_stop(self, reason: str, interrupt: bool = False) -> None:
        """Stop at the next step boundary: ``stopped`` (a hook's decision), or with ``interrupt`` ``interrupted``
        (a signal; resumable). Safe in a signal handler: it only sets attributes. Under DDP the ranks first agree
        (every ``STOP_SYNC_PERIOD`` steps and at each epoch's start), so all stop at the same boundary."""
        if self.dist is not None:
            self._stop_wanted = max(self._stop_wanted, 2 if interrupt else 1)
            self._stop_asked_reason = self._stop_asked_reason or reason
            return
        self._interrupt = self._interrupt or interrupt
        self.stop_reason = self.stop_reason or reason

    def call_at_boundary(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` at the next step boundary; in ``after_train``, once every hook's ``after_train`` has run."""
        self._at_boundary.append(fn)

    def at_boundary(self) -> None:
        """Run what hooks queued for the boundary; under DDP, agree on a stop now and then."""
        if self._at_boundary:  # most steps have nothing to run: no new list for them
            pending, self._at_boundary = self._at_boundary, []
            for fn in pending:
                fn()
        if self.dist is not None and not self.stop_reason and (self.inner_iter == 0 or self.iter % self.STOP_SYNC_PERIOD == 0):
            agreed = distributed.max_int(self._stop_wanted)  # one small all-reduce
            if agreed:
                self._interrupt = agreed == 2
                self.stop_reason = self._stop_asked_reason or "asked for on another rank"

    def _stop_at_boundary(self) -> bool:
        """:meth:`at_boundary`; whether the run stops here."""
        self.at_boundary()
        return bool(self.stop_reason)

    @property
    def stopping_for(self) -> Optional[Exception]:
        """The error this run stops for at a boundary (:meth:`_stop_for`), raised once the hooks' ``after_train`` ran."""
        return self._deferred

    def _stop_for(self, err: Exception, handlers: Sequence[Callable[[], None]], failed: Optional[Callable[[], None]]) -> None:
        """Stop at this boundary for ``err`` (one of ``STOPS_AT_BOUNDARY``) as for a signal, with a checkpoint to resume
        from once it is mended: the event's hooks after ``failed`` still run, and :meth:`train` raises ``err`` at the
        end. Outside training, and after a validation pass raised under DDP (peers may wait in its collectives),
        ``err`` is raised at once."""
        if self.status != "running" or self._val_raised_under_ddp:
            raise err
        if self._deferred is None:
            self._deferred = err
            self.request_stop("a config error" if isinstance(err, ConfigError) else f"a {type(err).__name__}", interrupt=True)
        for handler in handlers[list(handlers).index(failed) + 1:] if failed is not None else ():
            try:
                handler()
            except STOPS_AT_BOUNDARY as more:
                logger.error("%s", f"Config error: {more}" if isinstance(more, ConfigError) else f"{type(more).__name__}: {more}")

    # -- resume -----------------------------------------------------------------------------------
    @staticmethod
    def _check_resume(resume: Union[str, bool, None]) -> Union[str, bool]:
        if resume_off(resume):
            return False
        if resume is True or resume == "auto":
            return "auto"
        if isinstance(resume, str):
            if Path(resume).is_dir():
                raise ConfigError(f"trainer.resume: {resume!r} is a directory; give a checkpoint file in it "
                                  f"(its 'last' file names the newest), or auto, or false")
            if not Path(resume).is_file():
                raise ConfigError(f"trainer.resume: checkpoint {resume!r} does not exist; use auto, false or a checkpoint path")
            return resume
        raise ConfigError(f"trainer.resume: {resume!r} is not accepted; use auto, false or a checkpoint path")

    @property
    def lengthened(self) -> bool:
        """Whether this run trains on from a checkpoint of a shorter run (its length raised since): more training was
        asked for. A run resumed at the same length only continues, even from its ``final.pt``."""
        if self.resumed_from is None:
            return False
        if self._resumed_length is None:  # a checkpoint that does not say its run's length: its name does
            return self.resumed_from.name == "final.pt"
        return self.max_iters > self._resumed_length

    def resume_or_load(self) -> None:
        """Continue from a checkpoint (``resume``), else start from ``load_from``'s weights, else fresh."""
        found = self._find_checkpoint()
        if found is None:
            if self.load_from:
                self.load_weights(self.load_from)
            return
        path, state = found
        self._check_checkpoint_fits(path, state)
        try:
            self.load_state_dict(state)
        except HookStateError as err:
            raise HookStateError(f"resuming from {str(path)!r}: {err}") from err.__cause__
        self.resumed_from = path
        length = state.get("max_iters")  # older checkpoints lack it
        self._resumed_length = length if isinstance(length, int) else None
        if self.iter > self.max_iters:
            self._refuse_past_length(path)
        if self.inner_iter == 0 and self.epoch > 0:  # at an epoch's end (the epoch counter already on the next one)
            logger.info("Resumed from %s at iteration %d (the end of epoch %s)", path, self.iter, self.epoch_text(self.epoch - 1))
        else:
            logger.info("Resumed from %s at iteration %d (epoch %s, after %d of its steps)", path, self.iter,
                        self.epoch_text(self.epoch), self.inner_iter)
        if self.load_from:
            logger.warning("trainer.load_from=%s is not used: this run resumes from its own checkpoint %s (to start from "
                           "it, give a new hydra.run.dir)", self.load_from, path)

    def _find_checkpoint(self) -> Optional[tuple]:
        """``(path, state)`` of the checkpoint to resume from, or None."""
        try:
            if self.resume == "auto":
                return load_newest_valid(self.checkpoint_dir, trust=self.trust_checkpoint)
            if self.resume:
                return Path(self.resume), load_checkpoint(self.resume, trust=self.trust_checkpoint)
        except UntrustedCheckpointError as err:
            raise ConfigError(f"trainer.resume: {err}: {TRUST_RISK}. Only if you trust the file, resume with "
                              f"trainer.trust_checkpoint=true") from None
        except RuntimeError as err:
            raise ConfigError(f"trainer.resume: {err}") from err
        return None

    def _check_checkpoint_fits(self, path: Path, state: Mapping[str, Any]) -> None:
        """Refuse a checkpoint of no training run, of another model or optimizer, or of another number of processes."""
        if not isinstance(state.get("model"), Mapping) or "iter" not in state:
            raise ConfigError(f"trainer.resume: {str(path)!r} is not a training checkpoint (it holds "
                              f"{', '.join(map(str, list(state)[:6])) or 'nothing'}; a checkpoint holds model, optimizer, iter, ...); "
                              f"to start from its weights, use trainer.load_from")
        weights_mismatch = self._weights_mismatch(state.get("model", {}), "there")
        mismatch = weights_mismatch or self._optimizer_mismatch(state)
        if mismatch:
            weights = "" if weights_mismatch else f", or start a new run from its weights: trainer.load_from={str(path)!r} with another run dir"
            raise ConfigError(f"trainer.resume: checkpoint {str(path)!r} does not fit this run: {mismatch}; resume it with "
                              f"the config it was made with (its run dir's .hydra/config.yaml){weights}")
        writers = len(state.get("rng_ranks") or [None])  # the processes of the run that wrote it
        if writers != self.world_size:
            raise ConfigError(f"trainer.resume: checkpoint {str(path)!r} was written by a run of {writers} process(es), and "
                              f"this run has {self.world_size}: so resume it with trainer.devices={writers}, or start a "
                              f"new run dir with trainer.load_from=<that file>")

    def _refuse_past_length(self, path: Path) -> None:
        """A run rerun shorter than its checkpoint cannot train back (ending it there would label a longer run's model
        with the shorter config): say what length ends it there."""
        key, have = self.LENGTH_KEY, getattr(self, self.LENGTH_KEY, self.max_iters)
        per = 1 if key == "max_iters" else max(getattr(self, "steps_per_epoch", 1) or 1, 1)  # iterations per unit
        need, unit = -(-self.iter // per), "iterations" if key == "max_iters" else "epochs"
        made = f" (made by an attempt of {self._resumed_length // per} {unit})" \
            if self._resumed_length and self._resumed_length % per == 0 else ""
        then = "to end it there (more trains it on)" if need * per == self.iter else "or more to train it on from there"
        if self.resume == "auto":  # its own checkpoint
            raise ConfigError(f"trainer.{key}={have}: this run's checkpoint {path.name}{made} is at iteration {self.iter}, past "
                              f"this run's length, and a run cannot train back. Set trainer.{key}={need} {then}, or use another run dir")
        raise ConfigError(f"trainer.{key}={have}: trainer.resume={str(path)!r} is at iteration {self.iter}, past "
                          f"this run's length: a run cannot train back. Set trainer.{key}={need} {then}")

    def _optimizer_mismatch(self, state: Mapping[str, Any]) -> Optional[str]:
        """How the checkpoint's optimizer differs from this run's (its class, or its parameter groups); None if it fits."""
        saved_class = state.get("optimizer_class")  # older checkpoints lack it
        own_class = _qualified(type(self.optimizer))
        if saved_class and saved_class != own_class:
            return f"it was made with optimizer {saved_class}, and this run's is {own_class}"
        groups = state.get("optimizer", {}).get("param_groups", [])
        if len(groups) != len(self.optimizer.param_groups):
            return f"its optimizer has {len(groups)} parameter group(s), and this run's has {len(self.optimizer.param_groups)}"
        for i, (saved, own) in enumerate(zip(groups, self.optimizer.param_groups)):
            if len(saved.get("params", ())) != len(own["params"]):
                return (f"its optimizer's parameter group {i} holds {len(saved.get('params', ()))} parameters, "
                        f"and this run's holds {len(own['params'])}")
        return None

    def _weights_mismatch(self, weights: Mapping[str, Any], where: str, missing_ok: bool = False) -> Optional[str]:
        """How ``weights`` differ from the model's: the first parameter of another shape, or (unless ``missing_ok``)
        the parameters one has and the other lacks; None if they fit."""
        own = self.model.state_dict()
        for name, tensor in weights.items():
            if name in own and hasattr(tensor, "shape") and tensor.shape != own[name].shape:
                return f"parameter {name!r} has shape {tuple(tensor.shape)} {where} but {tuple(own[name].shape)} in the model"
        if missing_ok:
            return None
        missing, unexpected = sorted(set(own) - set(weights)), sorted(set(weights) - set(own))

        def listed(names: List[str]) -> str:
            return ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")

        parts = ([f"the model has {listed(missing)}, which the weights {where} lack"] if missing else []) + \
            ([f"the weights {where} have {listed(unexpected)}, which the model lacks"] if unexpected else [])
        return "; ".join(parts) or None

    def load_weights(self, path: str) -> None:
        """Model weights only (fine-tuning); a shape mismatch names the parameter and both shapes."""
        try:
            state = load_checkpoint(path)  # a file from elsewhere: unpickling must not run its code
        except UntrustedCheckpointError as err:
            raise ConfigError(f"trainer.load_from: {err}; if you trust it, load its weights alone: python -c \"import torch; s = "
                              f"torch.load('{path}', weights_only=False); torch.save(s.get('model', s), 'weights.pt')\"") from None
        except (OSError, RuntimeError) as err:
            raise ConfigError(f"trainer.load_from: {err}") from err
        weights = state.get("model", state)
        mismatch = self._weights_mismatch(weights, f"in {path}", missing_ok=True)
        if mismatch:
            raise ConfigError(f"trainer.load_from: {mismatch}")
        missing, unexpected = self.model.load_state_dict(weights, strict=False)
        if missing or unexpected:
            raise ConfigError(f"trainer.load_from: {path} does not match the model: missing {sorted(missing)}, "
                              f"unexpected {sorted(unexpected)}")
        logger.info("Loaded model weights from %s", path)

    # -- the loop ----------------------------------------------------------------------------
    def train(self) -> Dict[str, float]:
        """Run :meth:`run` between ``before_train`` and ``after_train``; return the final metrics."""
        self.status = "running"
        self._train_started = time.time()
        self._read_loss = self._reads_loss_each_step()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with self._failure_status():  # a checkpoint refused: the run never began, and no hook ran
            self.resume_or_load()
        try:
            with self._failure_status():
                self.started_at = self.iter
                self._call("before_train")
                self._restore_rng()
                self.run()
                self.at_boundary()
                self._set_end_status()
        finally:
            self._in_step = False
            self.storage.iter, self.storage.epoch = self.last_step, self.last_epoch
            try:
                self._after_train()
            finally:
                self._dead_workers.release()
        self._raise_stopped_for()
        return self.final_metrics()

    def run(self) -> None:
        raise NotImplementedError

    @contextlib.contextmanager
    def _failure_status(self) -> Iterator[None]:
        """On an exception: status ``aborted`` (Ctrl-C) or ``failed``, and the storage reads this rank's own values
        (the other ranks may be gone)."""
        try:
            yield
        except BaseException as err:
            self.status = "aborted" if isinstance(err, KeyboardInterrupt) else "failed"
            self.storage.stop_syncing()
            raise

    def _restore_rng(self) -> None:
        """The resumed random state, put back after ``before_train`` so that nothing draws between."""
        if self._rng_to_restore is not None:
            set_rng_state(self._rng_to_restore)
            self._rng_to_restore = None

    def _set_end_status(self) -> None:
        self.status = ("interrupted" if self._interrupt else "stopped") if self.stop_reason else "completed"
        if self.stop_reason and self._deferred is None:
            logger.warning("Stopped at iteration %d: %s", self.iter, self.stop_reason)

    def _raise_stopped_for(self) -> None:
        """Raise the error the run stopped for at a boundary (:meth:`_stop_for`), now that its checkpoint is written."""
        if self._deferred is None:
            return
        err, self._deferred = self._deferred, None
        self.status = "failed"
        if self.is_main:
            logger.warning("Stopped at iteration %d for the %s below, with a checkpoint: mend %s and run %s to train on from there",
                           self.iter, "config error" if isinstance(err, ConfigError) else "error", what_to_mend(err),
                           self.rerun_hint)
        raise err

    def _after_train(self) -> None:
        """Every hook's ``after_train``, even when one raises (each closes its files, writes its checkpoint); then what
        they queued for the boundary. The first hook error then fails the run; if training failed, its error stands
        and a hook's is logged."""
        failed = self.status in ("failed", "aborted")
        first: Optional[BaseException] = None
        first_hook: Any = None
        self._at_boundary = []
        for handler in itertools.chain(self._handlers["after_train"], _draining(self._at_boundary)):
            try:
                handler()
            except Exception as err:  # noqa: PERF203 -- once per run
                if failed or first is not None:
                    logger.error("Hook %s failed in after_train as well: %s: %s",
                                 getattr(getattr(handler, "__self__", None), "name", None) or getattr(handler, "__qualname__", handler),
                                 type(err).__name__, err, exc_info=err)
                else:
                    first, first_hook = err, getattr(handler, "__self__", None)
        if first is not None:
            self._say_finished_but(first, first_hook)
            self.status = "failed"
            raise first

    def _say_finished_but(self, err: BaseException, hook: Any) -> None:
        """A run that trained to its end and saved its ``final.pt`` (this attempt's), whose ``after_train`` failed: say
        that a rerun only retries the end."""
        final = Path(self.checkpoint_dir) / "final.pt"
        saved = not isinstance(err, CheckpointWriteError) and final.is_file() and \
            final.stat().st_mtime >= self._train_started - 1  # (file times may lag the clock by a tick)
        if self.status in ("completed", "stopped") and self.is_main and saved:
            what = what_to_mend(err) if isinstance(err, STOPS_AT_BOUNDARY) or hook is None else \
                f"hooks.{hook.name} ({_qualified(type(hook))})"
            logger.warning("Trained to iteration %d, its final checkpoint saved; what the run does at its end failed for the "
                           "error below: mend %s and run %s to finish it from there", self.iter, what, self.rerun_hint)

    def final_metrics(self, sync: bool = True) -> Dict[str, float]:
        """The latest value of every scalar (averaged over the ranks under DDP unless not ``sync``)."""
        return {k: v for k, (v, _) in self.storage.latest(sync=sync).items()}

    def train_epoch(self, until_iter: Optional[int] = None) -> bool:
        """Train over the rest of the current epoch, or until ``iter`` reaches ``until_iter``; return whether the
        epoch was finished."""
        if self._stop_at_boundary():
            return False
        self._begin_epoch()
        steps = self.steps_per_epoch or sys.maxsize
        while self.inner_iter < steps and (until_iter is None or self.iter < until_iter):
            try:
                self._train_step()
            except StreamEnded:  # the stream's pass, and so the epoch, ends here
                self._stream_ended()
                steps = self.inner_iter
                break
            except (BatchCollateError, DataError) as err:  # the batch could not be loaded: no step was taken
                self._stop_for_train_data(err)
                break
            if self.inner_iter < steps and self._stop_at_boundary():
                break
        self._end_pass()
        if self.inner_iter < steps:
            return False
        self._end_epoch()
        return True

    def _begin_epoch(self) -> None:
        """``before_epoch`` at an epoch's start (not when resumed inside it), and the batches it has left."""
        self.storage.begin_epoch(self.epoch, self.iter - self.inner_iter)
        if self.inner_iter == 0:
            self._call("before_epoch")
        self._data_iter = self._epoch_batches()

    def _train_step(self) -> None:
        """``before_step``, :meth:`run_step`, ``after_step``; then the step counts as done."""
        self.storage.iter = self.iter
        self._in_step = True
        try:
            self._call("before_step")
            self.run_step()
            self._call_at_end("after_step")
        finally:
            self._in_step = False
        self.iter += 1
        self.inner_iter += 1

    def _end_pass(self) -> None:
        """Done with the epoch's batches (ended, or stopped): check a stream's length, and the losses not checked yet."""
        if self.inner_iter == self.steps_per_epoch and isinstance(self._data_iter, StreamPass):
            self._check_stream_length()
        self._data_iter = iter(())
        self.batch = None
        self._check_unchecked()

    def _end_epoch(self) -> None:
        self.storage.iter = self.iter - 1
        self._epoch_ending = True  # a validation in after_epoch shows the trainer as after the epoch (see validate)
        try:
            self._call_at_end("after_epoch")
        finally:
            self._epoch_ending = False
        self.epoch += 1
        self.inner_iter = 0

    def _stop_for_train_data(self, err: Exception) -> None:
        """A train batch that could not be loaded stops the run at the boundary before its step, with a checkpoint to
        train on from once the data is mended. Raised at once under DDP (the other ranks are inside the step's
        collectives) and before the first step (nothing to keep)."""
        if self.dist is not None or self.iter == self.started_at:
            raise err
        if not getattr(self.train_loader, "num_workers", 0):
            logger.warning("The random state saved is the one after the failed batch began loading (data.num_workers=0): "
                           "random augmentation from there may differ from a run that never met it")
        self._stop_for(err, (), None)

    def _say_once(self, key: str, message: str, *args: Any, level: int = logging.WARNING) -> None:
        if key not in self._said_once:
            self._said_once.add(key)
            logger.log(level, message, *args)

    def _stream_ended(self) -> None:
        """A stream's pass ended: an error when it yielded nothing; said once when it falls short of its ``__len__``."""
        if self.inner_iter == 0:
            where = " on at least one rank" if self.dist is not None else ""
            raise RuntimeError(f"the train stream yielded no batch in epoch {self.epoch + 1}{where}; a pass must yield at "
                               f"least one{' on every rank' if where else ''}")
        if self.steps_per_epoch is not None:
            self._say_once("short stream", "The train stream ended after %d batches, short of the %d its length promises: "
                           "epoch %d ends there (so does every epoch that falls short)", self.inner_iter,
                           self.steps_per_epoch, self.epoch + 1)

    def _check_stream_length(self) -> None:
        """A stream's pass took the batches its ``__len__`` promises: ask for one more (every epoch, on every rank), and
        say once that a pass runs on past its length, whose rest is not trained on."""
        try:
            next(self._data_iter)
        except StreamEnded:
            return
        self._say_once("long stream", "The train stream had more batches after the %d its length promises: epoch %d ends "
                       "there, and the rest of each pass that runs over is not trained on. Make __len__ count what a pass "
                       "yields (docs/contracts.md)",
                       self.steps_per_epoch, self.epoch + 1)

    def _stream_ended_elsewhere(self) -> None:
        """Under DDP another rank's pass over the stream ended while this rank had batches left: said once."""
        self._say_once("uneven stream", "rank %d: the train stream's pass ended on another rank after %d batches; the rest of "
                       "this rank's is dropped (here and in any uneven epoch): give every rank as many batches",
                       self.rank, self.inner_iter)

    def epochs_in(self, steps: int) -> Optional[str]:
        """``2/3`` where ``steps`` steps make whole epochs, as the console numbers them; else None."""
        if not self.steps_per_epoch or steps <= 0 or steps % self.steps_per_epoch:
            return None
        return self.epoch_text(steps // self.steps_per_epoch - 1)

    def epoch_text(self, epoch: int) -> str:
        """The 0-based ``epoch`` as the console shows it: from 1, out of ``max_epochs`` where that is known."""
        if self.max_epochs is None:
            return str(epoch + 1)
        return f"{epoch + 1}/{self.max_epochs}"

    def _epoch_batches(self) -> Iterator:
        """An iterator over the current epoch's batches, past the ``inner_iter`` already trained on."""
        loader = self.train_loader
        if hasattr(loader, "set_epoch"):  # launcher.engine.loaders' loaders: they skip without loading
            loader.set_epoch(self.epoch, self.inner_iter)
            batches = self._watched(iter(loader))
            if isinstance(getattr(loader, "dataset", None), IterableDataset):
                return StreamPass(batches, self if self.dist is not None else None)
            return batches
        sampler = getattr(loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.epoch)
        if self.inner_iter:
            return self._skip_into_epoch(loader)
        if not isinstance(loader, (list, tuple)):  # batches ready-made draw nothing
            self._epoch_start = (self.epoch, _loader_rng_state(loader))
        return self._watched(iter(loader))

    def _skip_into_epoch(self, loader: Iterable) -> Iterator:
        """A loader of the user's own, resumed inside an epoch: the batches done read again, drawn from the random state
        the epoch began with (its order, its workers' seeds); then the run's own draws go on from the checkpoint's."""
        logger.warning("The train loader cannot skip batches: reading %d batches again to resume", self.inner_iter)
        start = self._epoch_start[1] if self._epoch_start and self._epoch_start[0] == self.epoch else None
        now = get_rng_state()
        if start is not None:
            _set_loader_rng_state(loader, start)
        batches = self._watched(iter(loader))
        for _ in range(self.inner_iter):
            next(batches)
        if start is not None:
            set_rng_state(now)
        return batches

    def _watched(self, batches: Iterator) -> Iterator:
        """``batches``, whose loader's workers are watched while the run trains (see :meth:`_worker_died`)."""
        if self.status == "running":
            self._dead_workers.watch(batches)
        return batches

    def _worker_died(self, err: RuntimeError) -> None:
        """A DataLoader worker died while this process was not waiting for a batch: the step (or validation) under way
        ends whole and the run stops at the next boundary with a checkpoint. Under DDP, and once training is over, the
        fetch that needs the dead worker's batch raises it (:class:`launcher.engine.loaders.DeadWorkerWatch`)."""
        if self.dist is not None or self.status != "running" or self._deferred is not None:
            return
        if self._validating:
            split, which = "data.val", f"the batches of the validation after {self.steps_done} steps"
        else:
            split, which = "data.train", f"the batches of epoch {self.epoch + 1}"
        error = DataError(f"{split}: loading {which} raised {_said(err)}")
        error.__cause__ = err
        self._stop_for(error, (), None)

    # -- the step ------------------------------------------------------------------------------
    def run_step(self) -> None:
        """One iteration: fetch the batch, forward, losses, backward, optimizer step.

        Sets ``batch`` and ``data_time`` (seconds spent waiting for the batch) for hooks; an override that fetches its
        own batch should set them too.
        """
        start = time.perf_counter()
        batch = _fetch(self._data_iter, "data.train", self._which_train_batch)
        if self._move:
            batch = move_to_device(batch, self.device, self._non_blocking)
        self.batch = batch
        self.data_time = time.perf_counter() - start  # recorded as ``data_time`` by the IterationTimer hook
        loss, losses, read = self._record_losses(self._forward(batch))
        if self._step_hook is not None:  # accumulation, clipping, AMP, a NaN policy: see hooks/optim.py
            self._step_hook.optimizer_step(loss, losses)
            return
        self.check_finite(loss, losses, read)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def _which_train_batch(self) -> str:
        return f"batch {self.inner_iter + 1} of epoch {self.epoch + 1}"

    def _forward(self, batch: Any) -> Any:
        """``train_model(batch)`` in the step hook's forward context (autocast); a first step whose forward cannot take
        the batch says so."""
        try:
            with self._forward_context():
                return self.train_model(batch)
        except (TypeError, AttributeError) as err:
            misfit = _batch_misfit(self.model, batch, err) if self.iter == self.started_at else None
            if misfit is None:
                raise
            raise misfit from err

    def _record_losses(self, out: Any) -> Tuple[torch.Tensor, Optional[Dict[str, torch.Tensor]], Optional[float]]:
        """Put the model's losses in the storage; return the loss to step on, the named losses (None for a single
        tensor), and the loss as a float where reading it costs no device sync."""
        if isinstance(out, torch.Tensor) and out.numel() == 1:  # the common case, without building a dict
            read = out.item() if self._read_loss else None  # kept as a tensor otherwise: read when a writer asks
            self.storage.put_scalar("train/loss", out if read is None else read)
            return out, None, read
        losses = _as_tensor_dict(out, self.model, "train")
        loss = sum(losses.values()) if len(losses) > 1 else next(iter(losses.values()))
        for name, value in losses.items():
            self.storage.put_scalar(self._train_keys.get(name) or self._train_keys.setdefault(name, f"train/{name}"), value)
        if len(losses) > 1:
            self.storage.put_scalar("train/total_loss", loss)
        return loss, losses, None  # type: ignore[return-value]

    def _reads_loss_each_step(self) -> bool:
        return self.device.type in self.SYNC_FREE_DEVICES  # asked once a run: ``device.type`` builds a new string

    def check_finite(self, loss: torch.Tensor, losses: Optional[Mapping[str, torch.Tensor]], read: Optional[float] = None) -> None:
        """Raise :class:`NonFiniteLoss` for a non-finite loss, naming the step and every loss.

        On the CPU every step is checked; on an accelerator every ``FINITE_CHECK_PERIOD`` steps with one sync (the
        error still names the first bad step). ``read`` is the loss as a float when the step has read it already.
        """
        if read is not None or loss.device.type in self.SYNC_FREE_DEVICES:
            if not math.isfinite(loss.item() if read is None else read):
                self._raise_non_finite(self.iter, losses or {"loss": loss})
            return
        self._unchecked.append((self.iter, loss.detach(), {k: v.detach() for k, v in (losses or {"loss": loss}).items()}))
        if len(self._unchecked) >= self.FINITE_CHECK_PERIOD:
            self._check_unchecked()

    def _check_unchecked(self) -> None:
        pending, self._unchecked = self._unchecked, []
        if pending and not bool(torch.isfinite(torch.stack([p[1].float().reshape(()) for p in pending])).all()):
            for it, total, losses in pending:
                if not math.isfinite(total.item()):
                    self._raise_non_finite(it, losses)

    def _raise_non_finite(self, iteration: int, losses: Mapping[str, torch.Tensor]) -> None:
        values = ", ".join(f"{k}={v.item()}" for k, v in losses.items())
        groups = getattr(getattr(self, "optimizer", None), "param_groups", None) or []
        lrs = sorted({f"{float(g['lr']):.3g}" for g in groups if "lr" in g})
        hint = f"; the lr was {'/'.join(lrs)}: a lower optimizer.lr, or the optimizer_step hook's clip_grad_norm or " \
            "nonfinite=skip, may carry the run past it" if lrs else ""
        # numbered as the console's progress line (from 1) and as metrics.jsonl (iter from 0)
        raise NonFiniteLoss(f"Loss became infinite or NaN in step {iteration + 1} of {self.max_iters} (epoch "
                            f"{self.epoch_text(self.epoch)}; iter {iteration}, as metrics.jsonl numbers steps): {values}{hint}")

    # -- validation ------------------------------------------------------------------------------
    @torch.no_grad()
    def validate(self) -> Dict[str, float]:
        """One pass over the validation data in eval mode; records and returns ``val/*``.

        Training's random state is put back afterwards, so a validation more or less changes nothing in the training
        that follows. In ``before_val`` and ``after_val`` hooks see ``epoch`` as the epochs completed.
        """
        if self.val_loader is None:
            raise RuntimeError(f"validation was asked for but {self.no_val_set}")
        with self._as_after_epoch():
            self.storage.iter, self.storage.epoch = self.last_step, self.last_epoch
            training_rng = get_rng_state()  # before the before_val hooks, which may draw too (PreciseBN's forwards)
            self._call("before_val")
            with self._eval_pass(training_rng):
                sums, counts = self._eval_loop()
            self.last_val = self._val_metrics(sums, counts)
            self._validated_at = self.steps_done
            self._warn_nonfinite_val()
            self.storage.put_scalars(smoothing_hint=False, **self.last_val)
            self._call_at_end("after_val")
        return self.last_val

    @contextlib.contextmanager
    def _as_after_epoch(self) -> Iterator[None]:
        """In ``after_epoch`` (``epoch`` still the ending one's index, ``inner_iter`` its length), the trainer shown as after it."""
        if not self._epoch_ending:
            yield
            return
        epoch, inner = self.epoch, self.inner_iter
        self.epoch, self.inner_iter, self._epoch_ending = epoch + 1, 0, False
        try:
            yield
        finally:
            self.epoch, self.inner_iter, self._epoch_ending = epoch, inner, True

    @contextlib.contextmanager
    def _eval_pass(self, training_rng: Dict[str, Any]) -> Iterator[None]:
        """The model in eval mode, then back with training's random state; ``val_failed`` where the pass raised (the EMA
        hook puts the model's own weights back before the error goes on)."""
        was_training = self.model.training
        self.model.eval()
        failed = True
        self._validating = True
        try:
            yield
            failed = False
        finally:
            self._validating = False
            self.model.train(was_training)
            set_rng_state(training_rng)
            self._val_raised_under_ddp = failed and self.dist is not None
            if failed:
                self._call("val_failed")

    def _eval_loop(self) -> Tuple[Dict[str, torch.Tensor], Dict[str, int]]:
        """Each metric summed over this rank's val samples, and the samples it covers (a metric some batches leave
        out is averaged over the rest)."""
        sums: Dict[str, torch.Tensor] = {}
        counts: Dict[str, int] = {}
        batches = self._watched(iter(self.val_loader))  # type: ignore[arg-type]
        for index in itertools.count(1):
            batch = _fetch(batches, "data.val", lambda index=index: f"batch {index} of the validation after {self.steps_done} steps", _END)
            if batch is _END:
                break
            if self._move:
                batch = move_to_device(batch, self.device, self._non_blocking)
            n = batch_size_of(batch)
            with self._forward_context():
                out = self.model(batch)
            for name, value in _as_tensor_dict(out, self.model, "eval").items():
                sums[name] = sums.get(name, 0) + value.detach().float().reshape(()) * n
                counts[name] = counts.get(name, 0) + n
        return sums, counts

    def _val_metrics(self, sums: Dict[str, torch.Tensor], counts: Dict[str, int]) -> Dict[str, float]:
        """``val/<name>``: each metric's mean over the val samples of every rank."""
        names = list(sums)
        if self.dist is not None:  # the metrics any rank returned, in one order on every rank
            names = list(dict.fromkeys(k for rank_names in distributed.all_gather_object(names) for k in rank_names))
        if not names:  # no rank had a batch: a stream that ended at once (a sized empty val set is refused as built)
            self._call("val_failed")  # as for an error in the pass: the EMA puts the model's weights back
            dataset = getattr(self.val_loader, "dataset", None)
            raise ConfigError(f"data.val: its loader yielded no batches{f' ({type(dataset).__name__})' if dataset is not None else ''}, "
                              f"so validation has no metrics; give it samples, or set data.val=null to train without validation")
        parts = [sums[k] if k in sums else torch.zeros(()) for k in names]
        if len({t.device for t in parts}) == 1:  # one transfer for all of them
            totals = torch.stack(parts).cpu().double().tolist()
        else:  # metrics on different devices (a number returned beside CUDA tensors)
            totals = [float(t) for t in parts]
        samples = [counts.get(k, 0) for k in names]
        if self.dist is not None:  # every rank read its own share of the val set: add them up
            reduced = distributed.sum_across_ranks(torch.tensor([*totals, *samples], dtype=torch.float64),
                                                   distributed.layout_id(names))
            if reduced is None:
                raise RuntimeError(f"validation: rank {self.rank} returned metrics {names}, other ranks returned others")
            values = reduced.tolist()
            totals, samples = values[:len(names)], values[len(names):]
        return {f"val/{k}": t / max(c, 1) for k, t, c in zip(names, totals, samples)}

    def _warn_nonfinite_val(self) -> None:
        """Once a metric: a non-finite val metric is recorded as such."""
        bad = [k for k, v in self.last_val.items() if not math.isfinite(v) and k not in self._said_nonfinite]
        if bad and self.is_main:
            self._said_nonfinite.update(bad)
            logger.warning("Validation after %d steps: %s: the model's forward in eval mode returned a non-finite value "
                           "for some batch; recorded as such", self.steps_done, ", ".join(f"{k} = {self.last_val[k]}" for k in bad))

    # -- checkpoint state ----------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        """Everything needed to continue exactly from the current step boundary. Under DDP every rank calls it there:
        it gathers the ranks' RNG states and averages the metrics not yet written, as that write would have."""
        if self.dist is not None:
            self.storage.synchronize()
        rng = get_rng_state()
        if self.inner_iter and self._epoch_start and self._epoch_start[0] == self.epoch:
            rng["epoch_start"] = self._epoch_start[1]  # each rank's, as its generators are
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "optimizer_params": self._optimizer_param_names(),  # torch's state goes by position; _by_name matches names
            "optimizer_class": _qualified(type(self.optimizer)),
            "iter": self.iter,
            "max_iters": self.max_iters,  # the run's length, so a rerun knows whether it was lengthened
            "epoch": self.epoch,
            "inner_iter": self.inner_iter,
            "phase_index": self.phase_index,
            "validated_at": self._validated_at,
            "data": {"epoch": self.epoch, "batches_done": self.inner_iter, "seed": getattr(self.train_loader, "seed", None)},
            "storage": self.storage.state_dict(),
            "last_val": {k: float(v) for k, v in self.last_val.items()},
            "hooks": {h.name: h.state_dict() for h in self._hooks},
            "rng": rng,
            "rng_ranks": distributed.all_gather_object(rng) if self.dist is not None else None,
        }

    def _optimizer_param_names(self) -> Optional[List[List[str]]]:
        """The model's name of each parameter the optimizer holds, group by group (None where one is not the model's)."""
        names = {id(p): n for n, p in self.model.named_parameters()}
        groups = [[names.get(id(p)) for p in group["params"]] for group in self.optimizer.param_groups]
        return groups if all(n is not None for group in groups for n in group) else None  # type: ignore[return-value]

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(_by_name(state["optimizer"], state.get("optimizer_params"), self._optimizer_param_names()))
        self.iter, self.epoch, self.inner_iter = state["iter"], state["epoch"], state["inner_iter"]
        self.phase_index = state.get("phase_index", 0)
        self._validated_at = state.get("validated_at")
        self.storage.load_state_dict(state["storage"])
        self.last_val = dict(state.get("last_val", {}))
        self._load_hook_states(state["hooks"])
        ranks = state.get("rng_ranks") or [state.get("rng")]
        # (another world size's is refused by resume_or_load; loaded here directly, every rank takes rank 0's)
        self._rng_to_restore = ranks[self.rank] if len(ranks) == self.world_size else ranks[0]
        start = (self._rng_to_restore or {}).get("epoch_start")
        self._epoch_start = (self.epoch, start) if start is not None and self.inner_iter else None

    def _load_hook_states(self, saved_hooks: Mapping[str, Any]) -> None:
        """Each hook's saved state; a hook that held none (or was not there) starts afresh. A hook's state under a
        name this run lacks, beside a hook of this run with none, is said (a renamed hook)."""
        def held(saved: Any) -> bool:
            return not (isinstance(saved, dict) and not saved)

        unused = sorted(name for name, saved in saved_hooks.items() if name not in {h.name for h in self._hooks} and held(saved))
        added = sorted(h.name for h in self._hooks  # those that keep a state
                       if h.name not in saved_hooks and type(h).state_dict is not HookBase.state_dict)
        if unused and added and self.is_main:
            logger.warning("The checkpoint holds the state of hook(s) %s, which this run lacks, and this run's hook(s) %s "
                           "have none there: a renamed hook starts afresh (its old name resumes it)", ", ".join(unused), ", ".join(added))
        for h in self._hooks:
            if h.name in saved_hooks and held(saved_hooks[h.name]):
                try:
                    h.load_state_dict(saved_hooks[h.name])
                except ConfigError:
                    raise  # the hook's config, named as such (e.g. the LR hook rebuilding its schedule)
                except Exception as err:
                    raise HookStateError(f"hook {h.name} ({_qualified(type(h))}) could not load its saved state: "
                                         f"{type(err).__name__}: {err}") from err


def _by_name(saved: Mapping[str, Any], saved_names: Optional[List[List[str]]],
             names: Optional[List[List[str]]]) -> Mapping[str, Any]:
    """An optimizer's saved state with each group's parameters in this run's order, matched by name (torch matches by
    position: layers defined in another order would swap their momentum)."""
    if not saved_names or not names or saved_names == names or len(saved_names) != len(names) or \
            len(saved.get("param_groups", ())) != len(names):
        return saved
    groups = []
    for group, old, new in zip(saved["param_groups"], saved_names, names):
        if sorted(old) != sorted(new) or len(set(old)) != len(old) or len(group["params"]) != len(old):
            return saved  # other parameters (refused by the weights' check), or names it cannot tell apart
        order = [old.index(n) for n in new]  # for each of this run's parameters, its place in the saved group
        groups.append({**group, "params": [group["params"][i] for i in order]})
        if isinstance(group.get("param_names"), list) and len(group["param_names"]) == len(order):  # torch's own, if kept
            groups[-1]["param_names"] = [group["param_names"][i] for i in order]
    logger.info("The model lists its parameters in another order than when it was checkpointed: the optimizer's state "
                "follows them by name")
    return {**saved, "param_groups": groups}


def _loader_generators(loader: Any) -> List[torch.Generator]:
    """The generators a DataLoader draws its order and its workers' seeds from, besides torch's global one: its own,
    its sampler's, its batch sampler's sampler's (each once)."""
    found: Dict[int, torch.Generator] = {}
    batch_sampler = getattr(loader, "batch_sampler", None)
    for owner in (loader, getattr(loader, "sampler", None), getattr(batch_sampler, "sampler", None)):
        generator = getattr(owner, "generator", None)
        if isinstance(generator, torch.Generator):
            found.setdefault(id(generator), generator)
    return list(found.values())


def _loader_rng_state(loader: Any) -> Dict[str, Any]:
    """What a loader of the user's own draws an epoch's order and workers' seeds from as the epoch begins (the global
    generators and the loader's), so that a run resumed inside the epoch draws them again."""
    return {"global": get_rng_state(), "generators": [g.get_state().numpy().tobytes() for g in _loader_generators(loader)]}


def _set_loader_rng_state(loader: Any, state: Mapping[str, Any]) -> None:
    set_rng_state(state["global"])
    generators = _loader_generators(loader)
    if len(generators) == len(state["generators"]):  # else another loader than the checkpoint's: its own draws
        for generator, saved in zip(generators, state["generators"]):
            generator.set_state(torch.frombuffer(bytearray(saved), dtype=torch.uint8))


class IterTrainer(TrainerBase):
    """Train for ``max_iters`` steps; the loader is passed over again (reshuffled) each time it ends, so epoch events
    still fire at every full pass."""

    def __init__(self, *args: Any, max_iters: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_iters = _positive_length("max_iters", max_iters)
        # None where the stream's length is unknown: its epochs end where it does
        self.max_epochs = math.ceil(max_iters / max(self.steps_per_epoch, 1)) if self.steps_per_epoch else None

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> None:
        if "max_iters" in config:
            _positive_length("max_iters", config["max_iters"])

    def train(self, start_iter: Optional[int] = None, max_iter: Optional[int] = None) -> Dict[str, float]:  # type: ignore[override]
        """Train from step ``start_iter`` (default: where the trainer is) to ``max_iter`` (default: ``max_iters``)."""
        if max_iter is not None:
            self.max_iters = max_iter
        if start_iter is not None:
            steps = self.steps_per_epoch or sys.maxsize
            self.iter, self.epoch, self.inner_iter = start_iter, start_iter // steps, start_iter % steps
            self.resume = False
        return super().train()

    def run(self) -> None:
        while self.iter < self.max_iters and not self.stop_reason:
            self.train_epoch(until_iter=self.max_iters)


class EpochTrainer(TrainerBase):
    """Train for ``max_epochs`` following mmcv's workflow: ``[phase, n]`` pairs run in order until ``max_epochs``
    training epochs are done (``[[train, 2], [val, 1]]`` trains two epochs, validates once, and repeats)."""

    PHASES = ("train", "val")
    LENGTH_KEY = "max_epochs"

    def __init__(
        self, *args: Any, max_epochs: int, workflow: Sequence[Sequence[Any]] = (("train", 1),), **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        if self.steps_per_epoch is None:
            raise ConfigError(f"data.train: {type(self.train_loader.dataset).__name__} is an IterableDataset without "
                              f"__len__, and trainer=epoch needs an epoch's length (for max_epochs, resume): give it a __len__, or use trainer=iter")
        self.max_epochs = _positive_length("max_epochs", max_epochs)
        self.workflow = self._check_workflow(workflow)
        if any(phase == "val" for phase, _ in self.workflow) and self.val_loader is None:
            raise ConfigError(f"trainer.workflow has a 'val' phase but {self.no_val_set}")
        self.max_iters = max_epochs * self.steps_per_epoch

    @classmethod
    def check_config(cls, config: Mapping[str, Any]) -> None:
        if "max_epochs" in config:
            _positive_length("max_epochs", config["max_epochs"])
        if "workflow" in config and isinstance(inspect.getattr_static(cls, "_check_workflow"), classmethod):
            cls._check_workflow(config["workflow"])  # a subclass's instance method is left to its constructor

    @classmethod
    def _check_workflow(cls, workflow: Sequence[Sequence[Any]]) -> List[tuple]:
        flows = []
        for item in workflow:
            ok = isinstance(item, Sequence) and len(item) == 2 and not isinstance(item, str)
            if not ok or item[0] not in cls.PHASES or not isinstance(item[1], int) or item[1] <= 0:
                raise ConfigError(f"trainer.workflow: bad entry {list(item) if ok else item!r}; each entry should be "
                                  f"[phase, epochs] with phase in {list(cls.PHASES)} and epochs an integer greater than "
                                  f"zero, e.g. [[train, 2], [val, 1]]")
            flows.append((item[0], item[1]))
        if not any(phase == "train" for phase, _ in flows):
            raise ConfigError(f"trainer.workflow: {workflow!r} has no 'train' phase, so training would never end")
        return flows

    def run(self) -> None:
        phases = [phase for phase, epochs in self.workflow for _ in range(epochs)]
        while not self.stop_reason:
            if phases[self.phase_index % len(phases)] == "train":
                if self.epoch >= self.max_epochs or not self.train_epoch():
                    return
            elif not self._val_phase():
                return
            self.phase_index += 1

    def _val_phase(self) -> bool:
        """A workflow's val phase; False where the run stops for the pass's error (an after_val hook's stops in
        _call_at_end). Weights a hook validated just now are not validated again (early stopping would count twice)."""
        if self._validated_at == self.steps_done:
            if self.is_main:
                self._say_once("validated", "trainer.workflow's val phase after epoch %d: these weights were validated "
                               "already (hooks.evaluator or trainer.validate()); the phase is skipped", self.epoch, level=logging.INFO)
            return True
        try:
            self.validate()
        except STOPS_AT_BOUNDARY as err:  # at the phase's start: the mended rerun validates again
            self._stop_for(err, (), None)
            return False
        self._validated_at = None  # the workflow's own: its next val phase ([val, 2]) validates again
        return True
