"""Writers: the console, ``metrics.jsonl`` and TensorBoard, each writing what the storage recorded since its last
write, every ``period`` steps, after each validation and at the end. Under DDP every rank reads (averaging over the
ranks) and rank 0 writes. Reading the storage turns tensors into numbers, so steps between writes never sync.
"""
from __future__ import annotations

import collections
import contextlib
import datetime
import json
import logging
import resource
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import torch

from launcher.engine.errors import ConfigError
from launcher.engine.hook import HookBase, Priority, is_number, run_file_name
from launcher.engine.files import atomic_write

logger = logging.getLogger("launcher")


class PeriodicWriter(HookBase):
    """Calls :meth:`write` with the scalars recorded since the previous call."""

    priority = Priority.LOWER

    def __init__(self, period: int = 20, window: int = 20, priority: Optional[int] = None) -> None:
        super().__init__(priority)
        if not isinstance(period, int) or period <= 0:
            raise ValueError(f"{type(self).__name__}: period should be an integer greater than zero, got {period!r}")
        if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
            raise ValueError(f"{type(self).__name__}: window should be an integer greater than zero (the steps a "
                             f"median is taken over; 1: each step's own value), got {window!r}")
        self.period = period
        self.window = window
        self._written: Dict[str, int] = {}  # key -> iteration of the last value written

    def _fresh(self) -> Dict[str, Tuple[float, int]]:
        storage = self.trainer.storage
        fresh = {}
        for key, (value, it) in storage.latest_with_smoothing_hint(self.window).items():
            if self._written.get(key, -1) < it:
                fresh[key] = (value, it)
                self._written[key] = it
        return fresh

    def _flush(self) -> None:
        fresh = self._fresh()
        if fresh and self.trainer.is_main:
            self.write(fresh)

    def write(self, scalars: Mapping[str, Tuple[float, int]]) -> None:
        raise NotImplementedError

    def after_step(self) -> None:
        if (self.trainer.iter + 1) % self.period == 0:
            self._flush()

    def after_val(self) -> None:
        self._flush()

    def after_train(self) -> None:
        # interrupted: what was recorded since the last write waits in the checkpoint for the resumed run
        if self.trainer.status != "interrupted":
            self._flush()
        self.close()

    def close(self) -> None:
        pass

    def state_dict(self) -> Dict[str, Any]:
        return {"written": dict(self._written)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._written = dict(state["written"])


def _hparams(seed: Any, overrides: List[str]) -> Dict[str, Any]:
    """The run's seed and overrides for TensorBoard's HParams tab: each value as Hydra reads it where it is an int,
    float, bool or string, else its text as typed."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    hparams: Dict[str, Any] = {"seed": seed}
    for override in overrides:
        key, sep, text = override.lstrip("+").partition("=")
        if not sep or key.startswith(("hydra.", "~")):
            continue
        try:
            value = parser.parse_override(override).value()
        except Exception:  # noqa: BLE001 -- not Hydra's grammar: the text as typed
            value = text
        exact = isinstance(value, (bool, float, str)) or (isinstance(value, int) and abs(value) <= 2**53)
        hparams[key] = value if exact else text
    return hparams


# TensorBoard groups charts by a tag's first part: the launcher's own scalars under train/, its timing under wallclock/
_TENSORBOARD_TAGS = {"lr": "train/lr", "grad_norm": "train/grad_norm", "skipped_steps": "train/skipped_steps",
                     "skipped_batches": "train/skipped_batches", "time": "wallclock/iter_time",
                     "data_time": "wallclock/data_time"}


def tensorboard_tag(key: str) -> str:
    """The TensorBoard tag of a recorded scalar: its own name, or its place in ``_TENSORBOARD_TAGS``."""
    return "train/" + key if key.startswith("lr/") else _TENSORBOARD_TAGS.get(key, key)


def _hparams_summaries(hparams: Mapping[str, Any], metric_tags: List[str]) -> List[Any]:
    """The HParams plugin's experiment, session-start and session-end summaries of one finished run."""
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.plugins.hparams import api_pb2, metadata, plugin_data_pb2

    start, infos = plugin_data_pb2.SessionStartInfo(), []
    for name, value in hparams.items():
        if isinstance(value, bool):
            start.hparams[name].bool_value, kind = value, api_pb2.DATA_TYPE_BOOL
        elif isinstance(value, (int, float)):
            start.hparams[name].number_value, kind = value, api_pb2.DATA_TYPE_FLOAT64
        else:
            start.hparams[name].string_value, kind = str(value), api_pb2.DATA_TYPE_STRING
        infos.append(api_pb2.HParamInfo(name=name, type=kind))
    metrics = [api_pb2.MetricInfo(name=api_pb2.MetricName(tag=tag)) for tag in metric_tags]
    data = {metadata.EXPERIMENT_TAG: plugin_data_pb2.HParamsPluginData(
                experiment=api_pb2.Experiment(hparam_infos=infos, metric_infos=metrics)),
            metadata.SESSION_START_INFO_TAG: plugin_data_pb2.HParamsPluginData(session_start_info=start),
            metadata.SESSION_END_INFO_TAG: plugin_data_pb2.HParamsPluginData(session_end_info=plugin_data_pb2.SessionEndInfo(
                status=api_pb2.STATUS_SUCCESS, end_time_secs=time.time()))}
    return [Summary(value=[Summary.Value(tag=tag, metadata=metadata.create_summary_metadata(content))])
            for tag, content in data.items()]


def memory_mb() -> Tuple[str, float]:
    """Peak CUDA memory allocated on this device where present, else the process's peak RSS."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return "max_mem", torch.cuda.max_memory_allocated() / 2**20
    rss_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return "max_rss", rss_kb / (2**20 if sys.platform == "darwin" else 2**10)


class ConsoleWriter(PeriodicWriter):
    """One log line per write: epoch, iteration, ETA, losses, lr, step and data time, memory. The ETA follows
    the wall clock over the last ``ETA_MARKS`` lines (the median step time until there are two)."""

    ETA_MARKS = 20

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._marks: "collections.deque[Tuple[float, int]]" = collections.deque(maxlen=self.ETA_MARKS)

    def _eta(self, step: int) -> Optional[float]:
        t = self.trainer
        now = time.perf_counter()
        if not self._marks or self._marks[-1][1] != step:
            self._marks.append((now, step))
        first_time, first_step = self._marks[0]
        if step > first_step:
            return (now - first_time) / (step - first_step) * (t.max_iters - step)
        if t.storage.has("time"):
            return t.storage.history("time").median(200) * (t.max_iters - step)
        return None

    def _flush(self) -> None:
        if self.trainer.dist is None and not logger.isEnabledFor(logging.INFO):
            return  # nothing would be printed, and no other rank waits for this read
        super()._flush()

    def write(self, scalars: Mapping[str, Tuple[float, int]]) -> None:
        if not logger.isEnabledFor(logging.INFO):  # nothing would be printed: skip the formatting
            return
        t = self.trainer
        parts = [f"epoch {t.epoch_text(t.last_epoch)}"]
        train_keys = [k for k in scalars if not k.startswith("val/")]
        if train_keys:
            step = max(scalars[k][1] for k in train_keys) + 1
            parts.append(f"iter {step}/{t.max_iters}")
            eta = self._eta(step) if t.max_iters > step else None
            if eta is not None:
                parts.append(f"eta {datetime.timedelta(seconds=int(eta))}" if eta < 8.64e13 else "eta >10**9 days")
        for key in sorted(scalars):
            if key not in ("time", "data_time", "lr"):
                parts.append(f"{key} {scalars[key][0]:.4g}")
        if "lr" in scalars:
            parts.append(f"lr {scalars['lr'][0]:.4g}")
        for key in ("time", "data_time"):
            if key in scalars:
                parts.append(f"{key} {scalars[key][0]:.4f}")
        if train_keys:
            name, mb = memory_mb()
            parts.append(f"{name} {mb:.0f}M")
        logger.info("  ".join(parts))


class BufferedFileWriter(PeriodicWriter):
    """A writer whose rows go to a file in batches: every ``flush_secs`` seconds (0: every period), after each
    validation, at each checkpoint (:meth:`state_dict` writes first, so the file covers it) and at the end."""

    def __init__(self, period: int = 20, window: int = 20, flush_secs: float = 1.0, priority: Optional[int] = None) -> None:
        super().__init__(period, window, priority)
        if not is_number(flush_secs) or not flush_secs >= 0:
            raise ValueError(f"{type(self).__name__}: flush_secs should be a number of seconds >= 0, got {flush_secs!r}")
        self.flush_secs = float(flush_secs)
        self._due = 0.0  # time.monotonic() after which the next write goes to the file

    def write(self, scalars: Mapping[str, Tuple[float, int]]) -> None:
        self.buffer(scalars)
        now = time.monotonic()
        if now >= self._due:
            self.sync(to_disk=False)
            self._due = now + self.flush_secs

    def buffer(self, scalars: Mapping[str, Tuple[float, int]]) -> None:
        raise NotImplementedError

    def sync(self, to_disk: bool = True) -> None:
        """Send the buffered rows to the file; with ``to_disk``, flush them out of this process too."""
        raise NotImplementedError

    def after_val(self) -> None:
        super().after_val()
        if self.trainer.is_main:
            self.sync()

    def state_dict(self) -> Dict[str, Any]:
        if self.trainer is not None and self.trainer.is_main:
            self.sync()
        return super().state_dict()


class JSONWriter(BufferedFileWriter):
    """Appends one JSON object per write to ``<run dir>/metrics.jsonl``: ``iter``, ``epoch`` and the scalars."""

    def __init__(self, filename: str = "metrics.jsonl", period: int = 20, window: int = 20, flush_secs: float = 1.0,
                 priority: Optional[int] = None) -> None:
        super().__init__(period, window, flush_secs, priority)
        self.filename = run_file_name("JSONWriter", "filename", filename, "metrics.jsonl")
        self._file: Any = None
        self._rows: List[Dict[str, Any]] = []
        self._last: Optional[Tuple[int, Dict[str, Any]]] = None
        self._cut_at: Optional[int] = None  # where the file is cut before the next write

    def before_train(self) -> None:
        if not self.trainer.is_main:
            return
        path = self.trainer.work_dir / self.filename
        if not _inside(path, self.trainer.work_dir):  # runs would share it, each resume cutting it
            raise ConfigError(f"hooks.{self.name or 'jsonl'}.filename={self.filename}: {path} is outside the run dir "
                              f"{self.trainer.work_dir}; give a path inside it, e.g. metrics.jsonl")
        path.parent.mkdir(parents=True, exist_ok=True)  # logs/metrics.jsonl
        if path.exists():
            self._last = self._drop_rows_after(path, self.trainer.iter)
        self._file = open(path, "ab")

    @staticmethod
    def _drop_rows_after(path: Path, resume_iter: int) -> Optional[Tuple[int, Dict[str, Any]]]:
        """Keep the rows a resumed run's checkpoint covers (``iter < resume_iter``); returns where the last row kept
        starts and that row, which a later value of its iteration joins."""
        kept: List[bytes] = []
        last = None
        for raw in path.read_bytes().splitlines():
            try:
                row = json.loads(raw)
            except ValueError:  # a line cut short by a kill, or no text
                continue
            if isinstance(row, dict) and isinstance(row.get("iter"), int) and row["iter"] < resume_iter:
                kept.append(raw + b"\n")
                last = row
        atomic_write(path, b"".join(kept))
        return (sum(map(len, kept[:-1])), last) if last is not None else None

    def buffer(self, scalars: Mapping[str, Tuple[float, int]]) -> None:
        rows: Dict[int, Dict[str, Any]] = {}  # one row per iteration, so each value keeps its own
        storage = self.trainer.storage
        for key, (value, it) in sorted(scalars.items()):
            row = rows.get(it)
            if row is None:
                row = rows[it] = {"iter": it, "epoch": storage.epoch_of(it)}
            row[key] = value
        first = min(rows, default=None)
        # a validation at the last periodic write's iteration joins its row (in the file: cut there and rewritten)
        if first is not None and self._rows and self._rows[-1]["iter"] == first:
            rows[first] = {**self._rows.pop(), **rows[first]}
        elif first is not None and not self._rows and self._last is not None and self._last[1]["iter"] == first:
            self._cut_at = self._last[0]
            rows[first] = {**self._last[1], **rows[first]}
            self._last = None
        self._rows.extend(rows[it] for it in sorted(rows))

    def sync(self, to_disk: bool = True) -> None:
        rows, self._rows = self._rows, []
        if not rows or self._file is None:
            return
        if self._cut_at is not None:
            self._file.truncate(self._cut_at)  # opened to append: the next write goes to the new end
            self._cut_at = None
        lines = [(json.dumps(row) + "\n").encode("utf-8") for row in rows]
        start = self._file.seek(0, 2)
        self._file.write(b"".join(lines))
        self._file.flush()
        self._last = (start + sum(map(len, lines[:-1])), rows[-1])

    def close(self) -> None:
        if self._file is not None:
            self.sync()
            self._file.close()
            self._file = None


def _inside(path: Path, directory: Path) -> bool:
    try:
        return Path(path).resolve().is_relative_to(Path(directory).resolve())
    except OSError:
        return False


class TensorBoardWriter(BufferedFileWriter):
    """Writes every scalar to TensorBoard event files in the run dir under :func:`tensorboard_tag`; a run that ends
    completed or stopped adds its HParams entry."""

    def __init__(self, log_dir: str = ".", period: int = 20, window: int = 20, flush_secs: float = 1.0,
                 priority: Optional[int] = None) -> None:
        super().__init__(period, window, flush_secs, priority)
        self.log_dir = log_dir
        self._writer: Any = None
        self._events: List[Tuple[int, str, float, float]] = []  # (iteration, tag, value, wall time) not yet sent

    def before_train(self) -> None:
        if not self.trainer.is_main:
            return
        from torch.utils.tensorboard import SummaryWriter  # slow to import

        # purge_step hides events a previous attempt logged after the checkpoint this run resumed from
        self._writer = SummaryWriter(log_dir=str(self.trainer.work_dir / self.log_dir), purge_step=self.trainer.iter,
                                     max_queue=1000)

    def buffer(self, scalars: Mapping[str, Tuple[float, int]]) -> None:
        now = time.time()
        self._events.extend((it, tensorboard_tag(key), float(value), now) for key, (value, it) in scalars.items())

    def sync(self, to_disk: bool = True) -> None:
        events, self._events = self._events, []
        if self._writer is None:
            return
        if events:
            # one event per iteration holding all its scalars: a third of add_scalar's cost
            from tensorboard.compat.proto.summary_pb2 import Summary

            by_iter: Dict[int, list] = {}
            wall_times: Dict[int, float] = {}
            for it, key, value, wall_time in events:
                by_iter.setdefault(it, []).append(Summary.Value(tag=key, simple_value=value))
                wall_times.setdefault(it, wall_time)
            file_writer = self._writer._get_file_writer()
            for it in sorted(by_iter):
                file_writer.add_summary(Summary(value=by_iter[it]), it, wall_times[it])
        if to_disk:
            self._writer.flush()

    def _write_hparams(self) -> None:
        """The run's overrides and final metrics for TensorBoard's HParams tab, in an event file of their own
        (``*.hparams``) beside the scalars. TensorBoard keeps a tag's first summary, so an earlier attempt's file (and
        the old ``hparams/`` dir) is deleted, in the run's own dir only."""
        t = self.trainer
        metric_tags = [tensorboard_tag(k) for k in t.final_metrics(sync=False) if k.startswith(("val/", "train/"))]
        if not metric_tags:
            return
        log_dir = Path(self._writer.log_dir)
        legacy = log_dir / "hparams"
        earlier = [*log_dir.glob("events.out.tfevents.*.hparams"), *legacy.glob("events.out.tfevents.*")] \
            if _inside(log_dir, t.work_dir) else []
        self.sync()  # the scalars first
        from torch.utils.tensorboard.writer import FileWriter

        writer = FileWriter(str(log_dir), filename_suffix=".hparams")
        for summary in _hparams_summaries(_hparams(t.meta.get("seed", 0), t.meta.get("overrides", [])), metric_tags):
            writer.add_summary(summary, t.iter)
        writer.close()
        for path in earlier:
            with contextlib.suppress(OSError):
                path.unlink()
        if any(path.parent == legacy for path in earlier):
            with contextlib.suppress(OSError):  # something else in it
                legacy.rmdir()

    def close(self) -> None:
        if self._writer is not None:
            if self.trainer.status in ("completed", "stopped"):
                self._write_hparams()
            self.sync()
            self._writer.close()
            self._writer = None
