"""Start-up: wall time from ``python -m launcher`` to its first finished training step.

    python benchmarks/startup.py [--repeats 5]

Against ``python -c "import torch"`` (the issue's baseline), against ``import torch, torch._dynamo``
(what building any ``torch.optim`` optimizer imports with torch 2.13, and every ``SGD.step`` or
``Adam.step`` too), and against the floor of any PyTorch training script: a hand-written one that
imports torch, builds the same MLP and SGD optimizer and takes one step. The launcher runs the default task
(digits, default hooks) with a marker hook that records when the first step ends.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Dict, List

HERE = Path(__file__).resolve().parent
IMPORT_TORCH = 'python -c "import torch"'
HAND = "hand-written script: import, model, optimizer, one step"
FLOOR = (
    "import torch, torch.nn.functional as F\n"
    "torch.manual_seed(0)\n"
    "m = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))\n"
    "o = torch.optim.SGD(m.parameters(), lr=0.1, momentum=0.9)\n"
    "x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))\n"
    "loss = F.cross_entropy(m(x), y); o.zero_grad(); loss.backward(); o.step()\n"
)


def cached_bytecode(env: Dict[str, str]) -> Dict[str, str]:
    """``env`` with Python's default of caching compiled modules in ``__pycache__``, as on a user's machine: these
    VMs set ``PYTHONDONTWRITEBYTECODE``, so each process compiled this package's modules afresh (40 ms of a
    start here, 10 ms of each local sweep job's controller). The first, warm-up, run writes the cache."""
    return {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}


def timed_process(cmd: List[str], cwd: Path, env: dict) -> float:
    start = time.time()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.time() - start


def launcher_to_first_step(cwd: Path, env: dict) -> Callable[[], float]:
    mark = cwd / "first_step.txt"
    counter = iter(range(10**9))

    def run() -> float:
        mark.unlink(missing_ok=True)
        start = time.time()
        subprocess.run(
            [sys.executable, "-m", "launcher", "trainer=epoch", "hooks=default", "trainer.max_epochs=1",
             f"hydra.run.dir={cwd / f'run{next(counter)}'}",
             "+hooks.first_step._target_=first_step.FirstStepMark", f"+hooks.first_step.path={mark}"],
            cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        return float(mark.read_text()) - start

    return run


def measure(repeats: int) -> Dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        env = {**cached_bytecode(os.environ),
               "PYTHONPATH": os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
        contenders = {
            IMPORT_TORCH: lambda: timed_process([sys.executable, "-c", "import torch"], cwd, env),
            'python -c "import torch, torch._dynamo"': lambda: timed_process([sys.executable, "-c", "import torch, torch._dynamo"], cwd, env),
            HAND: lambda: timed_process([sys.executable, "-c", FLOOR], cwd, env),
            "python -m launcher (default task) to its first step": launcher_to_first_step(cwd, env),
        }
        for fn in contenders.values():  # warm the file cache
            fn()
        times: Dict[str, List[float]] = {name: [] for name in contenders}
        for _ in range(repeats):
            for name, fn in contenders.items():
                times[name].append(fn())
    return {name: statistics.median(ts) for name, ts in times.items()}


def table(results: Dict[str, float]) -> str:
    base, floor = results[IMPORT_TORCH], results[HAND]
    lines = ["| start-up | seconds | vs `import torch` | vs hand-written script |", "|---|---|---|---|"]
    lines += [f"| {n} | {t:.2f} | {t / base:.2f}x | {t / floor:.2f}x |" for n, t in results.items()]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    print(table(measure(parser.parse_args().repeats)))


if __name__ == "__main__":
    main()
