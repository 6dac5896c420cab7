"""ParamSchedule: schedule an optimizer hyperparameter other than the lr (mmcv's MomentumUpdaterHook)."""
from __future__ import annotations

import math
from typing import Optional

from hooks.base import HookBase, Priority


class ParamSchedule(HookBase):
    """Sets ``param_group[key]`` (``momentum``, ``weight_decay``, or one of ``betas`` with
    ``key: betas.0``) in every group from ``start`` to ``end`` over the run's iterations,
    ``linear`` or ``cosine``; the value each step used is recorded as ``<key>``. For an
    optimizer with ``betas`` and no ``momentum`` (Adam, AdamW), ``momentum`` means ``betas.0``."""

    priority = Priority.HIGH

    def __init__(self, key: str = "momentum", start: float = 0.85, end: float = 0.95, schedule: str = "cosine",
                 priority: Optional[int] = None) -> None:
        super().__init__(priority)
        if schedule not in ("linear", "cosine"):
            raise ValueError(f"ParamSchedule: schedule should be linear or cosine, got {schedule!r}")
        self.key, self.start, self.end, self.schedule = key, start, end, schedule
        name, _, index = key.partition(".")
        self._name, self._index = name, int(index) if index else None

    def value_at(self, iteration: int) -> float:
        frac = min(iteration / max(self.trainer.max_iters - 1, 1), 1.0)
        if self.schedule == "cosine":
            frac = (1 - math.cos(math.pi * frac)) / 2
        return self.start + (self.end - self.start) * frac

    def before_train(self) -> None:
        group = self.trainer.optimizer.param_groups[0]
        if self.key == "momentum" and "momentum" not in group and "betas" in group:
            self._name, self._index = "betas", 0  # Adam's beta1 is its momentum (as mmcv treats it)
        if self._name not in group:
            raise KeyError(f"hooks: ParamSchedule key {self.key!r}: the optimizer has no {self._name!r}; it has {sorted(k for k in group if k != 'params')}")

    def before_step(self) -> None:
        value = self.value_at(self.trainer.iter)
        for group in self.trainer.optimizer.param_groups:
            if self._index is None:
                group[self._name] = value
            else:
                current = list(group[self._name])
                current[self._index] = value
                group[self._name] = tuple(current)
        self.trainer.storage.put_scalar(self.key, value, smoothing_hint=False)
