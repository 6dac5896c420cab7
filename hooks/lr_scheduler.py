"""LRScheduler: any ``torch.optim.lr_scheduler`` stepped per iteration or per epoch."""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, Mapping, Optional

import torch

from hooks.base import HookBase, Priority

# Parameters that hold a scheduler's horizon; filled in from the run's length when left out.
_HORIZON_PARAMS = ("T_max", "total_steps", "total_iters")


class LRScheduler(HookBase):
    """Builds ``scheduler(optimizer)`` and steps it after each step (or epoch with ``by_epoch``).

    ``scheduler`` is a factory, typically a Hydra ``_partial_: true`` config. When it has a
    horizon parameter (``T_max``, ``total_steps``, ``total_iters``) that the config leaves out,
    the hook passes the number of scheduler steps in the run, so a cosine schedule spans the
    run whatever ``max_epochs`` or ``max_iters`` is. ``ReduceLROnPlateau`` is stepped after
    each validation with the metric named by ``monitor``. The lr each step used is recorded
    as ``lr``.
    """

    priority = Priority.HIGH

    def __init__(
        self,
        scheduler: Callable[[torch.optim.Optimizer], Any],
        by_epoch: bool = False,
        monitor: str = "val/loss",
        priority: Optional[int] = None,
    ) -> None:
        super().__init__(priority)
        if not callable(scheduler):
            raise TypeError(f"LRScheduler: scheduler must be a factory taking the optimizer (a _partial_ config), got {scheduler!r}")
        self._factory = scheduler
        self.by_epoch = by_epoch
        self.monitor = monitor
        self.scheduler: Any = None
        self._plateau = False

    def _build(self) -> Any:
        if self.scheduler is None:
            factory = self._factory
            target = factory.func if isinstance(factory, functools.partial) else factory
            given = factory.keywords if isinstance(factory, functools.partial) else {}
            try:
                params = inspect.signature(target).parameters
            except (TypeError, ValueError):
                params = {}
            horizon = self.trainer.max_epochs if self.by_epoch else self.trainer.max_iters
            for name in _HORIZON_PARAMS:
                if name in params and name not in given:
                    factory = functools.partial(factory, **{name: horizon})
                    break
            self.scheduler = factory(self.trainer.optimizer)
            self._plateau = isinstance(self.scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
        return self.scheduler

    def before_train(self) -> None:
        self._build()

    def after_step(self) -> None:
        self.trainer.storage.put_scalar("lr", self.trainer.optimizer.param_groups[0]["lr"], smoothing_hint=False)
        if not self.by_epoch and not self._plateau:
            self.scheduler.step()

    def after_epoch(self) -> None:
        if self.by_epoch and not self._plateau:
            self.scheduler.step()

    def after_val(self) -> None:
        if self._plateau:
            metrics = self.trainer.last_val
            if self.monitor not in metrics:
                raise KeyError(f"hooks.lr_scheduler.monitor: {self.monitor!r} is not a validation metric; got {sorted(metrics)}")
            self.scheduler.step(metrics[self.monitor])

    def state_dict(self) -> Dict[str, Any]:
        return {"scheduler": self._build().state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._build().load_state_dict(state["scheduler"])
