"""Built-in classifiers that follow the trainer's model contract (see ``launcher.trainer``).

``forward(batch)`` takes ``(inputs, labels)``: in train mode it returns the cross-entropy
loss, in eval mode ``{"loss", "accuracy"}``.
"""
from __future__ import annotations

from typing import Any, Dict, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn


class Classifier(nn.Module):
    """Wraps ``self.net`` (inputs -> logits) in the train/eval contract."""

    net: nn.Module

    def forward(self, batch: Any) -> Union[torch.Tensor, Dict[str, torch.Tensor]]:
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


class MLP(Classifier):
    """Flatten, then ``Linear -> ReLU`` for each hidden width, then a linear head."""

    def __init__(self, in_features: int = 64, hidden: Sequence[int] = (128,), num_classes: int = 10, dropout: float = 0.0):
        super().__init__()
        layers: list = [nn.Flatten()]
        width = in_features
        for h in hidden:
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
        layers: list = []
        width = in_channels
        for c in channels:
            layers += [nn.Conv2d(width, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU()]
            width = c
        layers += [nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(width * 4, num_classes)]
        self.net = nn.Sequential(*layers)
