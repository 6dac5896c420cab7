"""Built-in classifiers that follow the trainer's model contract (see ``launcher.trainer``).

``forward(batch)`` takes ``(inputs, labels)``: in train mode it returns the cross-entropy
loss, in eval mode ``{"loss", "accuracy"}``.
"""
from __future__ import annotations

from typing import Any, Dict, List, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn


class Classifier(nn.Module):
    """Wraps ``self.net`` (inputs -> logits) in the train/eval contract."""

    net: nn.Module

    def forward(self, batch: Any) -> Union[torch.Tensor, Dict[str, torch.Tensor]]:
        if isinstance(batch, dict):  # two keys would unpack as two strings, and fail far from here
            raise TypeError(f"{type(self).__name__} takes batches of (inputs, labels); the data loader gave a dict "
                            f"with keys {sorted(batch)}: use a dataset of (x, y) pairs, or a model whose forward reads "
                            f"your dict (README: 'Model contract')")
        inputs, labels = batch
        # Not ``self.net`` first: a submodule read as an attribute fails the normal lookup and builds
        # an AttributeError before Module.__getattr__ finds it, ~9k instructions a step on the
        # benchmark's MLP. (A subclass whose ``net`` is no submodule still gets ``self.net``.)
        net = self._modules.get("net")
        logits = (net if net is not None else self.net)(inputs)
        loss = F.cross_entropy(logits, labels)
        if self.training:
            return loss
        return {"loss": loss, "accuracy": (logits.argmax(dim=1) == labels).float().mean()}


def _widths(key: str, value: Any) -> List[int]:
    """``value`` as a list of positive ints (a config's ListConfig too), else a ValueError naming ``model.<key>``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        raise ValueError(f"model.{key} should be a list of positive integers, e.g. [128, 64], got {value!r}")
    return list(value)


def _positive(key: str, value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"model.{key} should be a positive integer, got {value!r}")
    return value


class MLP(Classifier):
    """Flatten, then ``Linear -> ReLU`` for each hidden width, then a linear head."""

    def __init__(self, in_features: int = 64, hidden: Sequence[int] = (128,), num_classes: int = 10, dropout: float = 0.0):
        super().__init__()
        width, num_classes = _positive("in_features", in_features), _positive("num_classes", num_classes)
        if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0 <= dropout < 1:
            raise ValueError(f"model.dropout should be a number in [0, 1), got {dropout!r}")
        layers: list = [nn.Flatten()]
        for h in _widths("hidden", hidden):
            layers += [nn.Linear(width, h), nn.ReLU()]
            if dropout:
                layers.append(nn.Dropout(dropout))
            width = h
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)


class CNN(Classifier):
    """``3x3 conv -> BatchNorm -> ReLU`` per channel width, a 2x2 max-pool, then a linear head."""

    def __init__(self, in_channels: int = 1, channels: Sequence[int] = (32, 64), num_classes: int = 10):
        super().__init__()
        width, num_classes = _positive("in_channels", in_channels), _positive("num_classes", num_classes)
        layers: list = []
        for c in _widths("channels", channels):
            layers += [nn.Conv2d(width, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU()]
            width = c
        layers += [nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(width * 4, num_classes)]
        self.net = nn.Sequential(*layers)
