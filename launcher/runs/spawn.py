"""``trainer.devices=N``: one run trained by N worker processes on this machine (DDP), rank 0 recording it."""
from __future__ import annotations

import json
import logging
import re
import signal
import time
from pathlib import Path
from typing import Any, Callable, List, Optional, Tuple

from omegaconf import DictConfig

from launcher.engine import distributed
from launcher.engine.errors import ConfigError
from launcher.engine.signals import SIGNALS, chain_to, pass_on_late
from launcher.runs.config import register_configs
from launcher.runs.rundir import ConfigFilesBefore, finished_result, for_workers, mark_failed

logger = logging.getLogger("launcher")


def run_spawned(cfg: DictConfig, run_dir: Path, overrides: Optional[List[str]], devices: int,
                before: Optional[ConfigFilesBefore], run: Callable[..., Any]) -> Tuple[str, dict, Optional[str]]:
    """Train in ``devices`` workers, each calling ``run`` (:func:`launcher.run`) with the run dir checked; returns
    rank 0's record: ``(status, metrics, stop_reason)``. ``before``: the record found, which a failure that
    trained nothing leaves as it was."""
    try:
        distributed.timeout_s()  # the environment's setting, checked once here rather than by each worker
    except distributed.DistributedError as err:
        raise ConfigError(str(err)) from None
    logger.info("Starting %d worker processes (trainer.devices=%d); their logs: %s/train.log (rank 0), "
                "train_rank<N>.log (others)", devices, devices, run_dir)

    def mark_aborted() -> None:
        if before is None or not before.record_kept():
            mark_failed(run_dir, "KeyboardInterrupt: stopped by Ctrl-C", status="aborted", exit_code=130)

    started = time.time()
    root = logging.getLogger()  # the console's level: the CLI's INFO; from Python, warnings unless configured
    console_level = root.getEffectiveLevel() if root.handlers else logging.WARNING
    try:
        received, previous = distributed.spawn(
            _worker, (run, for_workers(cfg), str(run_dir), list(overrides or []), console_level), devices)
    except KeyboardInterrupt:
        if not _finished_since(run_dir, started):
            mark_aborted()
            raise
        logger.warning("Ctrl-C after the run had finished: %s", _what_stands(run_dir))
        received, previous = None, None
    except Exception as err:  # torch.multiprocessing's ProcessRaisedException / ProcessExitedException
        received, previous = _after_worker_failure(err, run_dir, before is not None and before.record_kept()), None
    try:
        record = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError) as err:
        raise RuntimeError(f"the workers ended but {run_dir / 'run.json'} cannot be read: {err}") from err
    status = record.get("status", "failed")
    if received == signal.SIGINT and status in ("aborted", "running"):  # torch's workers exit 0 on KeyboardInterrupt
        mark_aborted()
        raise KeyboardInterrupt
    if status == "interrupted" and callable(previous) and previous is not signal.default_int_handler:
        chain_to(previous, received)  # e.g. submitit's handler, which requeues the job: rank 0's checkpoint is on disk
    elif received is not None and received != signal.SIGINT and status in ("completed", "stopped"):
        pass_on_late(received, status)  # it came as the run ended, once rank 0 had recorded it
    return status, record.get("metrics", {}), record.get("stop_reason")


def _what_stands(run_dir: Path) -> str:
    return "its record and final checkpoint stand" if (run_dir / "checkpoints" / "final.pt").is_file() else \
        "its record stands"


def _finished_since(run_dir: Path, since: float) -> bool:
    """Whether ``run_dir``'s record says its run finished, written at or after ``since``."""
    try:
        return finished_result(run_dir) is not None and (run_dir / "run.json").stat().st_mtime >= since
    except OSError:
        return False


def _after_worker_failure(err: Exception, run_dir: Path, kept: bool) -> int:
    """Raise what a worker's failure means: a ConfigError (exit 2, as in one process) or WorkerFailed naming the
    rank, its error and its log, recorded in ``run.json`` unless rank 0 ``kept`` the earlier record. A signal
    passed on that ended a worker after rank 0 recorded the run's end leaves the run standing: it is returned."""
    message = distributed.describe_worker_failure(err)
    forwarded = getattr(err, "forwarded", None)
    if forwarded and finished_result(run_dir) is not None:
        logger.warning("%s, after the run had finished: %s", message, _what_stands(run_dir))
        return int(forwarded[0])
    config_error = re.match(r"rank \d+ failed: (?:launcher\.engine\.errors\.)?ConfigError: (.*)", message)
    if config_error:
        if not kept:
            mark_failed(run_dir, f"ConfigError: {config_error.group(1)}", exit_code=2)
        raise ConfigError(config_error.group(1)) from None
    rank = getattr(err, "error_index", None)
    if not kept:
        mark_failed(run_dir, message)
    raise distributed.WorkerFailed(f"{message} (log: {run_dir / ('train.log' if not rank else f'train_rank{rank}.log')})") \
        from None


def _worker(rank: int, world_size: int, store: str, parent: int, ready: Any, run: Callable[..., Any], config: dict,
            run_dir: str, overrides: List[str], console_level: int = logging.INFO) -> None:
    """One worker: joins the process group and trains its share."""
    from omegaconf import OmegaConf

    try:
        distributed.worker_started(rank, parent, ready)
        distributed.worker_environment(rank, world_size, store)
        distributed.worker_logging(rank, Path(run_dir), console_level)
        register_configs()
        run(OmegaConf.create(config), run_dir, overrides, checked=True)  # the parent checked the run dir
    except KeyboardInterrupt:  # torch's worker wrapper would exit 0 on it, and the parent wait for its peers
        raise SystemExit(130) from None
    finally:  # a signal from here is the parent's late copy: ignored while Python shuts down
        for sig in SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
