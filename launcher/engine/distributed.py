"""torch.distributed for the launcher: one code path for torchrun, ``trainer.devices=N`` and SLURM tasks.

They differ only in how each process learns its rank: torchrun's variables; :func:`spawn`'s workers, which meet
through a file (:data:`STORE_ENV`) rather than a port; or submitit's ``JobEnvironment`` (master: the job's first
node). Then :func:`init` sets up the process group (gloo on the CPU, NCCL for CUDA tensors).
"""
from __future__ import annotations

import contextlib
import datetime
import logging
import os
import shutil
import signal
import socket
import sys
import tempfile
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from launcher.engine.signals import SIGNALS, SignalLatch, suspend_along

if TYPE_CHECKING:
    import torch

logger = logging.getLogger("launcher")

DEFAULT_TIMEOUT_S = 300  # process-group set-up and any one collective; LAUNCHER_DIST_TIMEOUT_S changes it
STORE_ENV = "LAUNCHER_DIST_STORE"  # in a worker of trainer.devices=N: the file its ranks meet through (spawn)


class DistributedError(RuntimeError):
    """The process group could not be set up (names the master address and port)."""


class WorkerFailed(RuntimeError):
    """A worker of ``trainer.devices=N`` failed; the message names its rank, its error and its log."""


@dataclass(frozen=True)
class DistEnv:
    rank: int
    local_rank: int
    world_size: int
    master_addr: str
    master_port: int
    source: str  # torchrun (or any env:// launcher), slurm, spawn
    store: str = ""  # spawn: the rendezvous file the ranks meet through (else the master's address and port)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def is_main_process() -> bool:
    """Whether this process is rank 0 of its distributed run, or runs alone."""
    env = from_environment()
    return env is None or env.is_main


def from_environment() -> Optional[DistEnv]:
    """The distributed set-up this process was started in, or None for a single process."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env and int(env["WORLD_SIZE"]) > 1:
        source = env.get("LAUNCHER_DIST_SOURCE", "torchrun")
        return DistEnv(
            rank=int(env["RANK"]),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            world_size=int(env["WORLD_SIZE"]),
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(env.get("MASTER_PORT", 29500)),
            source=source,
            store=env.get(STORE_ENV, "") if source == "spawn" else "",
        )
    if int(env.get("SLURM_NTASKS", "1") or 1) > 1 and "SLURM_PROCID" in env and "SLURM_JOB_ID" in env:
        return _slurm_env()
    return None


def _slurm_env() -> DistEnv:
    """Rank and master of a SLURM task, from submitit's JobEnvironment (the SLURM variables underneath)."""
    import submitit

    job = submitit.JobEnvironment()
    hostnames = job.hostnames
    # one port per job; a requeued job keeps its id and port
    job_id = os.environ["SLURM_JOB_ID"]
    port = int(os.environ.get("MASTER_PORT") or 20000 + int(job_id) % 20000)
    return DistEnv(
        rank=job.global_rank,
        local_rank=job.local_rank,
        world_size=job.num_tasks,
        master_addr=os.environ.get("MASTER_ADDR") or hostnames[0],
        master_port=port,
        source="slurm",
    )


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


CPUS_ENV = "LAUNCHER_CPUS_PER_TASK"  # a local sweep's job: its share of the machine (hydra.launcher.cpus_per_task)


def threads_for(env: Optional[DistEnv]) -> Optional[int]:
    """The intra-op threads this process should use (``OMP_NUM_THREADS``, else :func:`cores_share`), or None for
    torch's own choice. The same count wherever a run starts keeps its results the same."""
    omp = omp_threads()
    return omp if omp is not None else cores_share(env)


def cores_share(env: Optional[DistEnv]) -> Optional[int]:
    """This process's share of the CPUs its job was given (SLURM's or the local launcher's), split among the job's
    local ranks; else of the usable cores for one of several ranks; None for a lone process outside any job."""
    cpus = _whole(os.environ.get(CPUS_ENV))
    if cpus is None and "SLURM_JOB_ID" in os.environ:
        cpus = _whole(os.environ.get("SLURM_CPUS_PER_TASK"))
    local_ranks = 1
    if env is not None and env.source != "slurm":  # SLURM gives each of its tasks their CPUs; the others share the job's
        local_ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", 0) or 0) or env.world_size)
    if cpus is not None:
        return max(1, cpus // local_ranks)
    return None if env is None else max(1, usable_cores() // local_ranks)


def omp_threads() -> Optional[int]:
    """The thread count ``OMP_NUM_THREADS`` gives (its first level's), or None where it gives none (warned if set)."""
    value = os.environ.get("OMP_NUM_THREADS")
    if value is None or not value.strip():
        return None
    threads = _whole(value.split(",")[0])
    if threads is None:
        logger.warning("OMP_NUM_THREADS=%r is not a number of threads (a whole number >= 1); ignored", value)
    return threads


def _whole(value: Optional[str]) -> Optional[int]:
    return int(value) if value is not None and value.strip().isdigit() and int(value) > 0 else None


def share_cores(env: Optional[DistEnv]) -> None:
    """Set torch's intra-op threads to :func:`threads_for` ``env`` (None: a single process)."""
    threads, share = threads_for(env), cores_share(env)
    given = CPUS_ENV in os.environ or "SLURM_JOB_ID" in os.environ  # CPUs a job was given (torchrun sets OMP_NUM_THREADS=1)
    if given and threads is not None and share is not None and threads != share:  # a login shell's OMP_NUM_THREADS=1
        logger.warning("OMP_NUM_THREADS=%s gives this process %d torch thread(s), where its share of the job's CPUs is "
                       "%d (unset OMP_NUM_THREADS for that)", os.environ.get("OMP_NUM_THREADS"), threads, share)
    if threads is not None:
        import torch

        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def timeout_s() -> float:
    value = os.environ.get("LAUNCHER_DIST_TIMEOUT_S", str(DEFAULT_TIMEOUT_S))
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not 0 < seconds < float("inf"):
        raise DistributedError(f"LAUNCHER_DIST_TIMEOUT_S={value!r} is not a number of seconds above 0 (the wait for "
                               f"the process group and each collective; unset, {DEFAULT_TIMEOUT_S})")
    return seconds


def backend_for(device: str) -> str:
    """gloo for CPU tensors; where CUDA is used, NCCL for CUDA tensors and gloo for the CPU ones."""
    import torch

    wants_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    return "cpu:gloo,cuda:nccl" if wants_cuda and torch.distributed.is_nccl_available() else "gloo"


def init(env: DistEnv, device: str = "auto") -> bool:
    """Join the process group of ``env``; returns whether this call created it."""
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        if dist.get_world_size() != env.world_size or dist.get_rank() != env.rank:
            raise DistributedError(
                f"a process group of world size {dist.get_world_size()} (rank {dist.get_rank()}) exists already, "
                f"but the environment says world size {env.world_size} (rank {env.rank})"
            )
        return False
    if env.source != "torchrun":  # torchrun sets these itself; the others learned them from us
        os.environ.update(RANK=str(env.rank), WORLD_SIZE=str(env.world_size), LOCAL_RANK=str(env.local_rank))
        if not env.store:
            os.environ.update(MASTER_ADDR=env.master_addr, MASTER_PORT=str(env.master_port))
    backend = backend_for(device)
    if "nccl" in backend:
        torch.cuda.set_device(env.local_rank)
    seconds = timeout_s()
    master = f"rendezvous file {env.store}" if env.store else f"master {env.master_addr}:{env.master_port}"
    logger.info("Joining the process group: rank %d of %d, %s, backend %s (%s)",
                env.rank, env.world_size, master, backend, env.source)
    # A stop signal with a Python handler is blocked during the join (it could not run before the join returns,
    # and interrupting torch's rendezvous prints a C++ stack); one with no handler still ends the process.
    held = [sig for sig in SignalLatch.SIGNALS if callable(signal.getsignal(sig))] \
        if hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread() else []
    if held:
        signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        dist.init_process_group(backend=backend, init_method=f"file://{env.store}" if env.store else "env://",
                                rank=env.rank, world_size=env.world_size, timeout=datetime.timedelta(seconds=seconds))
    except Exception as err:  # DistStoreError, RuntimeError, TimeoutError, depending on where it stalled
        reach = "the file is writable" if env.store else "the master is reachable and its port free"
        raise DistributedError(
            f"rank {env.rank} of {env.world_size} could not join the process group at {master} within {seconds:.0f} s "
            f"({type(err).__name__}: {(str(err).splitlines() or [''])[0]}); check that every rank started and {reach} "
            f"(LAUNCHER_DIST_TIMEOUT_S sets the wait)") from err
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, held)
    return True


def current() -> Optional[DistEnv]:
    """The DistEnv of the initialised process group, or None when training in one process."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return None
    env = from_environment()
    local = env.local_rank if env else int(os.environ.get("LOCAL_RANK", 0))
    return DistEnv(dist.get_rank(), local, dist.get_world_size(), os.environ.get("MASTER_ADDR", ""),
                   int(os.environ.get("MASTER_PORT", 0) or 0), env.source if env else "torchrun")


RELEASE_S = 0.05  # see shutdown()


def shutdown(wait_for_peers: bool = True) -> None:
    """Leave the process group; with ``wait_for_peers`` (a clean end), first a barrier.

    The short sleeps hand the GIL to gloo's threads, which drop a finished collective a moment after it completes:
    a process reaching interpreter shutdown meanwhile aborts (SIGABRT, about one DDP run in 50).
    """
    import time

    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    if wait_for_peers:
        dist.barrier()
        time.sleep(RELEASE_S)
    dist.destroy_process_group()
    time.sleep(RELEASE_S)


# -- collectives the trainer and storage use ----------------------------------------------------------
def broadcast_object(value: Any, src: int = 0) -> Any:
    import torch.distributed as dist

    box = [value]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def all_gather_object(value: Any) -> List[Any]:
    import torch.distributed as dist

    out: List[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def max_int(value: int) -> int:
    import torch
    import torch.distributed as dist

    t = torch.tensor([value], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def sum_tensor(t: "torch.Tensor") -> "torch.Tensor":
    import torch.distributed as dist

    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return t


def layout_id(keys_and_counts: Sequence[tuple]) -> int:
    """A checksum of what each rank is about to reduce, so ranks that disagree are caught, not mixed."""
    return zlib.crc32(repr(list(keys_and_counts)).encode())


def sum_across_ranks(values: "torch.Tensor", layout: int) -> Optional["torch.Tensor"]:
    """The element-wise sum of ``values`` over all ranks; None where the ranks' layouts differ."""
    import torch
    import torch.distributed as dist

    head = torch.tensor([layout, -layout], dtype=torch.int64)
    dist.all_reduce(head, op=dist.ReduceOp.MAX)
    if int(head[0]) != layout or int(-head[1]) != layout:
        return None
    dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


def mean_across_ranks(values: "torch.Tensor", layout: int) -> Optional["torch.Tensor"]:
    """The element-wise mean of ``values`` over all ranks; None where the ranks' layouts differ."""
    import torch.distributed as dist

    total = sum_across_ranks(values, layout)
    return None if total is None else total / dist.get_world_size()


# -- trainer.devices=N: spawn the workers ---------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(worker: Callable[..., None], args: tuple, nprocs: int) -> Tuple[Optional[int], Any]:
    """Start ``worker(rank, nprocs, store, parent_pid, ready, *args)`` in ``nprocs`` processes and wait for all.

    ``store``: the file the workers meet through, in a private temporary directory. SIGTERM, SIGUSR2 and SIGINT
    are passed on to the workers (a second SIGINT aborts them, a third stops the wait); Ctrl-Z stops them with
    this process. When one fails the others are stopped and torch's exception raised (KeyboardInterrupt after a
    Ctrl-C). Returns the signal forwarded (or None) and the handler it replaced, for the caller to chain.
    """
    import torch.multiprocessing as mp

    ready = mp.get_context("spawn").RawArray("b", nprocs)  # set by each worker once it holds signals (worker_started)
    processes: List[Any] = []
    error_files: List[str] = []  # torch's, one per worker, written by a worker that raised and never removed by torch
    received: List[int] = []
    held: List[Tuple[int, int]] = []  # (rank, signal) for workers still starting, who would not see it yet

    def send(rank: int, signum: int) -> None:
        if rank >= len(processes) or (signum in SignalLatch.SIGNALS and not ready[rank]):
            held.append((rank, signum))  # a stop: passed on once the worker holds it; a Ctrl-C once it is started
        elif rank < len(processes) and processes[rank].is_alive() and processes[rank].pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(processes[rank].pid, signum)

    def forward(signum: int, frame: Any) -> None:
        if received.count(signal.SIGINT) >= 2 and signum == signal.SIGINT:
            raise KeyboardInterrupt  # a third Ctrl-C: stop waiting (the workers are killed below)
        repeated = signum != signal.SIGINT and signum in received
        received.append(signum)
        if repeated:  # the workers have it already; a second would kill one that has left training
            return
        for rank in range(nprocs):
            send(rank, signum)

    def pass_on_held(now: Callable[[int, int], bool]) -> None:
        for rank, signum in [h for h in held if now(*h)]:
            held.remove((rank, signum))
            send(rank, signum)

    handlers: Dict[int, Any] = dict.fromkeys(SIGNALS, forward)
    if hasattr(signal, "SIGTSTP"):  # Ctrl-Z: the workers stop with this process, and go on with it
        handlers[signal.SIGTSTP] = suspend_along(lambda: [p.pid for p in processes if p.is_alive() and p.pid])
    previous: Dict[int, Any] = {}

    def start() -> Any:
        context = mp.start_processes(worker, args=(nprocs, store, os.getpid(), ready, *args), nprocs=nprocs,
                                     join=False, start_method="spawn")
        processes.extend(context.processes)
        error_files.extend(name for name in context.error_files if name)
        return context

    rendezvous = tempfile.mkdtemp(prefix="launcher-rendezvous-")  # 0700: another user cannot reach it
    store = os.path.join(rendezvous, "store")
    try:
        if threading.current_thread() is not threading.main_thread():  # no handlers to set, no signals to block
            context = start()
        else:
            # The workers inherit the stop signals blocked, so one sent to every process waits until the worker
            # holds it (worker_started) rather than killing it mid-import; this process's handlers are set first.
            from multiprocessing import resource_tracker

            resource_tracker.ensure_running()  # starting it unblocks SIGINT and SIGTERM: before they are blocked
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, list(handlers)) if hasattr(signal, "pthread_sigmask") else None
            try:
                previous = {sig: signal.signal(sig, handler) for sig, handler in handlers.items()}
                context = start()
                pass_on_held(lambda rank, signum: signum not in SignalLatch.SIGNALS)  # a Ctrl-C while they started
                for sig, old in previous.items():  # a signal held while this run started (a SLURM job's): pass it on
                    if isinstance(old, SignalLatch) and old.take(sig):
                        forward(sig, None)
            finally:
                if mask is not None:
                    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        # after a Ctrl-C the workers are aborting: one that lingers (waiting for a peer gone) is killed soon
        while not context.join(timeout=0.2, grace_period=2.0 if signal.SIGINT in received else 10.0):
            pass_on_held(lambda rank, signum: ready[rank])  # started since: pass the signal on now
    except Exception as err:
        if signal.SIGINT in received:  # a worker ended by the Ctrl-C (e.g. before training): an abort, not a failure
            raise KeyboardInterrupt from None
        err.forwarded = list(received)  # type: ignore[attr-defined]  # a signal may have ended a worker that was done
        raise
    finally:
        for process in processes:  # before the handlers go back: one that raises (a sweep's stop) skips nothing here
            if process.is_alive():
                process.kill()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for name in error_files:  # read into the exception by now; torch leaves them behind
            with contextlib.suppress(OSError):
                os.unlink(name)
        shutil.rmtree(rendezvous, ignore_errors=True)  # the workers have ended: a rerun meets in a new one
    first = received[0] if received else None
    return first, SignalLatch.unlatched(previous.get(first), first) if first is not None else None


def describe_worker_failure(err: BaseException) -> str:
    """One line naming the failed rank and its error, from torch.multiprocessing's exception."""
    rank = getattr(err, "error_index", None)
    text = str(err).strip()
    last = next((line.strip() for line in reversed(text.splitlines()) if line.strip()), type(err).__name__)
    if "terminated with signal" in text or "terminated with exit code" in text:
        last = text.splitlines()[0].strip() if text else last
    where = f"rank {rank}" if rank is not None else "a worker"
    return f"{where} failed: {last}"


def rank_log_files(rank: int, run_dir: Path) -> None:
    """Send this rank's log records to ``<name>_rank<N>.log`` instead of the run dir's shared log file."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        path = Path(getattr(handler, "baseFilename", "") or "")
        if isinstance(handler, logging.FileHandler) and path.parent == Path(run_dir).resolve():
            moved = logging.FileHandler(path.with_name(f"{path.stem}_rank{rank}{path.suffix}"))
            moved.setFormatter(handler.formatter)
            moved.setLevel(handler.level)
            root.removeHandler(handler)
            handler.close()
            root.addHandler(moved)


def _rank_format(rank: int) -> logging.Formatter:
    return logging.Formatter(f"[%(asctime)s][%(levelname)s][rank {rank}] %(message)s", "%H:%M:%S")


def worker_logging(rank: int, run_dir: "Path", console_level: int = logging.INFO) -> None:
    """A spawned worker's log: the console (rank 0 alone below warnings), tagged with its rank, and its own file."""
    fmt = _rank_format(rank)
    root = logging.getLogger()
    root.setLevel(logging.INFO)
    name = "train.log" if rank == 0 else f"train_rank{rank}.log"
    console, file = logging.StreamHandler(), logging.FileHandler(run_dir / name)
    # one console voice; every rank's file in full
    console.setLevel(max(console_level, logging.INFO if rank == 0 else logging.WARNING))
    for handler in (console, file):
        handler.setFormatter(fmt)
        root.addHandler(handler)


@contextlib.contextmanager
def errors_in_main_log(run_dir: "Path", env: Optional[DistEnv]) -> Iterator[None]:
    """On a rank other than 0, its errors also in the run's ``train.log``, tagged with the rank (its warnings stay in
    its own ``train_rank<N>.log``)."""
    if env is None or env.is_main:
        yield
        return
    handler = logging.FileHandler(Path(run_dir) / "train.log")  # appended to, as rank 0's handler does
    handler.setLevel(logging.ERROR)
    handler.setFormatter(_rank_format(env.rank))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)
        handler.close()


def worker_started(rank: int, parent: int, ready: Any) -> None:
    """First thing in a worker of :func:`spawn`: latch the stop signals and unblock them, take a process group of
    its own (a terminal's Ctrl-C reaches the parent alone), and on Linux die with the parent."""
    SignalLatch(say=rank == 0).install()
    ready[rank] = 1
    if hasattr(signal, "pthread_sigmask"):  # what spawn() blocked as it started this process; a Ctrl-C then aborts here
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [*SIGNALS, *([signal.SIGTSTP] if hasattr(signal, "SIGTSTP") else [])])
    os.setpgrp()
    if sys.platform.startswith("linux"):
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the line above took effect
        os._exit(1)


def worker_environment(rank: int, world_size: int, store: str) -> DistEnv:
    """In a spawned worker: torchrun's variables, with the rendezvous ``store`` file for the master's address, and
    gloo's and NCCL's connections on loopback unless the environment names another interface."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size),
                      LAUNCHER_DIST_SOURCE="spawn", **{STORE_ENV: store})
    for name in ("MASTER_ADDR", "MASTER_PORT"):  # none: a user's would not be where these ranks meet
        os.environ.pop(name, None)
    loopback = loopback_interface()
    if loopback is not None:
        for name in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
            os.environ.setdefault(name, loopback)
    return DistEnv(rank, rank, world_size, "127.0.0.1", 0, "spawn", store)


def loopback_interface() -> Optional[str]:
    """This host's loopback interface (``lo``, ``lo0``), or None."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((name for name in ("lo", "lo0") if name in names), None)
