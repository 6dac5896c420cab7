"""ParamSchedule: schedule an optimizer hyperparameter other than the lr (mmcv's MomentumUpdaterHook)."""
from __future__ import annotations

import math
from typing import Optional

from launcher.engine.errors import ConfigError, did_you_mean
from launcher.engine.hook import HookBase, Priority, is_number, iterations_per_step


class ParamSchedule(HookBase):
    """Sets ``param_group[key]`` (``momentum``, ``weight_decay``, ``betas.0``) in every group from ``start`` to
    ``end`` over the run, ``linear`` or ``cosine``, recorded as ``<key>``. For Adam, ``momentum`` means ``betas.0``."""

    priority = Priority.HIGH

    def __init__(self, key: str = "momentum", start: float = 0.85, end: float = 0.95, schedule: str = "cosine",
                 priority: Optional[int] = None) -> None:
        super().__init__(priority)
        if schedule not in ("linear", "cosine"):
            raise ValueError(f"ParamSchedule: schedule should be linear or cosine, got {schedule!r}")
        for name, value in (("start", start), ("end", end)):
            if not is_number(value) or not math.isfinite(value):
                raise ValueError(f"ParamSchedule: {name} should be a finite number, got {value!r}")
        self.key, self.start, self.end, self.schedule = key, start, end, schedule
        name, _, index = str(key).partition(".")
        if index and not index.isdigit():
            raise ValueError(f"ParamSchedule: key should be a setting of the optimizer (momentum, weight_decay) or one "
                             f"value of one that holds several (betas.0), got {key!r}")
        self._name, self._index = name, int(index) if index else None
        self._every = 1  # iterations per optimizer step (gradient accumulation)

    def value_at(self, iteration: int) -> float:
        """The value for ``iteration``'s step: with gradient accumulation, for its optimizer step among the run's."""
        every = self._every
        frac = min((iteration // every) / max(self.trainer.max_iters // every - 1, 1), 1.0)
        if self.schedule == "cosine":
            frac = (1 - math.cos(math.pi * frac)) / 2
        return self.start + (self.end - self.start) * frac

    def before_train(self) -> None:
        self._every = iterations_per_step(self.trainer)
        group = self.trainer.optimizer.param_groups[0]
        if self.key == "momentum" and "momentum" not in group and "betas" in group:
            self._name, self._index = "betas", 0  # Adam's beta1 is its momentum (as mmcv treats it)
        self._check_key(group)

    def _check_key(self, group: dict) -> None:
        """A ConfigError naming ``hooks.<name>.key`` and the settings that can be scheduled, where the key is none."""
        accepted = [k for k, v in group.items() if k not in ("params", "lr", "initial_lr") and is_number(v)]
        accepted += [f"{k}.{i}" for k, v in group.items() if isinstance(v, (tuple, list)) and k != "params"
                     for i, x in enumerate(v) if is_number(x)]
        if "momentum" not in group and "betas.0" in accepted:
            accepted.insert(0, "momentum")  # Adam's: betas.0 (before_train)
        value = group.get(self._name)
        index = self._index
        if self._name == "lr":
            why = "the lr is the LR scheduler's to set (hooks.lr_scheduler)"
        elif self._name not in group:
            why = f"the optimizer ({type(self.trainer.optimizer).__name__}) has no {self._name!r}" + \
                did_you_mean(self.key, accepted, f"hooks.{self.name}.key")
        elif index is None and isinstance(value, (tuple, list)):
            why = f"{self._name} holds {len(value)} values: name one, e.g. {self._name}.0"
        elif index is not None and not (isinstance(value, (tuple, list)) and 0 <= index < len(value)):
            why = f"{self._name} holds " + (f"{len(value)} values (.0 to .{len(value) - 1})" if isinstance(value, (tuple, list))
                                            else "one value: name it without an index")
        elif not is_number(value if index is None else value[index]):
            why = f"{self.key} is {value!r}, not a number to schedule"
        else:
            self._check_range()
            return
        raise ConfigError(f"hooks.{self.name}.key={self.key}: {why}{' ' if why.endswith('?') else '; '}the optimizer's "
                          f"settings it can schedule: {', '.join(accepted) or 'none'}")

    def _check_range(self) -> None:
        """A ConfigError where ``start`` or ``end`` is out of the setting's range (torch checks it only at build)."""
        fraction = self._name in ("momentum", "dampening", "betas")
        for name, value in (("start", self.start), ("end", self.end)):
            if value < 0 or (fraction and value > 1) or (self._name == "betas" and value == 1):
                accepted = "in [0, 1)" if self._name == "betas" else "in [0, 1]" if fraction else ">= 0"
                raise ConfigError(f"hooks.{self.name}.{name}={value}: {self.key} should be {accepted}")

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
