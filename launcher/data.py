"""Built-in datasets, and ``DataLoaders``, which builds a run's train and val loaders from two datasets.

Each epoch's order and each worker's seeds follow (``seed``, rank, epoch, batch), so a run resumed mid-epoch draws
what an uninterrupted one would (docs/contracts.md).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

if TYPE_CHECKING:
    import numpy as np

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset, TensorDataset

from launcher.engine.checkpoint import brief
from launcher.engine.distributed import is_main_process
from launcher.engine.errors import ConfigError
from launcher.engine.loaders import EpochLoader, ShardSampler, StreamLoader, ValLoader

logger = logging.getLogger(__name__)


def _split(n: int, split: str, val_fraction: float, split_seed: int) -> torch.Tensor:
    if split not in ("train", "val"):
        raise ValueError(f"split should be 'train' or 'val', got {split!r}")
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction should be between 0 and 1 (exclusive), got {val_fraction!r}")
    order = torch.randperm(n, generator=torch.Generator().manual_seed(split_seed))
    n_val = int(round(n * val_fraction))
    return order[:n_val] if split == "val" else order[n_val:]


def _bundled_digits() -> "np.ndarray":
    """scikit-learn's ``datasets/data/digits.csv.gz`` (64 pixels then the label, per row), read from the installed
    package: importing ``sklearn.datasets`` takes a second. ``load_digits`` is the fallback."""
    import importlib.util

    import numpy as np

    spec = importlib.util.find_spec("sklearn")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / "datasets" / "data" / "digits.csv.gz"
        if path.is_file():
            return np.loadtxt(path, delimiter=",")
    from sklearn.datasets import load_digits

    bunch = load_digits()
    return np.concatenate([bunch.data, bunch.target[:, None]], axis=1)


def digits(split: str = "train", val_fraction: float = 0.2, split_seed: int = 0) -> TensorDataset:
    """scikit-learn's bundled 8x8 digits (1,797 images, 10 classes): ``(image, label)`` items, images ``(1, 8, 8)``
    in ``[0, 1]``. The split depends on ``split_seed`` only, so runs with different seeds share it."""
    table = _bundled_digits()
    images = torch.tensor(table[:, :-1], dtype=torch.float32).reshape(-1, 1, 8, 8) / 16.0
    labels = torch.tensor(table[:, -1], dtype=torch.long)
    idx = _split(len(labels), split, val_fraction, split_seed)
    return TensorDataset(images[idx], labels[idx])


def synthetic(
    split: str = "train",
    size: int = 2048,
    shape: Sequence[int] = (1, 8, 8),
    num_classes: int = 10,
    val_fraction: float = 0.2,
    split_seed: int = 0,
) -> TensorDataset:
    """Gaussian inputs labelled by a fixed random linear teacher: learnable, made in memory."""
    if size <= 1:
        raise ValueError(f"synthetic: size should be greater than 1, got {size!r}")
    where = f"data.{split}" if split in ("train", "val") else "synthetic"
    if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence) or not shape or not all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in shape):
        raise ValueError(f"{where}.shape should be a list of positive integers, one sample's shape (e.g. [64] or "
                         f"[1, 8, 8]), got {shape!r}")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"{where}.num_classes should be an integer of at least 2, got {num_classes!r}")
    gen = torch.Generator().manual_seed(split_seed)
    x = torch.randn(size, *shape, generator=gen)
    teacher = torch.randn(x[0].numel(), num_classes, generator=gen)
    y = (x.flatten(1) @ teacher).argmax(dim=1)
    idx = _split(size, split, val_fraction, split_seed)
    return TensorDataset(x[idx], y[idx])


# The built-in datasets cut train and val from one draw that these settings make: both splits must share them.
_DRAW_KEYS = {"launcher.data.synthetic": ("size", "num_classes", "val_fraction", "split_seed"),
              "launcher.data.digits": ("val_fraction", "split_seed")}


def check_splits(data: Any) -> None:
    """A ConfigError where ``data.train`` and ``data.val`` are splits of one built-in dataset that would overlap:
    a draw setting given to one alone, or the same split twice."""
    import inspect

    from omegaconf import OmegaConf

    train, val = (data.get(k) if OmegaConf.is_dict(data) else None for k in ("train", "val"))
    if not (OmegaConf.is_dict(train) and OmegaConf.is_dict(val)):
        return
    target = train.get("_target_")
    if target not in _DRAW_KEYS or val.get("_target_") != target:
        return
    defaults = inspect.signature(synthetic if target.endswith("synthetic") else digits).parameters
    for key in ("split", *_DRAW_KEYS[target]):
        mine, theirs = (node.get(key, defaults[key].default) for node in (train, val))
        mine, theirs = (OmegaConf.to_container(v) if OmegaConf.is_config(v) else v for v in (mine, theirs))
        if key == "split" and mine == theirs:
            raise ConfigError(f"data.val.split={theirs}: data.train takes the {mine} split too, so the run would validate "
                              f"on its training data; give data.train.split=train and data.val.split=val")
        if key != "split" and mine != theirs and not (isinstance(mine, (list, tuple)) and list(mine) == list(theirs or [])):
            raise ConfigError(f"data.val.{key}={theirs} differs from data.train.{key}={mine}: both splits are cut from "
                              f"one draw, so they would overlap; give both splits the same {key}")


def arrays(path: str, inputs: str = "x", targets: str = "y", dtype: str = "float32") -> TensorDataset:
    """Your own data from a file: a NumPy ``.npz`` or a ``torch.save``'d dict, holding ``inputs`` and ``targets``."""
    import numpy as np

    file = Path(path).expanduser()
    if not file.is_file():
        what = "is a directory" if file.is_dir() else "does not exist"
        where = "" if file.is_absolute() else f", relative to the current directory {os.getcwd()}"
        raise FileNotFoundError(f"data file {str(file)!r} {what} (expected a .npz or .pt file{where})")
    with open(file, "rb") as f:
        head = f.read(64)
    if not head.startswith((b"PK\x03\x04", b"PK\x05\x06", b"\x80")):  # zip (.npz, torch.save) or pickle (old torch.save)
        text = head.decode("utf-8", "replace").splitlines()[0][:40] if head else ""
        raise ValueError(f"data file {str(file)!r} is not a .npz or a torch.save'd dict of arrays: it "
                         + (f"starts {text!r} (a text file? load it and save its arrays with numpy.savez(path, "
                            f"{inputs}=..., {targets}=...))" if head else "is empty"))
    try:
        if file.suffix == ".npz":
            with np.load(file) as npz:
                content = {k: torch.from_numpy(npz[k]) for k in npz.files}
        else:
            content = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:
        raise ValueError(f"data file {str(file)!r} is unreadable as a .npz or a torch.save'd dict of arrays: {brief(err)}") from err
    if not isinstance(content, dict):
        raise ValueError(f"data file {str(file)!r} holds a {type(content).__name__}; expected a dict of arrays ({inputs!r}, {targets!r})")
    missing = [k for k in (inputs, targets) if k not in content]
    if missing:
        raise KeyError(f"data file {str(file)!r} has no array named {missing[0]!r}; it has {sorted(content)}")
    if not isinstance(getattr(torch, str(dtype), None), torch.dtype):
        raise ValueError(f"data dtype {dtype!r} is not a torch dtype; use e.g. float32, float16 or bfloat16")
    x, y = torch.as_tensor(content[inputs]).to(getattr(torch, dtype)), torch.as_tensor(content[targets])
    for name, array in ((inputs, x), (targets, y)):
        if array.ndim == 0:
            raise ValueError(f"data file {str(file)!r}: {name!r} is a single value, not an array with one entry per sample")
    if x.ndim < 2:
        raise ValueError(f"data file {str(file)!r}: {inputs!r} has shape {tuple(x.shape)}, one number per sample; inputs "
                         f"need a feature axis, shape (samples, features...): store x[:, None] for a single feature")
    if y.ndim != 1:
        raise ValueError(f"data file {str(file)!r}: {targets!r} has shape {tuple(y.shape)}; targets are one class number "
                         f"per sample, shape ({len(y)},)" + (" (one-hot rows? store y.argmax(1))" if y.ndim == 2 else ""))
    if y.is_floating_point() and not torch.equal(y, y.round()):  # .long() would cut 0.7 to class 0
        bad = y[y != y.round()].flatten()[0].item()
        raise ValueError(f"data file {str(file)!r}: {targets!r} holds non-integer values ({bad:g}): a classifier's "
                         f"labels are class numbers 0, 1, ...; store them as integers")
    y = y.long()
    if len(x) != len(y):
        raise ValueError(f"data file {str(file)!r}: {inputs!r} has {len(x)} samples but {targets!r} has {len(y)}")
    if x.is_floating_point():
        bad = [int((~torch.isfinite(chunk)).flatten(1).any(1).sum()) for chunk in x.split(65536)]
        if sum(bad) and is_main_process():
            logger.warning(
                "data file %r: %d of %d samples of %r hold nan or infinite values; a model given them will likely "
                "return a nan loss (which stops the run)", str(file), sum(bad), len(x), inputs)
    return TensorDataset(x, y)


LARGEST = 2**31 - 1  # the largest batch size (or number of workers) taken: more is a typo


class DataLoaders:
    """Builds the train and val loaders of a run from two datasets."""

    def __init__(
        self,
        train: Dataset,
        val: Optional[Dataset] = None,
        batch_size: int = 64,
        val_batch_size: Optional[int] = None,
        num_workers: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        pin_memory: bool = False,
        seed: int = 0,
        persistent_workers: bool = False,
        prefetch_factor: Optional[int] = None,
    ) -> None:
        sizes = (("batch_size", batch_size), ("num_workers", num_workers)) + \
            ((("val_batch_size", val_batch_size),) if val_batch_size is not None else ())  # null: batch_size
        for key, value in sizes:
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if key == "num_workers" else 1):
                limit = "zero or more" if key == "num_workers" else "greater than zero"
                also = " (or null: batch_size)" if key == "val_batch_size" else ""
                raise ValueError(f"data.{key} should be an integer {limit}{also}, got {value!r}")
            if value > LARGEST:  # torch's samplers would fail at the first batch, blaming the data
                raise ValueError(f"data.{key} should be an integer from {0 if key == 'num_workers' else 1} to "
                                 f"2**31-1 ({LARGEST}), got {value!r}")
        if prefetch_factor is not None and (isinstance(prefetch_factor, bool) or not isinstance(prefetch_factor, int)
                                            or prefetch_factor < 1):
            raise ValueError(f"data.prefetch_factor should be an integer greater than zero (batches each worker "
                             f"loads ahead), or null for torch's default, got {prefetch_factor!r}")
        for key, value in (("shuffle", shuffle), ("drop_last", drop_last), ("pin_memory", pin_memory),
                           ("persistent_workers", persistent_workers)):
            if not isinstance(value, bool):  # "no" or "off" would count as true
                raise ValueError(f"data.{key} should be true or false, got {value!r}")
        if not isinstance(seed, int):
            raise ValueError(f"data.seed should be an integer, got {seed!r}")
        for key, dataset in (("train", train), ("val", val)):
            if dataset is None:
                continue
            if isinstance(dataset, (str, bytes, int, float, dict)) or \
                    not (hasattr(dataset, "__getitem__") or hasattr(dataset, "__iter__")):
                raise ValueError(f"data.{key} should be a dataset (a config with a _target_ that builds one)"
                                 f"{' or null for none' if key == 'val' else ''}, got {dataset!r}")
        self.train, self.val, self.batch_size, self.seed = train, val, batch_size, seed
        self.val_batch_size = batch_size if val_batch_size is None else val_batch_size
        self.num_workers, self.shuffle, self.drop_last = num_workers, shuffle, drop_last
        self.pin_memory = pin_memory and torch.cuda.is_available()
        # worker options, which torch refuses without workers
        unused = [f"data.{k}={v if not isinstance(v, bool) else str(v).lower()}" for k, v in
                  (("persistent_workers", persistent_workers), ("prefetch_factor", prefetch_factor)) if v not in (None, False)]
        if unused and not num_workers:
            logger.warning("%s %s no effect with data.num_workers=0 (batches are loaded in the training process); set "
                           "data.num_workers=N for loader processes", " and ".join(unused),
                           "has" if len(unused) == 1 else "have")
        self._workers = {"persistent_workers": persistent_workers, "prefetch_factor": prefetch_factor} if num_workers else {}
        self._warned: set = set()  # streams already warned about (loaders are built again, e.g. by PreciseBN)

    def train_loader(self, rank: int = 0, world_size: int = 1, collate_fn: Optional[Callable] = None) -> DataLoader:
        if isinstance(self.train, IterableDataset):
            if self._workers.get("persistent_workers"):
                raise ValueError(f"data.persistent_workers: true keeps each worker's copy of the stream "
                                 f"{type(self.train).__name__} from pass to pass, so every pass repeats the first; "
                                 f"set it to false for a stream")
            if world_size > 1 and rank == 0 and "data.train" not in self._warned:
                self._warned.add("data.train")
                _warn_stream_under_ddp("data.train", self.train)
            return StreamLoader(self.train, self.batch_size, self.drop_last, self.seed, rank, num_workers=self.num_workers,
                                pin_memory=self.pin_memory, collate_fn=collate_fn, **self._workers)
        sampler = DistributedSampler(
            self.train, num_replicas=world_size, rank=rank, shuffle=self.shuffle, seed=self.seed, drop_last=self.drop_last
        )
        loader = EpochLoader(
            self.train, self.batch_size, sampler, self.drop_last, self.seed,
            num_workers=self.num_workers, pin_memory=self.pin_memory, collate_fn=collate_fn, **self._workers,
        )
        if len(loader) == 0 and len(self.train) == 0:
            raise ValueError("data.train: the training set is empty (0 samples); check the data it is built from")
        if len(loader) == 0:
            raise ValueError(
                f"data.batch_size={self.batch_size} with drop_last leaves no batch from the {len(sampler)} "
                f"training samples of this process; lower data.batch_size or set data.drop_last=false"
            )
        return loader

    def val_loader(self, rank: int = 0, world_size: int = 1, collate_fn: Optional[Callable] = None) -> Optional[DataLoader]:
        if self.val is None:
            return None
        if isinstance(self.val, IterableDataset):  # read as it comes: each rank's stream is its own share
            if world_size > 1 and rank == 0 and "data.val" not in self._warned:
                self._warned.add("data.val")
                _warn_stream_under_ddp("data.val", self.val)
            return ValLoader(self.val, self.seed, batch_size=self.val_batch_size, num_workers=self.num_workers,
                             pin_memory=self.pin_memory, collate_fn=collate_fn, **self._workers)
        if len(self.val) == 0:
            raise ValueError("data.val holds no samples (its split of the data is empty); give it samples "
                             "(e.g. a larger data.train.val_fraction or dataset) or set data.val=null")
        sampler = ShardSampler(len(self.val), rank, world_size)
        return ValLoader(
            self.val, self.seed, batch_size=self.val_batch_size, sampler=sampler, num_workers=self.num_workers,
            pin_memory=self.pin_memory, collate_fn=collate_fn, **self._workers,
        )


def _warn_stream_under_ddp(key: str, dataset: IterableDataset) -> None:
    logger.warning(
        "%s is a stream (%s): under DDP it must yield each rank its own share (torch.distributed.get_rank()), with "
        "as many batches on each", key, type(dataset).__name__)
