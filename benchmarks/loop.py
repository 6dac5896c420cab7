"""Loop overhead: the trainer against a hand-written PyTorch loop doing the same work.

    python benchmarks/loop.py [--epochs 10] [--repeats 7]

An MLP 64 -> 128 -> 10 on synthetic data (8192 x 64, 10 classes), batch 64, SGD with momentum and
the default cosine schedule stepped every iteration, one CPU thread. The hand-written loop uses the
same model, data, seed, schedule and a plain shuffling ``DataLoader``; the trainer runs with
``hooks=minimal`` and ``hooks=default`` (writers at their default periods, no val set so no
validation time is counted). The presets save a checkpoint every epoch, but not within
``min_interval_secs`` (10 s) of the last one, and an epoch here is 128 steps, a tenth of a second:
so the "a checkpoint every epoch" rows run them with ``min_interval_secs=0``, and a second
hand-written loop does what a script must to be resumable each epoch: ``torch.save`` of model,
optimizer, schedule and RNG state. Runs are
interleaved in rounds (the order rotating, a ``gc.collect()`` before each run); the table gives
the median seconds per step and the median of each round's ratio to the hand-written loop.

The "tiny step" rows run a 16 -> 4 linear model on ready-made batches, where a step costs a few
tens of µs, so the trainer's own per-step cost (hooks, storage, checks) shows as "added µs per
step" above the machine's noise; divide it by a real step's time to get its share.
"""
from __future__ import annotations

import argparse
import gc
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import launcher  # noqa: E402
from launcher.data import synthetic  # noqa: E402

OVERRIDES = [
    "data=synthetic", "data.train.size=10240", "data.train.shape=[64]", "data.train.val_fraction=0.2", "data.val=null",
    "data.batch_size=64", "model.hidden=[128]", "optimizer.lr=0.05", "optimizer.weight_decay=0", "optimizer.nesterov=false",
    "trainer.device=cpu", "trainer.resume=false",
]


class LoopClock:
    """Two hooks that time the loop itself: from the end of ``before_train`` to the start of ``after_train``.

    They override only those two events, so they add nothing to a step; fixed per-run costs
    (opening TensorBoard, the final checkpoint) stay out of the per-step figure, as they stay out
    of the hand-written loop's.
    """

    def __init__(self):
        from launcher.hooks import HookBase, Priority

        clock = self

        class Start(HookBase):
            priority = Priority.LOWEST + 1

            def before_train(self):
                clock.start = time.perf_counter()

        class Stop(HookBase):
            priority = Priority.HIGHEST - 1

            def after_train(self):
                clock.stop = time.perf_counter()

        self.hooks = {"_clock_start": Start(), "_clock_stop": Stop()}
        self.start = self.stop = 0.0

    @property
    def seconds(self) -> float:
        return self.stop - self.start


def hand_written(epochs: int, save_to: Optional[Path] = None) -> Callable[[], float]:
    """The plain loop; with ``save_to``, it also ``torch.save``s model, optimizer, schedule and RNG each epoch."""
    def run() -> float:
        torch.manual_seed(0)
        from launcher.models import MLP

        model = MLP(in_features=64, hidden=[128], num_classes=10).net
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        train = synthetic("train", size=10240, shape=[64], val_fraction=0.2)
        loader = DataLoader(train, batch_size=64, shuffle=True, generator=torch.Generator().manual_seed(0))
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * len(loader))
        steps = 0
        start = time.perf_counter()
        for epoch in range(epochs):
            for x, y in loader:
                loss = F.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
                steps += 1
            if save_to is not None:  # what a hand-written script does to be resumable: one file per epoch
                save_to.mkdir(parents=True, exist_ok=True)
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                            "epoch": epoch + 1, "torch_rng": torch.get_rng_state()}, save_to / f"epoch_{epoch + 1}.pt")
        return (time.perf_counter() - start) / steps

    return run


def with_trainer(hooks: str, epochs: int, root: Path, *extra: str) -> Callable[[], float]:
    cfg = launcher.compose([*OVERRIDES, f"hooks={hooks}", f"trainer.max_epochs={epochs}", *extra])
    counter = iter(range(10**9))

    def run() -> float:
        trainer = launcher.build_trainer(cfg, root / f"{hooks}-{next(counter)}")
        clock = LoopClock()
        trainer.register_hooks(clock.hooks)
        trainer.train()
        return clock.seconds / trainer.iter

    return run


class Prebatched:
    """``data`` whose loader is a list of ready batches: the step costs almost nothing but the loop."""

    def __init__(self, steps: int = 256):
        g = torch.Generator().manual_seed(0)
        self.batches = [(torch.randn(8, 16, generator=g), torch.randint(0, 4, (8,), generator=g)) for _ in range(steps)]

    def train_loader(self):
        return self.batches

    def val_loader(self):
        return None


class TinyClassifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 4)

    def forward(self, batch):
        x, y = batch
        return F.cross_entropy(self.lin(x), y)


def tiny_hand_written(epochs: int) -> Callable[[], float]:
    data = Prebatched()

    def run() -> float:
        torch.manual_seed(0)
        model = TinyClassifier()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * len(data.batches))
        start = time.perf_counter()
        for _ in range(epochs):
            for batch in data.train_loader():
                loss = model(batch)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
                sched.step()
        return (time.perf_counter() - start) / (epochs * len(data.batches))

    return run


def tiny_trainer(hooks: str, epochs: int, root: Path, *extra: str) -> Callable[[], float]:
    from launcher.runs.build import build

    cfg = launcher.compose([*OVERRIDES, f"hooks={hooks}", f"trainer.max_epochs={epochs}", *extra])
    data = Prebatched()
    counter = iter(range(10**9))

    def run() -> float:
        torch.manual_seed(0)
        model = TinyClassifier()
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        hooks_ = {name: build(f"hooks.{name}", node) for name, node in cfg.hooks.items()}
        clock = LoopClock()
        trainer = build("trainer", cfg.trainer, model=model, optimizer=opt, data=data, hooks={**hooks_, **clock.hooks},
                        work_dir=root / f"tiny-{hooks}-{next(counter)}")
        trainer.train()
        return clock.seconds / trainer.iter

    return run


SAVING = "hand-written loop, torch.save each epoch"
EVERY = "trainer, hooks={}, a checkpoint every epoch"
EVERY_EPOCH = "hooks.checkpointer.min_interval_secs=0"  # the presets skip a periodic checkpoint within 10 s of the last


def base_of(name: str) -> str:
    return "tiny step: hand-written loop" if name.startswith("tiny") else "hand-written loop"


def measure(epochs: int, repeats: int) -> Dict[str, Dict[str, float]]:
    """Seconds per step of every contender and its ratios, as medians over ``repeats`` rounds.

    Each round runs every contender once, starting one place further along the list each time
    (so none always follows the same one), after a ``gc.collect()``; a ratio is taken within a
    round and its median reported, so a drift of the machine's speed between rounds cancels.
    """
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        contenders = {
            "hand-written loop": hand_written(epochs),
            SAVING: hand_written(epochs, Path(tmp) / "hand"),
            "trainer, hooks=none": with_trainer("none", epochs, Path(tmp)),
            "trainer, hooks=minimal": with_trainer("minimal", epochs, Path(tmp)),
            "trainer, hooks=default": with_trainer("default", epochs, Path(tmp)),
            EVERY.format("minimal"): with_trainer("minimal", epochs, Path(tmp), EVERY_EPOCH),
            EVERY.format("default"): with_trainer("default", epochs, Path(tmp), EVERY_EPOCH),
            "tiny step: hand-written loop": tiny_hand_written(epochs),
            "tiny step: trainer, hooks=none": tiny_trainer("none", epochs, Path(tmp)),
            "tiny step: trainer, hooks=minimal": tiny_trainer("minimal", epochs, Path(tmp)),
            "tiny step: trainer, hooks=default": tiny_trainer("default", epochs, Path(tmp)),
            "tiny step: trainer, hooks=full": tiny_trainer("full", epochs, Path(tmp)),
        }
        names = list(contenders)
        times: Dict[str, List[float]] = {name: [] for name in names}
        for fn in contenders.values():  # warm-up: imports, allocator, first-call paths
            fn()
        for r in range(repeats):
            for name in names[r % len(names):] + names[: r % len(names)]:
                gc.collect()
                times[name].append(contenders[name]())
    results = {}
    for name, ts in times.items():
        row = {"seconds": statistics.median(ts),
               "ratio": statistics.median(t / b for t, b in zip(ts, times[base_of(name)]))}
        if not name.startswith("tiny"):
            row["to_saving"] = statistics.median(t / b for t, b in zip(ts, times[SAVING]))
        results[name] = row
    return results


def table(results: Dict[str, Dict[str, float]]) -> str:
    lines = ["| loop | µs per step | ratio | added µs per step | ratio to a hand loop that saves each epoch |",
             "|---|---|---|---|---|"]
    for name, row in results.items():
        base = results[base_of(name)]["seconds"]
        to_saving = f"{row['to_saving']:.3f}x" if "to_saving" in row else ""
        lines.append(f"| {name} | {row['seconds'] * 1e6:.1f} | {row['ratio']:.3f}x | "
                     f"{(row['seconds'] - base) * 1e6:+.1f} | {to_saving} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.ERROR)
    print(table(measure(args.epochs, args.repeats)))


if __name__ == "__main__":
    main()
