"""Sweep dispatch: the same 8 runs with Hydra's sequential launcher and with the local parallel one,
and what the local and SLURM launchers add per job.

    python benchmarks/sweep.py [--jobs 8] [--repeats 2]

Each job trains the default MLP on synthetic data (`seed=0..7`, one CPU thread per job, as a cluster
allots `cpus_per_task=1`) for 4 epochs, on three data sizes: short (about 0.2 s of training), medium
(about 2 s) and long (about 17 s). Reported: the median wall time of the whole
`python -m launcher -m ...` command per launcher (interleaved repeats) and the ratio to `basic`.
`basic` runs the jobs one after another in one process that starts once; the local launcher runs
one process per job, each forked from its fork server, which imports torch and `torch._dynamo` once
(2.5-3 CPU-seconds here) while the sweep composes its jobs. For contrast, the short and medium sweeps
also run with `hydra.launcher.fork_server=false`, where every job process pays those imports itself.

Dispatch cost per job: a 1-job sweep through each launcher, its wall time minus the job's own run
time from `run.json`, minus the same for `basic`: what a process per job (local: process start, torch
import, submitit's pickles and polling) or submission (SLURM: sbatch, scheduling, srun, polling on the
local cluster) adds to a job. The SLURM figure needs the local cluster
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

from startup import cached_bytecode  # benchmarks/, this file's dir

ROOT = Path(__file__).resolve().parent.parent
JOB = ["data=synthetic", "trainer.max_epochs=4", "hooks.tensorboard.period=1000"]
FRESH = "local, fork_server=false"
LENGTHS = {"short": 2048, "medium": 32768, "long": 262144}  # train samples per job: ~0.2 s, ~2 s, ~17 s of training here


def _sweep(launcher: str, jobs: int, cwd: Path, env: Dict[str, str], extra: List[str] = (), samples: int = 2048) -> float:
    seeds = ",".join(str(i) for i in range(jobs))
    cmd = [sys.executable, "-m", "launcher", "-m", f"hydra/launcher={launcher}", f"seed={seeds}", *JOB,
           f"data.train.size={samples}", *extra]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{launcher} sweep failed:\n{proc.stderr[-2000:]}")
    return took


def _job_seconds(path: Path) -> float:
    """The run time a run.json records: ``path`` is the file, or a folder holding exactly one run."""
    path = path if path.is_file() else next(path.rglob("run.json"))
    record = json.loads(path.read_text())
    start = datetime.datetime.fromisoformat(record["start_time"])
    end = datetime.datetime.fromisoformat(record["end_time"])
    return (end - start).total_seconds()


def _env() -> Dict[str, str]:
    env = {**cached_bytecode(os.environ), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("HYDRA_FULL_ERROR", None)
    return env


def measure(jobs: int = 8, repeats: int = 2, slurm: bool = True) -> Tuple[List[Tuple[str, float]], Dict[str, Optional[float]], float]:
    env = _env()
    rows = []
    speedup = parallel_speedup(env, repeats=max(repeats, 3))
    with tempfile.TemporaryDirectory() as tmp:
        for length, samples in LENGTHS.items():
            walls: Dict[str, List[float]] = {"basic": [], "local": []}
            if length != "long":
                walls[FRESH] = []
            trained: List[float] = []
            for i in range(repeats):
                for n, name in enumerate(walls):  # interleaved
                    cwd = Path(tmp) / f"{length}_{n}_{i}"
                    cwd.mkdir()
                    launcher, extra = ("local", ["hydra.launcher.fork_server=false"]) if name == FRESH else (name, [])
                    walls[name].append(_sweep(launcher, jobs, cwd, env, extra, samples=samples))
                    if name == "basic":
                        trained += [_job_seconds(d) for d in (cwd / "outputs").rglob("run.json")]
            label = f"{jobs} {length} jobs (~{statistics.median(trained):.1f} s of training each)"
            rows += [(f"{label}, hydra/launcher={name}", statistics.median(w)) for name, w in walls.items()]
        overhead = _dispatch_cost(Path(tmp), env, repeats, slurm)
    return rows, overhead, speedup


BURN = ("import time, torch\ntorch.set_num_threads(1)\na = torch.randn(256, 256)\nt = time.perf_counter()\n"
        "for _ in range(2000):\n    a @ a\nprint(time.perf_counter() - t)")


def parallel_speedup(env: Dict[str, str], repeats: int = 3) -> float:
    """What running one single-threaded process per core gains over one process, on this machine.

    The same CPU-bound loop (1-thread matmuls) alone, then on every core at once; the speedup is
    ``cores * alone / together``. A shared VM's cores may be hyperthreads or contended, and then
    no launcher can run parallel jobs faster than ``1 / speedup`` of sequential ones.
    """
    cores = os.cpu_count() or 1

    def run(n: int) -> float:
        procs = [subprocess.Popen([sys.executable, "-c", BURN], env=env, stdout=subprocess.PIPE, text=True) for _ in range(n)]
        return statistics.median(float(p.communicate()[0]) for p in procs)

    ratios = []
    for _ in range(repeats):
        alone, together = run(1), run(cores)
        ratios.append(cores * alone / together)
    return statistics.median(ratios)


def _dispatch_cost(tmp: Path, env: Dict[str, str], repeats: int, slurm: bool) -> Dict[str, Optional[float]]:
    """Per launcher: 1-job sweep wall time minus the job's run time, minus the same for ``basic``."""
    from launcher import localslurm
    names = ["basic", "local"]
    if slurm and not localslurm.missing_binaries() and localslurm.status() != "down":
        env = {**env, **localslurm.env()}
        names.append("slurm")
    added: Dict[str, List[float]] = {name: [] for name in names}
    for i in range(repeats):
        for name in names:
            cwd = tmp / f"one_{name}{i}"
            cwd.mkdir()
            extra = ["hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1"] if name == "slurm" else []
            wall = _sweep(name, 1, cwd, env, extra)
            added[name].append(wall - _job_seconds(cwd / "outputs"))
    base = statistics.median(added["basic"])
    return {name: statistics.median(added[name]) - base if name in added else None for name in ("local", "slurm")}


def table(rows: List[Tuple[str, float]], dispatch: Dict[str, Optional[float]], speedup: float) -> str:
    lines = ["| sweep | wall seconds | vs basic |", "|---|---|---|"]
    base = rows[0][1]
    for name, wall in rows:
        if name.endswith("hydra/launcher=basic"):  # each size's rows start with basic's
            base = wall
        lines.append(f"| {name} | {wall:.1f} | {wall / base:.2f}x |")
    local, slurm = dispatch.get("local"), dispatch.get("slurm")
    slurm_text = (f"SLURM launcher on the local cluster {slurm:.1f} s" if slurm is not None
                  else "SLURM launcher not measured (no local cluster: `python -m launcher.localslurm start`)")
    lines.append(f"\nDispatch cost per job (a 1-job sweep's wall time minus the job's run time, against the same for "
                 f"`basic`): local launcher {local:.1f} s, {slurm_text}.")
    lines.append(f"\nThis machine's parallel capacity: {os.cpu_count()} single-threaded processes side by side do "
                 f"{speedup:.2f}x the work of one (CPU-bound matmuls, median of 3; on a shared VM it moves between "
                 f"runs), so a parallel launcher cannot go much below {1 / speedup:.2f}x of `basic` here.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    print(table(*measure(args.jobs, args.repeats)))


if __name__ == "__main__":
    main()
