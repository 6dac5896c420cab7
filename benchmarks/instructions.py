"""Per-step cost in instructions (valgrind's callgrind), immune to a noisy machine.

    python benchmarks/instructions.py [--loops mlp,tiny] [--hash-seeds 3]   # needs valgrind; ~75 min on 2 cores

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
         "none": "trainer, hooks=none", "minimal": "trainer, hooks=minimal", "default": "trainer, hooks=default"}


def one(kind: str, contender: str, epochs: int) -> None:
    """Run one contender for ``epochs`` epochs (called in the subprocess under valgrind)."""
    import logging

    logging.basicConfig(level=logging.ERROR)
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    import torch

    import loop

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        if kind == "tiny":
            fn = loop.tiny_hand_written(epochs) if contender == "hand" else loop.tiny_trainer(contender, epochs, Path(tmp))
        elif contender.startswith("hand"):
            fn = loop.hand_written(epochs, Path(tmp) / "hand" if contender == "hand+save" else None)
        else:
            fn = loop.with_trainer(contender, epochs, Path(tmp))
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loops", default="mlp,tiny", help="which loops to count: mlp, tiny or both (default)")
    parser.add_argument("--hash-seeds", type=int, default=3, help="how many PYTHONHASHSEED values (0, 1, ...) to run each under")
    parser.add_argument("--one", nargs=3, metavar=("LOOP", "CONTENDER", "EPOCHS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(args.one[0], args.one[1], int(args.one[2]))
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
