"""Built-in classifiers: ``forward((inputs, labels))`` returns the cross-entropy loss in train mode,
``{"loss", "accuracy"}`` in eval mode (docs/contracts.md)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import nn

from launcher.engine.errors import ConfigError, ModelInputError, describe


class Classifier(nn.Module):
    """Wraps ``self.net`` (inputs -> logits) in the train/eval contract."""

    net: nn.Module

    def forward(self, batch: Any) -> Union[torch.Tensor, Dict[str, torch.Tensor]]:
        if isinstance(batch, (dict, torch.Tensor)):  # two keys would unpack as two strings, two rows as inputs and labels
            raise self.not_a_pair(batch)
        try:
            inputs, labels = batch
        except (TypeError, ValueError):
            raise self.not_a_pair(batch) from None
        net = self._modules.get("net")  # faster than self.net, which goes through Module.__getattr__
        try:  # costs nothing until it raises (Python 3.11+)
            logits = (net if net is not None else self.net)(inputs)
            loss = F.cross_entropy(logits, labels)
        except (RuntimeError, IndexError, ValueError) as err:
            raise self.misfit(inputs, labels, err) from err
        if self.training:
            return loss
        return {"loss": loss, "accuracy": (logits.argmax(dim=1) == labels).float().mean()}

    def not_a_pair(self, batch: Any) -> BaseException:
        """The error for a batch that is no (inputs, labels) pair: what the loader gave, what to change."""
        given = describe(batch) + ("" if isinstance(batch, (dict, list, tuple)) else " alone (no labels)")
        return ModelInputError(f"{type(self).__name__} takes batches of (inputs, labels); the data loader gave {given}: "
                               f"use a dataset whose items are (x, y) pairs, or your own model (docs/contracts.md)")

    num_classes: int = 0  # set by the subclasses

    def misfit(self, inputs: Any, labels: Any, err: BaseException) -> BaseException:
        """A ConfigError naming the ``model.*`` key that does not fit this batch (``data.val`` in eval mode), or ``err``."""
        shape = list(inputs.shape) if isinstance(inputs, torch.Tensor) else None
        why = None
        if isinstance(inputs, torch.Tensor) and not inputs.is_floating_point():
            why = (f"the inputs are {str(inputs.dtype).replace('torch.', '')}: {type(self).__name__} takes floating-point "
                   f"inputs", "load them as floats (data=arrays: dtype float32, its default)")
        elif isinstance(inputs, torch.Tensor):
            why = self.input_misfit(inputs)
        if why is None and isinstance(labels, torch.Tensor) and self.num_classes:
            if labels.is_floating_point():
                why = (f"the labels are {str(labels.dtype).replace('torch.', '')}: cross-entropy takes class numbers "
                       f"0..{self.num_classes - 1} as integers", "")
            elif labels.numel() and not 0 <= int(labels.min()) <= int(labels.max()) < self.num_classes:
                low, high = int(labels.min()), int(labels.max())
                why = (f"model.num_classes={self.num_classes}, but this batch has labels from {low} to {high} (class "
                       f"numbers go 0..num_classes-1)",
                       f"set model.num_classes={high + 1} or more" if low >= 0 else "labels cannot be negative")
        if why is None:
            return err
        what, fix = why
        if not self.training:
            what, fix = f"data.val does not fit the model: {what}", "make data.val's samples like data.train's"
        return ConfigError(f"{what}{'; ' + fix if fix else ''} (this batch's inputs have shape {shape}; "
                           f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})")

    def input_misfit(self, inputs: torch.Tensor) -> Optional[Tuple[str, str]]:
        """What in ``inputs`` does not fit the network, and the config change that fits it; None if they fit."""
        return None


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
        self.in_features, self.num_classes = width, num_classes
        layers: list = [nn.Flatten()]
        for h in _widths("hidden", hidden):
            layers += [nn.Linear(width, h), nn.ReLU()]
            if dropout:
                layers.append(nn.Dropout(dropout))
            width = h
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def input_misfit(self, inputs: torch.Tensor) -> Optional[Tuple[str, str]]:
        features = inputs[0].numel() if inputs.dim() > 1 else None
        if features is not None and features != self.in_features:
            return (f"model.in_features={self.in_features}, but each sample of the data has {features} features "
                    f"(shape {list(inputs.shape[1:])})", f"set model.in_features={features}")
        return None


class CNN(Classifier):
    """``3x3 conv -> BatchNorm -> ReLU`` per channel width, a 2x2 max-pool, then a linear head."""

    def __init__(self, in_channels: int = 1, channels: Sequence[int] = (32, 64), num_classes: int = 10):
        super().__init__()
        width, num_classes = _positive("in_channels", in_channels), _positive("num_classes", num_classes)
        self.in_channels, self.num_classes = width, num_classes
        layers: list = []
        for c in _widths("channels", channels):
            layers += [nn.Conv2d(width, c, 3, padding=1), nn.BatchNorm2d(c), nn.ReLU()]
            width = c
        layers += [nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(width * 4, num_classes)]
        self.net = nn.Sequential(*layers)

    def input_misfit(self, inputs: torch.Tensor) -> Optional[Tuple[str, str]]:
        if inputs.dim() != 4:
            return (f"model=cnn takes images, batches shaped (batch, channels, height, width); this data's batches "
                    f"have {inputs.dim()} dimensions", "use model=mlp, or data shaped [channels, height, width]")
        if inputs.shape[1] != self.in_channels:
            return (f"model.in_channels={self.in_channels}, but the data's images have {inputs.shape[1]} channels "
                    f"(shape {list(inputs.shape[1:])})", f"set model.in_channels={inputs.shape[1]}")
        return None
