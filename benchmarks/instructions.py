"""Per-step cost in instructions (valgrind's callgrind), immune to a noisy machine.

    python benchmarks/instructions.py [--loops mlp,tiny] [--hash-seeds 3]   # needs valgrind; ~75 min on 2 cores
    python benchmarks/instructions.py --parts   # where the trainer's instructions go, part by part; ~5 min

Wall-clock ratios on a shared machine move by a few percent between repeats, more than the
trainer's own cost. Instruction counts do not: each contender of ``benchmarks/loop.py`` (the MLP
loop the issue names, and the tiny step) runs under callgrind for 1 and for 3 epochs, and the
difference divided by the extra steps is its per-step count, with start-up and imports cancelled
out. Instructions are not time (cache misses, fsyncs, device waits), but Python-level overhead
shows in them one for one.

One thing still moves the counts: Python's string hashes are salted per process, and the salt
decides how long dictionary lookups probe (on 2026-12-03 the hand-written MLP loop counted
3.05M instructions a step in one run and 3.11M in the next, 41k of the gap in one dictionary
lookup function). So every contender runs under the same few fixed ``PYTHONHASHSEED`` values,
each ratio is taken against the hand-written loop under the same seed, and the table gives the
medians over the seeds.

``--parts`` counts pieces of the MLP trainer one by one (a checkpoint save and what it is made of,
a put into the storage, the LR hook, the model's forward, one whole step), each against what a
hand-written loop does in its place.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, Sequence, Tuple

HERE = Path(__file__).resolve().parent
# (loop, contender): the MLP loop (128 steps an epoch) and the tiny step (256 steps an epoch).
CONTENDERS = [("mlp", c) for c in ("hand", "hand+save", "none", "minimal", "default")] + \
             [("tiny", c) for c in ("hand", "none", "minimal", "default")]
STEPS_PER_EPOCH = {"mlp": 128, "tiny": 256}
NAMES = {"hand": "hand-written loop", "hand+save": "hand-written loop, torch.save each epoch",
         "none": "trainer, hooks=none", "minimal": "trainer, hooks=minimal, a checkpoint every epoch",
         "default": "trainer, hooks=default, a checkpoint every epoch"}


def one(kind: str, contender: str, epochs: int) -> None:
    """Run one contender for ``epochs`` epochs (called in the subprocess under valgrind)."""
    import logging

    logging.basicConfig(level=logging.ERROR)
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    import torch

    import loop

    torch.set_num_threads(1)
    # a checkpoint every epoch, whatever valgrind's slowdown does to the presets' 10 s between periodic ones
    every_epoch = [loop.EVERY_EPOCH] if contender in ("minimal", "default") else []
    with tempfile.TemporaryDirectory() as tmp:
        if kind == "tiny":
            fn = loop.tiny_hand_written(epochs) if contender == "hand" else \
                loop.tiny_trainer(contender, epochs, Path(tmp), *every_epoch)
        elif contender.startswith("hand"):
            fn = loop.hand_written(epochs, Path(tmp) / "hand" if contender == "hand+save" else None)
        else:
            fn = loop.with_trainer(contender, epochs, Path(tmp), *every_epoch)
        fn()


def instructions(kind: str, contender: str, epochs: int, hash_seed: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__, "--one", kind, contender, str(epochs)],
            capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": str(hash_seed)},
        )
        match = re.search(r"Collected\s*:\s*(\d+)", proc.stderr)
        if proc.returncode != 0 or not match:
            raise RuntimeError(f"callgrind run of {kind} {contender} failed:\n{proc.stderr[-2000:]}")
        return int(match.group(1))


def measure(jobs: int = 0, kinds: Sequence[str] = ("mlp", "tiny"), hash_seeds: Sequence[int] = (0, 1, 2)) -> Dict[Tuple[str, str], Tuple[float, float]]:
    """(instructions per step, ratio to the hand-written loop) of each (loop, contender): medians over ``hash_seeds``.

    ``jobs`` callgrind runs at a time (0: one per core); the counts do not depend on the load.
    """
    from concurrent.futures import ThreadPoolExecutor

    chosen = [c for c in CONTENDERS if c[0] in kinds]
    runs = [(kind, contender, epochs, seed) for kind, contender in chosen for seed in hash_seeds for epochs in (1, 3)]
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:
        counts = dict(zip(runs, pool.map(lambda run: instructions(*run), runs)))
    per_step = {(k, c, s): (counts[k, c, 3, s] - counts[k, c, 1, s]) / (2 * STEPS_PER_EPOCH[k])
                for k, c in chosen for s in hash_seeds}
    return {(k, c): (statistics.median(per_step[k, c, s] for s in hash_seeds),
                     statistics.median(per_step[k, c, s] / per_step[k, "hand", s] for s in hash_seeds))
            for k, c in chosen}


def table(results: Dict[Tuple[str, str], Tuple[float, float]]) -> str:
    lines = ["| loop | instructions per step | ratio | added per step |", "|---|---|---|---|"]
    for (kind, contender), (count, ratio) in results.items():
        base = results[kind, "hand"][0]
        name = NAMES[contender] if kind == "mlp" else f"tiny step: {NAMES[contender]}"
        lines.append(f"| {name} | {count:,.0f} | {ratio:.3f}x | {count - base:+,.0f} |")
    return "\n".join(lines)


def parts_child(repeats: int) -> None:
    """Under callgrind: each part of the trainer's cost ``repeats`` times, each time inside ``operator.call``.

    Callgrind collects only inside ``operator.call`` (nothing else here calls it) and writes one
    profile as each call returns, so the parent reads every part's count from its own files.
    """
    import logging
    import operator

    logging.basicConfig(level=logging.ERROR)
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader

    import launcher
    import loop
    from launcher.engine.checkpoint import serialize
    from launcher.data import synthetic
    from launcher.engine.trainer import get_rng_state

    torch.set_num_threads(1)

    def endless(loader, set_epoch=lambda: None):
        while True:
            set_epoch()
            yield from loader

    with tempfile.TemporaryDirectory() as tmp:
        cfg = launcher.compose([*loop.OVERRIDES, "hooks=minimal", "trainer.max_epochs=2"])
        trainer = launcher.build_trainer(cfg, Path(tmp) / "run")
        trainer.train()  # two epochs: histories, optimizer state and schedule as a run has them
        hooks = {h.name: h for h in trainer.hooks}
        state = trainer.state_dict()
        x, y = batch = next(iter(trainer.train_loader))
        net, opt = trainer.model.net, trainer.optimizer
        trainer._data_iter = endless(trainer.train_loader, lambda: trainer.train_loader.set_epoch(0))
        hand_batches = endless(DataLoader(synthetic("train", size=10240, shape=[64], val_fraction=0.2), batch_size=64,
                                          shuffle=True, generator=torch.Generator().manual_seed(0)))

        def hand_step():
            x, y = next(hand_batches)
            loss = F.cross_entropy(net(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()

        parts = {
            "save": lambda: hooks["checkpointer"]._save_periodic("epoch_9999.pt"),
            "state_dict": trainer.state_dict,
            "rng": get_rng_state,
            "serialize": lambda: serialize(state),
            "serialize_model_optimizer": lambda: serialize({"model": state["model"], "optimizer": state["optimizer"]}),
            "put_scalar": lambda: trainer.storage.put_scalar("x", 0.5),
            "lr_after_step": hooks["lr_scheduler"].after_step,
            "scheduler_step": hooks["lr_scheduler"].scheduler.step,
            "model": lambda: trainer.train_model(batch),
            "hand_model": lambda: F.cross_entropy(net(x), y),
            "run_step": trainer.run_step,
            "hand_step": hand_step,
        }
        for name, fn in parts.items():
            fn()  # warm: first-call paths stay out of the count
            for _ in range(repeats):
                operator.call(fn)
            print(name, flush=True)
        hooks["checkpointer"]._writer.close()


PART_NAMES = {
    "save": "one periodic checkpoint, on the training thread (per save)",
    "state_dict": "· of it: trainer.state_dict()",
    "rng": "· · of that: the Python, NumPy and torch RNG states",
    "serialize": "· of it: torch.save of that state into memory",
    "serialize_model_optimizer": "· · of that: the model and optimizer alone, as a hand-written save has them",
    "put_scalar": "storage.put_scalar of a float (per put)",
    "lr_after_step": "LR hook after_step: records lr, steps the schedule (per step)",
    "scheduler_step": "· of it: scheduler.step(), which a hand-written loop pays too",
    "model": "model(batch): the model contract's forward, loss included (per step)",
    "hand_model": "· hand-written: cross_entropy(net(x), y)",
    "run_step": "trainer.run_step(): fetch, forward, loss read and check, backward, SGD step (per step)",
    "hand_step": "· hand-written: the same with a DataLoader, no loss read",
}


def parts(repeats: int = 10, hash_seed: int = 0) -> Dict[str, float]:
    """Instructions per call of each part (``PART_NAMES``), from one callgrind run of :func:`parts_child`."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", "--collect-atstart=no", "--toggle-collect=_operator_call",
             "--dump-after=_operator_call", f"--callgrind-out-file={out}",
             sys.executable, __file__, "--parts-child", str(repeats)],
            capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": str(hash_seed)},
        )
        names = proc.stdout.split()
        dumps = sorted(Path(tmp).glob("cg.out.*"), key=lambda p: int(p.suffix[1:]))
        if proc.returncode != 0 or names != list(PART_NAMES) or len(dumps) != repeats * len(names):
            raise RuntimeError(f"callgrind run of the parts failed ({len(dumps)} profiles for {names}):\n{proc.stderr[-2000:]}")
        totals = [int(re.search(r"^totals:\s*(\d+)", d.read_text(), re.M).group(1)) for d in dumps]
    return {name: sum(totals[i * repeats:(i + 1) * repeats]) / repeats for i, name in enumerate(names)}


def parts_table(counts: Dict[str, float]) -> str:
    lines = ["| part | instructions per call |", "|---|---|"]
    lines += [f"| {PART_NAMES[name]} | {count:,.0f} |" for name, count in counts.items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loops", default="mlp,tiny", help="which loops to count: mlp, tiny or both (default)")
    parser.add_argument("--hash-seeds", type=int, default=3, help="how many PYTHONHASHSEED values (0, 1, ...) to run each under")
    parser.add_argument("--parts", action="store_true", help="instead: what each part of the trainer's cost counts (~5 min)")
    parser.add_argument("--one", nargs=3, metavar=("LOOP", "CONTENDER", "EPOCHS"), help=argparse.SUPPRESS)
    parser.add_argument("--parts-child", type=int, metavar="REPEATS", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(args.one[0], args.one[1], int(args.one[2]))
        return
    if args.parts_child:
        parts_child(args.parts_child)
        return
    if args.parts:
        print(parts_table(parts()))
        return
    kinds = [k.strip() for k in args.loops.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(STEPS_PER_EPOCH))
    if unknown or not kinds:
        parser.error(f"--loops: {args.loops!r} is not a list of {' and '.join(STEPS_PER_EPOCH)}")
    if args.hash_seeds < 1:
        parser.error(f"--hash-seeds: {args.hash_seeds} is not a number of seeds (1 or more)")
    print(table(measure(kinds=kinds, hash_seeds=range(args.hash_seeds))))


if __name__ == "__main__":
    main()
