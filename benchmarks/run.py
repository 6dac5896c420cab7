"""The benchmark suite: every comparison side by side, tables printed and written into docs/benchmarks.md.

    python benchmarks/run.py            # full sizes; rewrites the results section of docs/benchmarks.md
    python benchmarks/run.py --quick    # tiny sizes, a smoke run (what the tests do); writes nothing

Each benchmark interleaves its contenders and reports medians, so the ratios hold on a shared,
noisy machine; single figures still move by a few percent between invocations.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import checkpoint  # noqa: E402
import ddp  # noqa: E402
import loop  # noqa: E402
import startup  # noqa: E402
import sweep  # noqa: E402

START, END = "<!-- benchmarks:start -->", "<!-- benchmarks:end -->"


def run(quick: bool) -> str:
    import logging

    logging.basicConfig(level=logging.ERROR)
    sections = []
    epochs, repeats = (1, 1) if quick else (10, 15)
    sections.append("**Loop overhead** (`benchmarks/loop.py`: MLP 64-128-10, 8192 x 64 synthetic, batch 64, "
                    "SGD + cosine schedule, 1 CPU thread)\n\n" + loop.table(loop.measure(epochs, repeats)))
    sections.append("**Start-up** (`benchmarks/startup.py`)\n\n" + startup.table(startup.measure(1 if quick else 5)))
    rows = checkpoint.measure(repeats=1 if quick else 9, hidden=64 if quick else 2048)
    sections.append("**Checkpoints and resume** (`benchmarks/checkpoint.py`)\n\n" + checkpoint.table(rows))
    ddp_rows = ddp.measure(steps=10 if quick else 200, repeats=1 if quick else 3, warmup=2 if quick else 20)
    sections.append("**DDP throughput** (`benchmarks/ddp.py`: MLP 256-1024-1024-10, global batch 256, gloo on the CPU)"
                    "\n\n" + ddp.table(ddp_rows))
    if quick:
        sweep.LENGTHS = {"short": 256}
    jobs = 2 if quick else 8
    sections.append(f"**Sweeps** (`benchmarks/sweep.py`: {jobs} jobs, 1 thread each)\n\n"
                    + sweep.table(*sweep.measure(jobs=jobs, repeats=1 if quick else 2, slurm=not quick)))
    stamp = (f"Measured {datetime.date.today()} with torch {torch.__version__}, Python {platform.python_version()}, "
             f"on {platform.machine()} with {os.cpu_count()} cores (the loop runs on 1 thread).")
    return "\n\n".join(sections + [stamp])


def write_tables(text: str, page: Path) -> None:
    content = page.read_text()
    if START not in content or END not in content:
        raise SystemExit(f"{page} has no {START} ... {END} section to rewrite")
    head, rest = content.split(START, 1)
    _, tail = rest.split(END, 1)
    page.write_text(f"{head}{START}\n{text}\n{END}{tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one repeat; writes nothing")
    parser.add_argument("--page", type=Path, default=HERE.parent / "docs" / "benchmarks.md",
                        help="the Markdown file whose results section is rewritten")
    args = parser.parse_args()
    text = run(args.quick)
    print(text)
    if not args.quick:
        write_tables(text, args.page)


if __name__ == "__main__":
    main()
