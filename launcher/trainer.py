"""The trainers: the whole training loop, in one file.

Pseudocode of every trainer (the code below follows it)::

    before_train
    while not done:                          # EpochTrainer: max_epochs and the workflow
        before_epoch                         # IterTrainer: max_iters over an endless stream
        for each batch of the epoch:
            before_step
            run_step                         # fetch, forward, losses, backward, optimizer step
            after_step
        after_epoch
        [validate: before_val, eval loop, after_val]   # from a hook or a workflow 'val' phase
    after_train                              # always, also when a step raised

Everything else (timing, LR schedules, evaluation, checkpoints, logging) is a hook.

Model contract: ``model(batch)`` is called with the batch exactly as the data loader
yields it (moved to the device). In train mode it returns the loss: a scalar tensor or a
dict of scalar tensors, which are summed. In eval mode it returns a dict of scalar metric
tensors (or one tensor, taken as ``loss``); each is averaged over the validation samples
and recorded as ``val/<name>``.
"""
from __future__ import annotations

import logging
import math
import time
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

import torch
from torch import nn

from hooks.base import EVENTS, HookBase
from launcher.storage import EventStorage

logger = logging.getLogger(__name__)

HookList = Union[Mapping[str, Optional[HookBase]], Sequence[Optional[HookBase]], None]


def resolve_device(device: str) -> torch.device:
    """``auto`` picks CUDA when present, else the CPU; anything else goes to ``torch.device``."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ValueError(f"trainer.device: {device!r} is not a device; use auto, cpu, cuda or cuda:N") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"trainer.device: {device!r} was asked for but CUDA is not available here; use auto or cpu")
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


def _as_tensor_dict(out: Any, model: nn.Module, mode: str) -> Dict[str, torch.Tensor]:
    if isinstance(out, torch.Tensor):
        out = {"loss": out}
    if isinstance(out, Mapping) and all(isinstance(v, torch.Tensor) and v.numel() == 1 for v in out.values()):
        if out:
            return dict(out)
    raise TypeError(
        f"{type(model).__name__}.forward returned {type(out).__name__} in {mode} mode; the trainer accepts a "
        f"scalar loss tensor or a non-empty dict of scalar tensors (README: 'Model contract')"
        + (f"; got keys {sorted(out)}" if isinstance(out, Mapping) else "")
    )


class TrainerBase:
    """Holds the model, optimizer, data, hooks and :class:`EventStorage`; runs one step.

    Subclasses decide how long to train (:meth:`run`). ``iter`` counts optimizer steps
    done: inside ``before_step``/``after_step`` it is the 0-based index of the step being
    run. ``epoch`` counts finished passes over the training data in the same way.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: Union[torch.optim.Optimizer, Callable[..., torch.optim.Optimizer]],
        data: Any,
        hooks: HookList = None,
        device: str = "auto",
        work_dir: Union[str, Path] = ".",
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
        self.device = resolve_device(device)
        self.model = model.to(self.device)
        self.optimizer = optimizer if isinstance(optimizer, torch.optim.Optimizer) else optimizer(self.model.parameters())
        self.data = data
        self.work_dir = Path(work_dir)
        self.storage = EventStorage()
        self.iter = 0
        self.epoch = 0
        self.inner_iter = 0  # steps done in the current epoch
        self.max_iters = 0
        self.status = "created"  # running, completed, stopped, failed, interrupted
        self.stop_reason: Optional[str] = None
        self.last_val: Dict[str, float] = {}
        self.train_loader = self.build_train_loader()
        self.val_loader = self.build_val_loader()
        self._non_blocking = bool(getattr(self.train_loader, "pin_memory", False)) and self.device.type == "cuda"
        self._hooks: List[HookBase] = []
        self._handlers: Dict[str, List[Callable[[], None]]] = {e: [] for e in EVENTS}
        self.register_hooks(hooks)

    # -- construction points a subclass may override --------------------------------------------
    def build_train_loader(self) -> Iterable:
        return self.data.train_loader()

    def build_val_loader(self) -> Optional[Iterable]:
        return self.data.val_loader()

    # -- hooks -------------------------------------------------------------------------------
    def register_hooks(self, hooks: HookList) -> None:
        """Add hooks (a list, or a ``{name: hook}`` mapping); ``None`` entries are dropped."""
        items = list(hooks.items()) if isinstance(hooks, Mapping) else [(None, h) for h in hooks or ()]
        taken = {h.name for h in self._hooks}
        for name, hook in items:
            if hook is None:
                continue
            if not isinstance(hook, HookBase):
                raise TypeError(
                    f"hook {name or ''!s} is a {type(hook).__module__}.{type(hook).__qualname__}, "
                    f"not a hooks.HookBase; subclass HookBase to use it as a hook"
                )
            name = name or type(hook).__name__
            base, n = name, 1
            while name in taken:
                name, n = f"{base}_{n}", n + 1
            taken.add(name)
            hook.name = name
            hook.trainer = weakref.proxy(self)
            self._hooks.append(hook)
        self._hooks.sort(key=lambda h: h.priority)  # stable: equal priorities keep their order
        for event in EVENTS:  # call a hook only for the events it overrides
            self._handlers[event] = [
                getattr(h, event) for h in self._hooks if getattr(type(h), event) is not getattr(HookBase, event)
            ]

    @property
    def hooks(self) -> List[HookBase]:
        return list(self._hooks)

    def _call(self, event: str) -> None:
        for handler in self._handlers[event]:
            handler()

    def request_stop(self, reason: str) -> None:
        """Ask the loop to stop at the next step boundary (early stopping, a signal...)."""
        self.stop_reason = reason

    # -- the loop ----------------------------------------------------------------------------
    def train(self) -> Dict[str, float]:
        """Run :meth:`run` between ``before_train`` and ``after_train``; return the final metrics."""
        self.status = "running"
        try:
            self._call("before_train")
            self.run()
            self.status = "stopped" if self.stop_reason else "completed"
        except KeyboardInterrupt:
            self.status = "interrupted"
            raise
        except BaseException:
            self.status = "failed"
            raise
        finally:
            self.storage.iter, self.storage.epoch = self.iter, self.epoch
            self._call("after_train")
        return self.final_metrics()

    def run(self) -> None:
        raise NotImplementedError

    def final_metrics(self) -> Dict[str, float]:
        return {k: v for k, (v, _) in self.storage.latest().items()}

    def train_epoch(self, until_iter: Optional[int] = None) -> None:
        """Train over the rest of the current epoch, or until ``iter`` reaches ``until_iter``."""
        loader = self.train_loader
        steps = len(loader)  # type: ignore[arg-type]
        if self.inner_iter == 0:
            self.storage.epoch = self.epoch
            self._call("before_epoch")
        sampler = getattr(loader, "sampler", None)
        if hasattr(sampler, "set_epoch"):
            sampler.set_epoch(self.epoch)
        self._data_iter: Iterator = iter(loader)
        storage = self.storage
        while self.inner_iter < steps and (until_iter is None or self.iter < until_iter) and not self.stop_reason:
            storage.iter = self.iter
            self._call("before_step")
            self.run_step()
            self._call("after_step")
            self.iter += 1
            self.inner_iter += 1
        self._data_iter = iter(())
        if self.inner_iter == steps:
            storage.iter = self.iter
            self._call("after_epoch")
            self.epoch += 1
            self.inner_iter = 0

    def run_step(self) -> None:
        """One iteration: fetch the batch, forward, losses, backward, optimizer step."""
        start = time.perf_counter()
        batch = next(self._data_iter)
        if self.device.type != "cpu":
            batch = move_to_device(batch, self.device, self._non_blocking)
        self.storage.put_scalar("data_time", time.perf_counter() - start)

        losses = _as_tensor_dict(self.model(batch), self.model, "train")
        loss = losses["loss"] if len(losses) == 1 and "loss" in losses else sum(losses.values())
        self._check_finite(loss, losses)
        for name, value in losses.items():
            self.storage.put_scalar(f"train/{name}", value.detach())
        if len(losses) > 1:
            self.storage.put_scalar("train/total_loss", loss.detach())

        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    def _check_finite(self, loss: torch.Tensor, losses: Mapping[str, torch.Tensor]) -> None:
        if not math.isfinite(loss.item()):
            values = ", ".join(f"{k}={v.item()}" for k, v in losses.items())
            raise FloatingPointError(
                f"Loss became infinite or NaN at iteration {self.iter} (epoch {self.epoch}): {values}"
            )

    @torch.no_grad()
    def validate(self) -> Dict[str, float]:
        """One pass over the validation data in eval mode; records and returns ``val/*``."""
        if self.val_loader is None:
            raise RuntimeError("validation was asked for but the data config has no val set (data.val is null)")
        self.storage.iter, self.storage.epoch = self.iter, self.epoch
        self._call("before_val")
        was_training = self.model.training
        self.model.eval()
        sums: Dict[str, torch.Tensor] = {}
        count = 0
        try:
            for batch in self.val_loader:
                if self.device.type != "cpu":
                    batch = move_to_device(batch, self.device, self._non_blocking)
                n = batch_size_of(batch)
                for name, value in _as_tensor_dict(self.model(batch), self.model, "eval").items():
                    sums[name] = sums.get(name, 0) + value.detach().float().reshape(()) * n
                count += n
        finally:
            self.model.train(was_training)
        names = list(sums)
        totals = torch.stack([sums[k] for k in names]).cpu().tolist() if names else []
        self.last_val = {f"val/{k}": t / max(count, 1) for k, t in zip(names, totals)}
        self.storage.put_scalars(smoothing_hint=False, **self.last_val)
        self._call("after_val")
        return self.last_val

    # -- checkpoint state ----------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "iter": self.iter,
            "epoch": self.epoch,
            "inner_iter": self.inner_iter,
            "storage": self.storage.state_dict(),
            "hooks": {h.name: h.state_dict() for h in self._hooks},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.iter, self.epoch, self.inner_iter = state["iter"], state["epoch"], state["inner_iter"]
        self.storage.load_state_dict(state["storage"])
        for h in self._hooks:
            if h.name in state["hooks"]:
                h.load_state_dict(state["hooks"][h.name])


class IterTrainer(TrainerBase):
    """Train for ``max_iters`` steps over an endless stream of the training data.

    The stream starts a new epoch (reshuffled) each time the loader is exhausted, so
    epoch events still fire at every full pass.
    """

    def __init__(self, *args: Any, max_iters: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(max_iters, int) or max_iters <= 0:
            raise ValueError(f"trainer.max_iters should be an integer greater than zero, got {max_iters!r}")
        self.max_iters = max_iters
        self.max_epochs = math.ceil(max_iters / max(len(self.train_loader), 1))  # type: ignore[arg-type]

    def train(self, start_iter: Optional[int] = None, max_iter: Optional[int] = None) -> Dict[str, float]:  # type: ignore[override]
        """Train from step ``start_iter`` (default: where the trainer is) to ``max_iter`` (default: ``max_iters``)."""
        if max_iter is not None:
            self.max_iters = max_iter
        if start_iter is not None:
            steps = len(self.train_loader)  # type: ignore[arg-type]
            self.iter, self.epoch, self.inner_iter = start_iter, start_iter // steps, start_iter % steps
        return super().train()

    def run(self) -> None:
        while self.iter < self.max_iters and not self.stop_reason:
            self.train_epoch(until_iter=self.max_iters)


class EpochTrainer(TrainerBase):
    """Train for ``max_epochs`` following mmcv's workflow.

    ``workflow`` is a list of ``[phase, n]`` pairs run in order until ``max_epochs``
    training epochs are done: ``[[train, 2], [val, 1]]`` trains two epochs, validates
    once, and repeats.
    """

    PHASES = ("train", "val")

    def __init__(
        self, *args: Any, max_epochs: int, workflow: Sequence[Sequence[Any]] = (("train", 1),), **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        if not isinstance(max_epochs, int) or max_epochs <= 0:
            raise ValueError(f"trainer.max_epochs should be an integer greater than zero, got {max_epochs!r}")
        self.max_epochs = max_epochs
        self.workflow = self._check_workflow(workflow)
        if any(phase == "val" for phase, _ in self.workflow) and self.val_loader is None:
            raise ValueError("trainer.workflow has a 'val' phase but the data config has no val set (data.val)")
        self.max_iters = max_epochs * len(self.train_loader)  # type: ignore[arg-type]

    def _check_workflow(self, workflow: Sequence[Sequence[Any]]) -> List[tuple]:
        flows = []
        for item in workflow:
            ok = isinstance(item, Sequence) and len(item) == 2 and not isinstance(item, str)
            if not ok or item[0] not in self.PHASES or not isinstance(item[1], int) or item[1] <= 0:
                raise ValueError(
                    f"trainer.workflow: bad entry {list(item) if ok else item!r}; each entry should be "
                    f"[phase, epochs] with phase in {list(self.PHASES)} and epochs an integer greater than zero, "
                    f"e.g. [[train, 2], [val, 1]]"
                )
            flows.append((item[0], item[1]))
        if not any(phase == "train" for phase, _ in flows):
            raise ValueError(f"trainer.workflow: {workflow!r} has no 'train' phase, so training would never end")
        return flows

    def run(self) -> None:
        while self.epoch < self.max_epochs and not self.stop_reason:
            for phase, epochs in self.workflow:
                for _ in range(epochs):
                    if self.stop_reason or (phase == "train" and self.epoch >= self.max_epochs):
                        return
                    if phase == "train":
                        self.train_epoch()
                    else:
                        self.validate()
