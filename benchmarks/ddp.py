"""DDP throughput: 2 processes on gloo against 1 process, on the same global batch.

    python benchmarks/ddp.py [--steps 200] [--repeats 3]

An MLP 256 -> 1024 -> 1024 -> 10 on synthetic data, global batch 256, SGD, ``hooks=minimal``-like
trainer (no writers), all on the CPU. Contenders, interleaved, each using the machine's cores:

* 1 process with as many threads as cores (what a user would run without DDP),
* 1 process with 1 thread (the per-process budget of the DDP run),
* ``trainer.devices=2``'s code path: 2 processes on gloo, 1 thread each, batch 128 per process;
* a plain PyTorch DDP loop in the same 2 processes (no DataLoader, no sampler): the floor.

Reported: samples per second over the timed steps (after a warm-up) and the ratio to the 1-process
run with all cores. On a 2-core machine, 2 processes can at best double the 1-thread figure; the
gap is the gradient all-reduce, which gloo does on the CPU cores that also compute.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

GLOBAL_BATCH = 256
OVERRIDES = [
    "trainer=iter", "hooks=none", "data=synthetic", "data.train.size=20480", "data.train.shape=[256]", "data.val=null",
    "model.in_features=256", "model.hidden=[1024,1024]", "trainer.device=cpu", "trainer.resume=false",
]


def _train(world_size: int, rank: int, steps: int, warmup: int, workdir: str) -> float:
    """Seconds for ``steps`` steps after ``warmup`` steps, in this process (rank ``rank`` of ``world_size``)."""
    import launcher
    from launcher.engine.hook import HookBase

    class Clock(HookBase):
        start = 0.0

        def after_step(self) -> None:
            if self.trainer.iter == warmup - 1:
                Clock.start = time.perf_counter()

    batch = GLOBAL_BATCH // world_size
    cfg = launcher.compose([*OVERRIDES, f"data.batch_size={batch}", f"trainer.max_iters={warmup + steps}"])
    trainer = launcher.build_trainer(cfg, workdir)
    trainer.register_hooks([Clock()])
    trainer.train()
    return time.perf_counter() - Clock.start


def _hand_written(world_size: int, rank: int, steps: int, warmup: int) -> float:
    """The same training as a plain PyTorch DDP loop: the floor for any trainer on this machine."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from launcher.models import MLP

    torch.manual_seed(0)
    model = DistributedDataParallel(MLP(in_features=256, hidden=[1024, 1024], num_classes=10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batch = GLOBAL_BATCH // world_size
    x, y = torch.randn(16384, 256), torch.randint(0, 10, (16384,))
    start = 0.0
    for i in range(warmup + steps):
        if i == warmup:
            start = time.perf_counter()
        j = (i * GLOBAL_BATCH + rank * batch) % (16384 - GLOBAL_BATCH)
        loss = model((x[j:j + batch], y[j:j + batch]))  # the model returns its loss in train mode
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return time.perf_counter() - start


def _worker(rank: int, world_size: int, port: int, steps: int, warmup: int, workdir: str, out: "object",
            hand: bool = False) -> None:
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        seconds = _hand_written(world_size, rank, steps, warmup) if hand else _train(world_size, rank, steps, warmup, f"{workdir}/rank{rank}")
        if rank == 0:
            out.put(seconds)
    finally:
        dist.destroy_process_group()


def _ddp(steps: int, warmup: int, workdir: str, hand: bool = False) -> float:
    import torch.multiprocessing as mp

    from launcher.engine.distributed import free_port

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, 2, port, steps, warmup, workdir, queue, hand))
             for port in [free_port()] for r in range(2)]
    for p in procs:
        p.start()
    seconds = queue.get(timeout=600)
    for p in procs:
        p.join()
    return seconds


def _single(threads: int, steps: int, warmup: int, workdir: str) -> float:
    import subprocess

    code = (f"import sys, torch; sys.path.insert(0, {str(Path(__file__).parent)!r}); torch.set_num_threads({threads}); "
            f"import ddp; print(ddp._train(1, 0, {steps}, {warmup}, {workdir!r}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def measure(steps: int = 200, repeats: int = 3, warmup: int = 20) -> List[Tuple[str, float]]:
    cores = os.cpu_count() or 1
    names = [f"1 process, {cores} threads, batch {GLOBAL_BATCH}", f"1 process, 1 thread, batch {GLOBAL_BATCH}",
             f"2 processes (gloo), 1 thread each, batch {GLOBAL_BATCH // 2} each",
             "hand-written DDP loop, same 2 processes (for contrast)"]
    times: Dict[str, List[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(repeats):  # interleaved
            times[names[0]].append(_single(cores, steps, warmup, f"{tmp}/a"))
            times[names[1]].append(_single(1, steps, warmup, f"{tmp}/b"))
            times[names[2]].append(_ddp(steps, warmup, f"{tmp}/c"))
            times[names[3]].append(_ddp(steps, warmup, f"{tmp}/d", hand=True))
    return [(n, steps * GLOBAL_BATCH / statistics.median(t)) for n, t in times.items()]


def table(rows: List[Tuple[str, float]]) -> str:
    base = rows[0][1]
    lines = ["| training | samples per second | vs 1 process, all cores |", "|---|---|---|"]
    lines += [f"| {name} | {rate:,.0f} | {rate / base:.2f}x |" for name, rate in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.ERROR)
    print(table(measure(args.steps, args.repeats)))


if __name__ == "__main__":
    main()
