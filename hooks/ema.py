"""EMA: an exponential moving average of the weights, for evaluation and the final checkpoint."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from launcher.engine.hook import HookBase, Priority, iterations_per_step


class EMA(HookBase):
    """After every optimizer step ``ema = decay * ema + (1 - decay) * weights`` (torch's ``AveragedModel``).

    ``eval_with_ema``: validations run on the EMA weights; ``final_weights_ema``: the model ends with them, so
    the final validation and ``final.pt`` use them (the model's own stay in this hook's state, to train on from).
    """

    priority = Priority.ABOVE_NORMAL  # after the optimizer step, before validation and checkpoints

    def __init__(self, decay: float = 0.99, eval_with_ema: bool = True, final_weights_ema: bool = True,
                 use_buffers: bool = True, priority: Optional[int] = None) -> None:
        super().__init__(priority)
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"EMA: decay should be in [0, 1), got {decay!r}")
        self.decay = decay
        self.eval_with_ema = eval_with_ema
        self.final_weights_ema = final_weights_ema
        self.use_buffers = use_buffers
        self.ema: Any = None
        self._state: Optional[Mapping[str, Any]] = None
        self._raw: Optional[Dict[str, torch.Tensor]] = None  # the model's own weights while the EMA's are in it
        self._final = False  # the EMA weights were put in at the end, to stay
        self._last_val: Optional[Tuple[int, bool]] = None  # (step, of the EMA weights) of the last validation
        self._every = 1  # iterations per optimizer step (gradient accumulation)

    def _build(self) -> AveragedModel:
        if self.ema is None:
            model = self.trainer.model
            self.ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(self.decay), use_buffers=self.use_buffers)
            if self._state is not None:
                self.ema.load_state_dict(self._state)
        return self.ema

    def before_train(self) -> None:
        self._build()
        self._put_back_raw()  # trained again in this process after an end: on from the model's own weights
        self._every = iterations_per_step(self.trainer)

    def after_step(self) -> None:
        if self._every == 1 or (self.trainer.iter + 1) % self._every == 0:
            self.ema.update_parameters(self.trainer.model)

    def _swap_in(self) -> None:
        model = self.trainer.model
        self._raw = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.load_state_dict(self.ema.module.state_dict())

    def _put_back_raw(self) -> None:
        if self._raw is not None:
            self.trainer.model.load_state_dict(self._raw)
        self._raw, self._final = None, False

    def before_val(self) -> None:
        on_ema = self._final or (self.eval_with_ema and self.ema is not None and self.ema.n_averaged.item() > 0)
        if on_ema and not self._final:
            self._swap_in()
        self._last_val = (self.trainer.last_step, on_ema)

    def val_failed(self) -> None:
        if not self._final:  # the model's own weights back, for the checkpoint the run may still save
            self._put_back_raw()

    @torch.no_grad()
    def after_val(self) -> None:
        if self._last_val is None or not self._last_val[1]:
            return
        # keep the buffers this validation used (PreciseBN's statistics), so the EMA holds what was validated
        for own, used in zip(self.ema.module.buffers(), self.trainer.model.buffers()):
            own.copy_(used)
        if not self._final:
            self._put_back_raw()

    def after_train(self) -> None:
        t = self.trainer
        if not self.final_weights_ema or t.status not in ("completed", "stopped") or self.ema is None:
            return
        self._swap_in()
        self._final = True
        # a validation of this step on the model's own weights no longer describes the model
        if self._last_val == (t.last_step, False):
            t.validate()

    def state_dict(self) -> Dict[str, Any]:
        state: Dict[str, Any] = {"ema": self._build().state_dict()}
        if self._last_val is not None:
            state["last_val"] = [self._last_val[0], self._last_val[1]]
        if self._final:
            state["raw"] = self._raw
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._state = state["ema"]
        if self.ema is not None:
            self.ema.load_state_dict(self._state)
        # training goes on from the weights the optimizer state belongs to, not final.pt's EMA weights
        self._raw, self._final = state.get("raw"), False
        self._put_back_raw()
        last_val = state.get("last_val")
        self._last_val = (int(last_val[0]), bool(last_val[1])) if last_val is not None else None
