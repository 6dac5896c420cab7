"""PreciseBN (detectron2): recompute BatchNorm statistics on training batches before validating."""
from __future__ import annotations

from itertools import islice
from typing import Optional

import torch
from torch import nn
from torch.utils.data import IterableDataset

from launcher.engine import distributed
from launcher.engine.hook import HookBase, Priority
from launcher.engine.trainer import get_rng_state, move_to_device, set_rng_state

_BN = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


class PreciseBN(HookBase):
    """Before each validation, set every BatchNorm's running statistics to their plain average over
    ``num_batches`` training batches with the current weights. The batches come from a separate pass (epoch
    ``-1 - epoch``), leaving training's data order and random state untouched; under DDP averaged over the ranks.
    """

    priority = Priority.ABOVE_NORMAL + 1  # after EMA's, which may put the weights to be validated in first

    def __init__(self, num_batches: int = 20, priority: Optional[int] = None) -> None:
        super().__init__(priority)
        if not isinstance(num_batches, int) or num_batches < 1:
            raise ValueError(f"PreciseBN: num_batches should be an integer >= 1, got {num_batches!r}")
        self.num_batches = num_batches

    @torch.no_grad()
    def before_val(self) -> None:
        t = self.trainer
        layers = [m for m in t.model.modules() if isinstance(m, _BN) and m.track_running_stats]
        if not layers:
            return
        momenta = [m.momentum for m in layers]
        for m in layers:
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the batches below
        was_training = t.model.training
        t.model.train()
        rng = get_rng_state()
        loader = None
        try:
            loader = t.build_train_loader()
            if hasattr(loader, "set_epoch"):
                loader.set_epoch(-1 - t.last_epoch)  # an order of its own for the weights of each epoch
            for batch in islice(loader, self.num_batches):
                if t.device.type != "cpu":
                    batch = move_to_device(batch, t.device)
                t.model(batch)
        finally:
            set_rng_state(rng)  # these forwards' draws must not shift training's
            dataset = getattr(loader, "dataset", None)
            if isinstance(dataset, IterableDataset) and callable(getattr(dataset, "set_epoch", None)):
                dataset.set_epoch(t.epoch)  # a stream is training's own object too: back to the pass it is in
            for m, momentum in zip(layers, momenta):
                m.momentum = momentum
            t.model.train(was_training)
        if t.dist is not None:
            self._average_over_ranks(layers)

    def _average_over_ranks(self, layers: list) -> None:
        """Average each rank's statistics (one all-reduce), so every rank validates the same model."""
        stats = [s for m in layers for s in (m.running_mean, m.running_var)]
        flat = distributed.sum_tensor(torch.cat([s.reshape(-1).float() for s in stats])) / self.trainer.world_size
        offset = 0
        for s in stats:
            s.copy_(flat[offset:offset + s.numel()].view_as(s))
            offset += s.numel()
