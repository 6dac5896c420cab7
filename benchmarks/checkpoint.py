"""Checkpoint cost and resume start-up, each measured side by side with its bare alternative.

    python benchmarks/checkpoint.py [--repeats 9] [--hidden 2048]

1. save: the time training is held by a checkpoint (``BackgroundWriter.write``: serialize now,
   then temp file, fsync, rename, fsync dir and ``last`` pointer on a thread) against a bare
   ``torch.save`` of the same state dict; and the whole durable write done synchronously (as for
   ``final.pt``) against a bare ``torch.save`` followed by an fsync of the file.
2. load: ``load_newest_valid`` (follows ``last``, verifies by loading) against a bare ``torch.load``.
3. time to the first step (building model, data and trainer, then training one step):
   resuming at 90% of a 10,000-sample epoch (checkpoint load, RNG and sampler fast-forward
   included) against a fresh start; and, for contrast, a resume that reads the skipped
   batches again (what a loader that cannot skip costs).

Repeats are interleaved and medians reported, so the ratios hold on a noisy machine.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from launcher.hooks import HookBase  # noqa: E402
from launcher.engine.checkpoint import BackgroundWriter, load_newest_valid, save_checkpoint  # noqa: E402
from launcher.data import DataLoaders, synthetic  # noqa: E402
from launcher.models import MLP  # noqa: E402
from launcher.engine.trainer import IterTrainer  # noqa: E402


class FirstStep(Exception):
    pass


class StopAfterFirstStep(HookBase):
    def after_step(self) -> None:
        raise FirstStep


class RereadingLoaders(DataLoaders):
    """Train loader without ``set_epoch``: the trainer must read skipped batches again."""

    def train_loader(self, rank: int = 0, world_size: int = 1):
        sampler = torch.utils.data.DistributedSampler(self.train, num_replicas=1, rank=0, shuffle=True, seed=self.seed)
        return torch.utils.data.DataLoader(self.train, batch_size=self.batch_size, sampler=sampler)


def make_trainer(work_dir: Path, hidden: int, resume, loaders=DataLoaders) -> IterTrainer:
    torch.manual_seed(0)
    model = MLP(in_features=64, hidden=[hidden, hidden], num_classes=10)
    data = loaders(synthetic(size=12_500, shape=[64], val_fraction=0.2), None, batch_size=32, seed=0)  # 10,000 train
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    return IterTrainer(model, opt, data, hooks=[StopAfterFirstStep()], device="cpu", work_dir=work_dir,
                       max_iters=10**6, resume=resume)


def time_to_first_step(build) -> float:
    start = time.perf_counter()
    try:
        build().train()
    except FirstStep:
        return time.perf_counter() - start
    raise RuntimeError("training did not reach a step")


def save_and_fsync(state, path: Path) -> None:
    """What a careful hand-written script does for a checkpoint that survives a crash of the machine."""
    torch.save(state, path)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def median_pair(a, b, repeats: int):
    ta, tb = [], []
    for _ in range(repeats):
        ta.append(a())
        tb.append(b())
    return statistics.median(ta), statistics.median(tb)


def timed(fn):
    def run() -> float:
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    return run


def measure(repeats: int, hidden: int):
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        trainer = make_trainer(tmp / "t", hidden, resume=False)
        for p in trainer.model.parameters():  # momentum buffers, as after a real step
            trainer.optimizer.state[p]["momentum_buffer"] = torch.randn_like(p)
        state = trainer.state_dict()
        mb = sum(t.numel() * t.element_size() for t in trainer.model.state_dict().values()) * 2 / 2**20
        bare, ours = tmp / "bare.pt", tmp / "ckpt" / "state.pt"
        writer = BackgroundWriter()

        def held() -> float:  # how long training waits; the disk work finishes on the thread
            start = time.perf_counter()
            writer.write(state, ours)
            took = time.perf_counter() - start
            writer.wait()
            return took

        t_bare, t_ours = median_pair(timed(lambda: torch.save(state, bare)), held, repeats)
        rows.append((f"save, training held ({mb:.0f} MB state)", t_bare, t_ours))
        t_bare, t_ours = median_pair(timed(lambda: save_and_fsync(state, bare)),
                                     timed(lambda: writer.write(state, ours, background=False)), repeats)
        rows.append((f"save, durable on disk: bare torch.save then fsync ({mb:.0f} MB state)", t_bare, t_ours))
        writer.close()
        t_bare, t_ours = median_pair(timed(lambda: torch.load(bare, weights_only=False)), timed(lambda: load_newest_valid(ours.parent)), repeats)
        rows.append((f"load ({mb:.0f} MB state)", t_bare, t_ours))

        # resume at 90% of the epoch: 281 of 313 batches done
        small = make_trainer(tmp / "r", 256, resume=False)
        small.iter = small.inner_iter = int(small.steps_per_epoch * 0.9)
        resume_ckpt = save_checkpoint(small.state_dict(), tmp / "r" / "checkpoints" / "iter.pt")
        fresh = lambda: time_to_first_step(lambda: make_trainer(tmp / "f", 256, resume=False))  # noqa: E731
        resumed = lambda: time_to_first_step(lambda: make_trainer(tmp / "r", 256, resume=str(resume_ckpt)))  # noqa: E731
        reread = lambda: time_to_first_step(lambda: make_trainer(tmp / "r", 256, str(resume_ckpt), RereadingLoaders))  # noqa: E731
        t_fresh, t_resume = median_pair(fresh, resumed, repeats)
        name = f"first step, resume at 90% of a {small.steps_per_epoch}-batch epoch"
        rows.append((f"{name} (skips batches)", t_fresh, t_resume))
        t_fresh, t_reread = median_pair(fresh, reread, repeats)
        rows.append((f"{name} (re-reads batches, for contrast)", t_fresh, t_reread))

    return rows


def table(rows) -> str:
    lines = ["| what | bare / fresh (ms) | launcher (ms) | ratio |", "|---|---|---|---|"]
    lines += [f"| {name} | {base * 1e3:.1f} | {ours * 1e3:.1f} | {ours / base:.2f}x |" for name, base, ours in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--hidden", type=int, default=2048, help="MLP width; 2048 gives a ~33 MB state with momentum")
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.ERROR)
    print(table(measure(args.repeats, args.hidden)))


if __name__ == "__main__":
    main()
