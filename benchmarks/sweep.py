"""Sweep dispatch: the same 8 short runs with Hydra's sequential launcher and with the local parallel one,
and what the SLURM launcher adds per job on the local cluster.

    python benchmarks/sweep.py [--jobs 8] [--repeats 3]

Each job trains the default MLP on synthetic data (`seed=0..7`, one CPU thread per job, as a cluster
allots `cpus_per_task=1`), for 4 epochs (short: ~1.5 s) or 24 (longer: ~8 s). Reported: the median
wall time of the whole `python -m launcher -m ...` command per launcher (interleaved repeats) and the
ratio to `basic`. `basic` runs the jobs one after another in one process that starts once; the local
launcher starts one process per job, and each pays Python, torch and the first optimizer step's
`torch._dynamo` import (about 2.5 CPU-seconds), which on 2 cores outweighs short jobs.

SLURM dispatch overhead: a 1-job sweep through `hydra/launcher=slurm` against the same job through
`hydra/launcher=local`, each minus the job's own run time from its `run.json`: what submission,
scheduling, `srun` and submitit's polling add to a job. Needs the local cluster
(`python -m launcher.localslurm start`); skipped, with a note, without it.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

ROOT = Path(__file__).resolve().parent.parent
JOB = ["data=synthetic", "data.train.size=4096", "hooks.tensorboard.period=1000"]
LENGTHS = {"short": 4, "longer": 24}  # epochs per job: about 1.5 s and 8 s of training on this kind of machine


def _sweep(launcher: str, jobs: int, cwd: Path, env: Dict[str, str], extra: List[str] = (), epochs: int = 4) -> float:
    seeds = ",".join(str(i) for i in range(jobs))
    cmd = [sys.executable, "-m", "launcher", "-m", f"hydra/launcher={launcher}", f"seed={seeds}", *JOB,
           f"trainer.max_epochs={epochs}", *extra]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{launcher} sweep failed:\n{proc.stderr[-2000:]}")
    return took


def _job_seconds(sweep_root: Path) -> float:
    """The run time its run.json records, of the only run under ``sweep_root``."""
    record = json.loads(next(sweep_root.rglob("run.json")).read_text())
    start = datetime.datetime.fromisoformat(record["start_time"])
    end = datetime.datetime.fromisoformat(record["end_time"])
    return (end - start).total_seconds()


def _env() -> Dict[str, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("HYDRA_FULL_ERROR", None)
    return env


def measure(jobs: int = 8, repeats: int = 2, slurm: bool = True) -> Tuple[List[Tuple[str, float]], Optional[Tuple[float, float]]]:
    env = _env()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for length, epochs in LENGTHS.items():
            walls: Dict[str, List[float]] = {"basic": [], "local": []}
            for i in range(repeats):
                for name in walls:  # interleaved
                    cwd = Path(tmp) / f"{length}_{name}{i}"
                    cwd.mkdir()
                    walls[name].append(_sweep(name, jobs, cwd, env, epochs=epochs))
            rows += [(f"{jobs} {length} jobs ({epochs} epochs each), hydra/launcher={name}", statistics.median(w))
                     for name, w in walls.items()]
        overhead = _slurm_overhead(Path(tmp), env, repeats) if slurm else None
    return rows, overhead


def _slurm_overhead(tmp: Path, env: Dict[str, str], repeats: int) -> Optional[Tuple[float, float]]:
    from launcher import localslurm

    if localslurm.missing_binaries() or not localslurm.status():
        return None
    env = {**env, **localslurm.env()}
    added: Dict[str, List[float]] = {"local": [], "slurm": []}
    for i in range(repeats):
        for name in added:
            cwd = tmp / f"one_{name}{i}"
            cwd.mkdir()
            extra = ["hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1"] if name == "slurm" else []
            wall = _sweep(name, 1, cwd, env, extra)
            added[name].append(wall - _job_seconds(cwd / "outputs"))
    return statistics.median(added["local"]), statistics.median(added["slurm"])


def table(rows: List[Tuple[str, float]], overhead: Optional[Tuple[float, float]]) -> str:
    lines = ["| sweep | wall seconds | vs basic |", "|---|---|---|"]
    for i, (name, wall) in enumerate(rows):
        base = rows[i - i % 2][1]  # rows come in pairs: basic, then local
        lines.append(f"| {name} | {wall:.1f} | {wall / base:.2f}x |")
    if overhead is None:
        lines.append("\nSLURM dispatch overhead: not measured (no local cluster: `python -m launcher.localslurm start`).")
    else:
        local, slurm = overhead
        lines.append(f"\nDispatch overhead per job (command wall time minus the job's own run time, 1-job sweep): "
                     f"local launcher {local:.1f} s, SLURM launcher on the local cluster {slurm:.1f} s.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(table(*measure(args.jobs, args.repeats)))


if __name__ == "__main__":
    main()
