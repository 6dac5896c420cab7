"""OptimizerStep: gradient accumulation, clipping, mixed precision and the non-finite-loss policy.

The trainer calls its ``optimizer_step`` instead of a plain backward and step, and runs the forward in
``forward_context`` (autocast)."""
from __future__ import annotations

import contextlib
import logging
import math
import numbers
from typing import Any, Dict, Mapping, Optional

import torch

from launcher.engine import distributed
from launcher.engine.errors import ConfigError
from launcher.engine.hook import HookBase, Priority

logger = logging.getLogger(__name__)


def _positive(value: Any) -> bool:
    """A real number above zero (inf too: no bound); not a bool, not NaN."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and not math.isnan(value) and value > 0


class OptimizerStep(HookBase):
    """How a loss becomes an optimizer step.

    - ``accumulate``: micro-batches per optimizer step (each loss divided by it; ``no_sync`` under DDP).
    - ``clip_grad_norm`` (with ``norm_type``) or ``clip_grad_value``; ``grad_norm`` records the norm before it.
    - ``amp``: ``fp16`` (a ``GradScaler``; non-finite steps skipped, counted in ``skipped_steps``) or ``bf16``.
    - ``nonfinite``: ``raise`` (naming the iteration and every loss) or ``skip`` (counted in ``skipped_batches``).
    """

    priority = Priority.HIGH

    def __init__(
        self,
        accumulate: int = 1,
        clip_grad_norm: Optional[float] = None,
        norm_type: float = 2.0,
        clip_grad_value: Optional[float] = None,
        log_grad_norm: bool = False,
        amp: Optional[str] = None,
        nonfinite: str = "raise",
        priority: Optional[int] = None,
    ) -> None:
        super().__init__(priority)
        if not isinstance(accumulate, int) or accumulate < 1:
            raise ValueError(f"OptimizerStep: accumulate should be an integer >= 1, got {accumulate!r}")
        if amp not in (None, "fp16", "bf16"):
            raise ValueError(f"OptimizerStep: amp should be null, fp16 or bf16, got {amp!r}")
        if nonfinite not in ("raise", "skip"):
            raise ValueError(f"OptimizerStep: nonfinite should be raise or skip, got {nonfinite!r}")
        if clip_grad_norm is not None and clip_grad_value is not None:
            raise ValueError("OptimizerStep: set clip_grad_norm or clip_grad_value, not both")
        for key, value in (("clip_grad_norm", clip_grad_norm), ("clip_grad_value", clip_grad_value)):
            if value is not None and not _positive(value):
                raise ValueError(f"OptimizerStep: {key} should be a number greater than zero (null: no clipping), got {value!r}")
        if not _positive(float(norm_type) if norm_type in ("inf", "Infinity") else norm_type):
            raise ValueError(f"OptimizerStep: norm_type should be a number greater than zero (2.0; inf for the max norm), "
                             f"got {norm_type!r}")
        self.accumulate = accumulate
        self.clip_grad_norm = clip_grad_norm
        self.norm_type = norm_type
        self.clip_grad_value = clip_grad_value
        self.log_grad_norm = log_grad_norm
        self.amp = amp
        self.nonfinite = nonfinite
        self.scaler: Any = None
        self._scaler_state: Optional[Dict[str, Any]] = None  # from a checkpoint, until the scaler exists
        self.skipped_batches = 0
        self.skipped_steps = 0
        self._pending_grads: Optional[list] = None

    def _warn_if_uneven(self) -> None:
        """Warn where accumulation is not the run on larger batches: the last micro-batches never stepped, or
        optimizer steps that straddle two epochs."""
        t, n = self.trainer, self.accumulate
        if n == 1 or not getattr(t, "is_main", True):
            return
        name = f"hooks.{self.name or 'optimizer_step'}.accumulate={n}"
        left = t.max_iters % n
        if left:
            logger.warning("%s: the run's %d iterations are not a multiple of it, so its last %d micro-batch(es) are not "
                           "stepped; give the run a length that is a multiple of %d", name, t.max_iters, left, n)
        if t.steps_per_epoch and t.steps_per_epoch % n:
            logger.warning("%s: an epoch has %d steps, not a multiple of it, so optimizer steps straddle epochs (not "
                           "the run on batches %d times larger); make data.batch_size or the epoch fit", name,
                           t.steps_per_epoch, n)

    def before_train(self) -> None:
        if self.accumulate > self.trainer.max_iters:
            raise ConfigError(f"hooks.{self.name or 'optimizer_step'}.accumulate={self.accumulate}: more micro-batches "
                              f"than the run's {self.trainer.max_iters} iterations, so no optimizer step would run; use "
                              f"1 to {self.trainer.max_iters}")
        self._warn_if_uneven()
        device = self.trainer.device.type
        if self.amp == "fp16":
            self.scaler = torch.amp.GradScaler(device)
            if self._scaler_state is not None:
                self.scaler.load_state_dict(self._scaler_state)
        if self._pending_grads is not None:  # resumed in the middle of an accumulation
            for p, g in zip(self._params(), self._pending_grads):
                p.grad = None if g is None else g.to(p.device)
            self._pending_grads = None

    def _params(self) -> list:
        return [p for group in self.trainer.optimizer.param_groups for p in group["params"]]

    def forward_context(self) -> Any:
        if self.amp is None:
            return contextlib.nullcontext()
        dtype = torch.float16 if self.amp == "fp16" else torch.bfloat16
        return torch.autocast(self.trainer.device.type, dtype=dtype)

    def _all_finite(self, loss: torch.Tensor) -> bool:
        """Whether the loss is finite; under DDP on every rank (they must skip a batch together)."""
        finite = bool(torch.isfinite(loss.detach()).all())
        if self.trainer.dist is not None:
            finite = distributed.max_int(0 if finite else 1) == 0
        return finite

    def optimizer_step(self, loss: torch.Tensor, losses: Optional[Mapping[str, torch.Tensor]]) -> None:
        t = self.trainer
        if self.nonfinite == "raise":
            t.check_finite(loss, losses)
        elif not self._all_finite(loss):
            self.skipped_batches += 1
            logger.warning("Skipped batch of iteration %d: non-finite loss (%d skipped so far)", t.iter, self.skipped_batches)
            t.storage.put_scalar("skipped_batches", self.skipped_batches, smoothing_hint=False)
            return
        boundary = (t.iter + 1) % self.accumulate == 0
        scaled = loss / self.accumulate if self.accumulate > 1 else loss
        if self.scaler is not None:
            scaled = self.scaler.scale(scaled)
        model = t.train_model  # the DistributedDataParallel wrapper under DDP
        sync = contextlib.nullcontext() if boundary or not hasattr(model, "no_sync") else model.no_sync()
        with sync:
            scaled.backward()
        if not boundary:
            return
        optimizer = t.optimizer
        if self.scaler is not None and (self.clip_grad_norm or self.clip_grad_value or self.log_grad_norm):
            self.scaler.unscale_(optimizer)
        params = self._params()
        if self.clip_grad_norm is not None:
            t.storage.put_scalar("grad_norm", torch.nn.utils.clip_grad_norm_(params, self.clip_grad_norm, self.norm_type).detach())
        elif self.log_grad_norm:
            grads = [p.grad for p in params if p.grad is not None]
            t.storage.put_scalar("grad_norm", torch.nn.utils.get_total_norm(grads, self.norm_type).detach())
        if self.clip_grad_value is not None:
            torch.nn.utils.clip_grad_value_(params, self.clip_grad_value)
        if self.scaler is not None:
            scale = self.scaler.get_scale()
            self.scaler.step(optimizer)
            self.scaler.update()
            if self.scaler.get_scale() < scale:  # the scaler found inf/nan gradients and skipped the step
                self.skipped_steps += 1
                logger.warning("Skipped the optimizer step of iteration %d: non-finite gradients under fp16", t.iter)
                t.storage.put_scalar("skipped_steps", self.skipped_steps, smoothing_hint=False)
        else:
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    def state_dict(self) -> Dict[str, Any]:
        t = self.trainer
        mid_accumulation = t.iter % self.accumulate != 0  # at a step boundary, t.iter steps are done
        return {
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "skipped_batches": self.skipped_batches,
            "skipped_steps": self.skipped_steps,
            "grads": [None if p.grad is None else p.grad.detach().clone() for p in self._params()] if mid_accumulation else None,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._scaler_state = state["scaler"]
        self.skipped_batches = state["skipped_batches"]
        self.skipped_steps = state["skipped_steps"]
        self._pending_grads = state["grads"]
