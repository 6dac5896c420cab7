"""EMA: an exponential moving average of the weights, for evaluation and the final checkpoint."""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from hooks.base import HookBase, Priority


class EMA(HookBase):
    """After every step ``ema = decay * ema + (1 - decay) * weights`` (torch's ``AveragedModel``;
    buffers such as BatchNorm statistics are copied along with ``use_buffers``).

    With ``eval_with_ema`` each validation runs on the EMA weights (the model's own are put back
    afterwards); with ``final_weights_ema`` the model holds the EMA weights when training ends,
    so the final validation and ``checkpoints/final.pt`` use them.
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
        self._saved: Optional[Dict[str, torch.Tensor]] = None

    def _build(self) -> AveragedModel:
        if self.ema is None:
            model = self.trainer.model
            self.ema = AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(self.decay), use_buffers=self.use_buffers)
            if self._state is not None:
                self.ema.load_state_dict(self._state)
        return self.ema

    def before_train(self) -> None:
        self._build()

    def after_step(self) -> None:
        self.ema.update_parameters(self.trainer.model)

    def _swap_in(self) -> None:
        model = self.trainer.model
        self._saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
        model.load_state_dict(self.ema.module.state_dict())

    def before_val(self) -> None:
        if self.eval_with_ema and self.ema is not None and self.ema.n_averaged.item() > 0:
            self._swap_in()

    def after_val(self) -> None:
        if self._saved is not None:
            self.trainer.model.load_state_dict(self._saved)
            self._saved = None

    def after_train(self) -> None:
        if self.final_weights_ema and self.trainer.status in ("completed", "stopped") and self.ema is not None:
            self.trainer.model.load_state_dict(self.ema.module.state_dict())

    def state_dict(self) -> Dict[str, Any]:
        return {"ema": self._build().state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._state = state["ema"]
        if self.ema is not None:
            self.ema.load_state_dict(self._state)
