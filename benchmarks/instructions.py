"""Per-step cost in instructions (valgrind's callgrind), immune to a noisy machine.

    python benchmarks/instructions.py        # needs valgrind; about 10 minutes on 2 cores

Wall-clock ratios on a shared machine move by a few percent between repeats, more than the
trainer's own cost. Instruction counts do not: each contender of ``benchmarks/loop.py``'s tiny-step
variant runs under callgrind for 1 and for 3 epochs, and the difference divided by the extra steps
is its per-step count, with start-up and imports cancelled out. Instructions are not time (cache
misses, device waits), but Python-level overhead shows in them one for one.
"""
from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict

HERE = Path(__file__).resolve().parent
CONTENDERS = ["hand", "none", "minimal", "default"]
STEPS_PER_EPOCH = 256


def one(contender: str, epochs: int) -> None:
    """Run one contender for ``epochs`` epochs (called in the subprocess under valgrind)."""
    import logging

    logging.basicConfig(level=logging.ERROR)
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    import torch

    import loop

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        fn = loop.tiny_hand_written(epochs) if contender == "hand" else loop.tiny_trainer(contender, epochs, Path(tmp))
        fn()


def instructions(contender: str, epochs: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__, "--one", contender, str(epochs)],
            capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
        match = re.search(r"Collected\s*:\s*(\d+)", proc.stderr)
        if proc.returncode != 0 or not match:
            raise RuntimeError(f"callgrind run of {contender} failed:\n{proc.stderr[-2000:]}")
        return int(match.group(1))


def measure(jobs: int = 0) -> Dict[str, float]:
    """Instructions per step of each contender; ``jobs`` callgrind runs at a time (0: one per core)."""
    from concurrent.futures import ThreadPoolExecutor

    runs = [(contender, epochs) for contender in CONTENDERS for epochs in (1, 3)]
    with ThreadPoolExecutor(max_workers=jobs or os.cpu_count() or 1) as pool:  # counts do not depend on load
        counts = dict(zip(runs, pool.map(lambda run: instructions(*run), runs)))
    return {c: (counts[c, 3] - counts[c, 1]) / (2 * STEPS_PER_EPOCH) for c in CONTENDERS}


def table(per_step: Dict[str, float]) -> str:
    base = per_step["hand"]
    names = {"hand": "hand-written loop", "none": "trainer, hooks=none", "minimal": "trainer, hooks=minimal",
             "default": "trainer, hooks=default"}
    lines = ["| tiny step | instructions per step | ratio | added per step |", "|---|---|---|---|"]
    lines += [f"| {names[k]} | {v:,.0f} | {v / base:.3f}x | {v - base:+,.0f} |" for k, v in per_step.items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--one", nargs=2, metavar=("CONTENDER", "EPOCHS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        one(args.one[0], int(args.one[1]))
        return
    print(table(measure()))


if __name__ == "__main__":
    main()
