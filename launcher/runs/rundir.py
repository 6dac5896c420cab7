"""Run-directory bookkeeping: ``run.json``, what is needed to reproduce a run and how it ended."""
from __future__ import annotations

import datetime
import json
import logging
import os
import platform
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from launcher.engine.errors import ConfigError, RunDirBusy
from launcher.engine.files import atomic_write, candidates, in_run_dir, readable_archive, resume_off


SWEEP_COMMAND_ENV = "LAUNCHER_SWEEP_COMMAND"  # set by ``python -m launcher -m ...`` for its job processes


def command_line() -> List[str]:
    """This process's command as it can be typed again (``python -m launcher ...``); in a sweep's submitit job,
    the sweep's command, which reruns the sweep and with it this job."""
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    module = None if spec is None or spec.name == "__main__" else spec.name  # None: a script, a dir or zip run as one
    sweep = os.environ.get(SWEEP_COMMAND_ENV)
    if sweep and (sys.argv[:1] == ["-c"] or (module or "").startswith("submitit.")):
        try:
            command = json.loads(sweep)
        except ValueError:
            command = None
        if isinstance(command, list):
            return [str(part) for part in command]
    if module is None and sys.argv[:1] and Path(sys.argv[0]).resolve() == Path(__file__).resolve().parent.parent / "__main__.py":
        module = "launcher"  # a worker that trainer.devices spawned: its __main__ is the parent's, loaded from its file
    if module is None:
        return [sys.executable, *sys.argv]
    module = module[: -len(".__main__")] if module.endswith(".__main__") else module
    return [sys.executable, "-m", module, *sys.argv[1:]]


def git_state(cwd: Path) -> Dict[str, Any]:
    """Commit and dirty flag of the git repository holding ``cwd``, or nulls outside one."""
    def git(*args: str) -> Optional[str]:
        try:
            out = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": bool(status) if status is not None else None}


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="milliseconds")


def same_command(run_dir: Path) -> str:
    """How to run ``run_dir``'s run again, for advice: "the same command", with the dir named where it was dated
    (``${now:...}``); from the Python API, the ``launcher.run`` call that names the dir."""
    from omegaconf import OmegaConf

    try:
        hydra = OmegaConf.load(Path(run_dir) / ".hydra" / "hydra.yaml").hydra
        sweep = str(hydra.get("mode")).endswith("MULTIRUN")
        node = OmegaConf.to_container(hydra.sweep if sweep else hydra.run, resolve=False)
        where = Path(run_dir).absolute()
        if sweep:  # the sweep dir: the job dir less its subdir's levels
            where = where.parents[str(node.get("subdir", "")).strip("/").count("/")]
    except Exception:  # noqa: BLE001 -- no Hydra record: the Python API's run (a trainer built by hand, too)
        return f"launcher.run(cfg, {str(Path(run_dir).absolute())!r})"
    return "the same command" + _naming_dated_dir(node, "hydra.sweep.dir" if sweep else "hydra.run.dir", where)


def new_dir_advice() -> str:
    """Where to give a run a dir of its own, for advice: Hydra's setting on the CLI, ``run_dir`` from Python."""
    from hydra.core.hydra_config import HydraConfig

    return "a new hydra.run.dir (hydra.sweep.dir for a sweep)" if HydraConfig.initialized() else \
        "another run_dir for launcher.run()"


def same_sweep(config: Any) -> str:
    """:func:`same_command` for a sweep, from its launcher's ``config``."""
    from omegaconf import OmegaConf

    try:
        node = OmegaConf.to_container(config.hydra.sweep, resolve=False)
        return "the sweep" + _naming_dated_dir(node, "hydra.sweep.dir", Path(str(config.hydra.sweep.dir)).absolute())
    except Exception:  # noqa: BLE001
        return "the sweep"


def _naming_dated_dir(node: Mapping[str, Any], key: str, where: Path) -> str:
    return f" with {override_for_shell(key, str(where))}" if "${now:" in str(node.get("dir")) else ""


def override_for_shell(key: str, value: str) -> str:
    """``key=value`` as typed in a shell, quoted for Hydra's override grammar and then for the shell."""
    import shlex

    if re.fullmatch(r"[A-Za-z0-9_./:@+-]+", value):
        return f"{key}={value}"
    override = f"{key}='{value.replace(chr(39), chr(92) + chr(39))}'"
    return f'"{override}"' if not re.search(r'["$`\\!]', override) else shlex.quote(override)


def read_record(run_dir: Path) -> Dict[str, Any]:
    """``run_dir``'s ``run.json``; {} where there is none, or it is unreadable."""
    try:
        data = json.loads((Path(run_dir) / "run.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def finished_result(run_dir: Path) -> Optional[Dict[str, Any]]:
    """The ``run.json`` of a run that finished in ``run_dir``, else None. Finished: its record says so, and its
    ``final.pt`` is whole or it holds no checkpoint at all (a damaged ``final.pt`` beside others trains on)."""
    data = read_record(run_dir)
    if data.get("status") not in ("completed", "stopped"):
        return None
    checkpoints = Path(run_dir) / "checkpoints"
    final = checkpoints / "final.pt"
    return data if (in_run_dir(final, checkpoints) and readable_archive(final)) or not candidates(checkpoints) else None


def _attempt_seconds(record: Mapping[str, Any], run_dir: Optional[Path] = None) -> float:
    """The run time a ``run.json`` accounts for: its ``seconds`` (older records: its last attempt's span), plus,
    for a killed attempt still ``running``, the time to its last sign of life in ``run_dir``."""
    if isinstance(record.get("seconds"), (int, float)):
        total = float(record["seconds"])
        if record.get("status") == "running" and run_dir is not None:
            total += _killed_attempt_seconds(record, run_dir)
        return total
    try:
        start = datetime.datetime.fromisoformat(record["start_time"])
        end = datetime.datetime.fromisoformat(record["end_time"])
    except (KeyError, TypeError, ValueError):
        return 0.0
    return max((end - start).total_seconds(), 0.0)


def _killed_attempt_seconds(record: Mapping[str, Any], run_dir: Path) -> float:
    try:
        start = datetime.datetime.fromisoformat(record["start_time"]).timestamp()
    except (KeyError, TypeError, ValueError):
        return 0.0
    last = 0.0
    for name in ("metrics.jsonl", "checkpoints/last"):
        try:
            last = max(last, (Path(run_dir) / name).stat().st_mtime)
        except OSError:
            pass
    return max(last - start, 0.0)


# run.json statuses kept by an attempt that trains nothing
KEPT_RECORDS = ("completed", "stopped", "interrupted")


class ConfigFilesBefore:
    """The run dir's ``.hydra/`` config files as a rerun found them, to put back if it trains nothing
    (see :meth:`RunRecord.keep_earlier`): they describe the config its checkpoints were made with."""

    NAMES = ("config.yaml", "hydra.yaml", "overrides.yaml")

    def __init__(self, run_dir: Path) -> None:
        self.dir = Path(run_dir) / ".hydra"
        self.record = Path(run_dir) / "run.json"
        self.files: Dict[str, Optional[bytes]] = {}
        try:
            self.record_text: Optional[bytes] = self.record.read_bytes()
        except OSError:
            self.record_text = None
        for name in self.NAMES:
            try:
                self.files[name] = (self.dir / name).read_bytes()
            except OSError:
                self.files[name] = None

    def record_kept(self) -> bool:
        """``run.json`` is the one found and one that an attempt training nothing keeps (the workers of
        ``trainer.devices=N`` kept it: the parent must not mark it failed)."""
        try:
            found = json.loads(self.record_text or b"{}")
        except ValueError:
            return False
        return self._unchanged() and isinstance(found, dict) and found.get("status") in KEPT_RECORDS

    def _unchanged(self) -> bool:
        try:
            return self.record_text is not None and self.record.read_bytes() == self.record_text
        except OSError:
            return False

    def restore_if_record_kept(self) -> None:
        """Put the files back where ``run.json`` is the one found."""
        if not self._unchanged():
            return
        for name, text in self.files.items():
            if text is None:
                (self.dir / name).unlink(missing_ok=True)
            else:
                atomic_write(self.dir / name, text, sync_dir=False)


class RunRecord:
    """``run.json`` in the run dir: written when the run starts and rewritten when it ends."""

    def __init__(self, run_dir: Path, seed: int, overrides: Optional[list] = None, write: bool = True,
                 config: Optional[Mapping[str, Any]] = None) -> None:
        import hydra
        import torch

        self.path = Path(run_dir) / "run.json"
        self.write = write  # false on DDP ranks other than 0
        try:
            self._previous_text: Optional[bytes] = self.path.read_bytes()
            previous = json.loads(self._previous_text)
        except (OSError, ValueError):
            self._previous_text, previous = None, {}
        if not isinstance(previous, dict):
            self._previous_text, previous = None, {}
        self._keeps = previous.get("status") in KEPT_RECORDS
        self.data: Dict[str, Any] = {
            "status": "running",
            "seed": seed,
            "overrides": list(overrides or []),
            "cwd": os.getcwd(),
            "dir": os.path.abspath(run_dir),  # a copy of the dir (cp -a while it trains) is not where this process writes
            "command": command_line(),
            "git": git_state(Path(os.getcwd())),
            "versions": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "hydra": hydra.__version__,
            },
            "host": socket.gethostname(),
            # the processes training (trainer.devices, torchrun's or SLURM's): each step's global batch, each epoch's steps
            "world_size": torch.distributed.get_world_size() if torch.distributed.is_available() and
            torch.distributed.is_initialized() else 1,
            "threads": torch.get_num_threads(),  # intra-op threads: they change the math's order, so its last bits
            "pid": os.getpid(),
            "start_time": _now(),
            "first_start_time": previous.get("first_start_time") or previous.get("start_time"),
            # run time over the attempts (gaps left out), the total so far carried here until this one ends
            "seconds": _attempt_seconds(previous, Path(run_dir)),
            "attempt": int(previous.get("attempt", 0)) + 1,
            "end_time": None,
            "exit_code": None,
            "metrics": {},
            "submitit": self.submitit_job(),
            "config": dict(config) if config is not None else None,  # plain_config's: what a rerun is checked against
        }

        before, now = previous.get("threads"), self.data["threads"]
        if write and isinstance(before, int) and before != now:
            logging.getLogger("launcher").warning(
                "This run's earlier attempt trained with %d torch thread(s), this one with %d: it goes on, but its "
                "math is no longer bitwise that of one uninterrupted run (OMP_NUM_THREADS=%d keeps the earlier count)",
                before, now, before)
        self._start = datetime.datetime.now().astimezone()
        self._earlier_seconds = self.data["seconds"]

    @staticmethod
    def submitit_job() -> Optional[Dict[str, Any]]:
        """Job id and log files when this process is a submitit job (local or SLURM), else None."""
        if "SUBMITIT_EXECUTOR" not in os.environ:
            return None
        import submitit

        try:
            env = submitit.JobEnvironment()
        except RuntimeError:
            return None
        return {"job_id": env.job_id, "cluster": env.cluster, "stdout": str(env.paths.stdout), "stderr": str(env.paths.stderr)}

    def _write(self) -> None:
        if not self.write:
            return
        text = json.dumps(self.data, indent=2, default=str) + "\n"
        atomic_write(self.path, text.encode())

    def start(self) -> None:
        self._write()

    def keep_earlier(self) -> bool:
        """Put back the earlier record (a finished or interrupted run's) for an attempt that trained nothing, so
        that a rerun failing as it starts loses no result; False where there was none to keep."""
        if not self._keeps or self._previous_text is None:
            return False
        if self.write:
            atomic_write(self.path, self._previous_text)
        return True

    def finish(self, status: str, exit_code: int, metrics: Mapping[str, float], error: Optional[str] = None, **extra: Any) -> None:
        now = datetime.datetime.now().astimezone()
        seconds = self._earlier_seconds + (now - self._start).total_seconds()
        self.data.update(status=status, exit_code=exit_code, metrics=dict(metrics), seconds=round(seconds, 3),
                         end_time=now.isoformat(timespec="milliseconds"), **extra)
        if error:
            self.data["error"] = error
        self._write()


def refused_key(run_dir: Path) -> Optional[str]:
    """The key whose value the run's last attempt refused (failed with exit status 2, its error naming the key
    first: ``ConfigError: hooks.early_stopping.monitor: ...``), else None."""
    record = read_record(run_dir)
    if record.get("status") != "failed" or record.get("exit_code") != 2:
        return None
    key = re.match(r"ConfigError: \+*([A-Za-z_][\w./-]*)", str(record.get("error") or ""))
    return key.group(1).rstrip(".") if key else None


def mark_failed(run_dir: Path, error: str, status: str = "failed", exit_code: int = 1) -> None:
    """Record in ``run.json`` that the run failed with ``error`` (or ``status``) where its workers could not."""
    data = read_record(run_dir)
    if data.get("status") in (None, "running", "interrupted", "failed"):
        if data.get("status") == "running":  # the attempt killed outright: its time runs to its last sign of life
            data["seconds"] = round(_attempt_seconds(data, Path(run_dir)), 3)
        data.update(status=status, exit_code=exit_code, end_time=_now(), error=error)
        atomic_write(Path(run_dir) / "run.json", (json.dumps(data, indent=2, default=str) + "\n").encode())


def _process_state(pid: int) -> Tuple[Optional[str], Optional[float]]:
    """Process ``pid``'s state letter (Z: ended, not reaped) and start time, from Linux's /proc; Nones elsewhere."""
    from launcher.engine.signals import process_stat

    fields = process_stat(pid)
    try:
        with open("/proc/stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        return fields[0], boot + int(fields[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, TypeError, ValueError, IndexError, StopIteration):  # TypeError: no fields
        return None, None


def training_here_now(run_dir: Path) -> Optional[str]:
    """Who is training in ``run_dir`` now (its ``run.json`` says ``running``: its process alive here and not a
    reused pid, or its SLURM job running elsewhere, not this process's own), or None."""
    data = read_record(run_dir)
    pid = data.get("pid")
    if data.get("status") != "running":
        return None
    if data.get("host") != socket.gethostname():
        return _training_in_slurm_job(data)
    if not isinstance(pid, int) or pid in (os.getpid(), os.getppid()):
        return None
    if isinstance(data.get("dir"), str):
        try:
            if not os.path.samefile(data["dir"], run_dir):
                return None  # a copy of a run dir made while it trained: that run writes in the dir it was copied from
        except OSError:
            pass  # the dir it recorded is gone: moved here while it trains, perhaps (its open files follow)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, another user's
        pass
    state, started = _process_state(pid)
    if state in ("Z", "X"):  # killed, waiting for its parent to collect it
        return None
    try:
        recorded = datetime.datetime.fromisoformat(data["start_time"]).timestamp()
    except (KeyError, TypeError, ValueError):
        recorded = None
    if started is not None and recorded is not None and started > recorded + 5:
        return None  # the number was reused by a process started after the record
    job = data.get("submitit") or {}
    slurm = f", SLURM job {job['job_id']}" if job.get("cluster") == "slurm" and job.get("job_id") else ""
    return f"pid {pid} on this host{slurm}, started {data.get('start_time')}, attempt {data.get('attempt')}"


def another_run_here(run_dir: Path, who: str, stop: str) -> str:
    """The refusal of a second run in ``run_dir`` while ``who`` trains there, which ``stop`` stops."""
    return (f"{run_dir}: a run is training in this dir now ({who}); wait for it to end, stop it ({stop}: it saves "
            f"a checkpoint), or give this run {new_dir_advice()}")


class RunDirLock:
    """The run dir held while its run works there: ``flock`` on ``<run dir>/.run.lock``, which names the holder; a
    second run is refused (:class:`RunDirBusy`) before it touches anything. The kernel lets go when the process dies;
    forked children (DataLoader workers) do not hold it."""

    NAME = ".run.lock"

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / self.NAME
        self._fd: Optional[int] = None

    def __enter__(self) -> "RunDirLock":
        import fcntl
        import functools
        import weakref

        while True:
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            except OSError:  # a dir this user cannot write to (or a full disk): the run's own writes say so
                return self
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = self._holder(fd)
                os.close(fd)
                self._refuse(holder)
            except OSError:  # a file system without locks
                os.close(fd)
                return self
            try:  # the file it holds, not one the last holder removed (and another run made anew) as this one opened it
                if os.path.samestat(os.fstat(fd), os.stat(self.path)):
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {socket.gethostname()}\n".encode())
        except OSError:  # a full disk: the lock holds without its holder's name
            pass
        self._fd = fd
        os.register_at_fork(after_in_child=functools.partial(RunDirLock._not_in_child, weakref.ref(self)))
        return self

    def __exit__(self, *exc: Any) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            self.path.unlink(missing_ok=True)  # while it is held: a run that opened it before retries on the new one
            os.close(fd)

    @staticmethod
    def _not_in_child(ref: Any) -> None:
        lock = ref()
        if lock is not None and lock._fd is not None:  # the child's copy: the parent's lock stands
            os.close(lock._fd)
            lock._fd = None

    def _holder(self, fd: int) -> Tuple[Optional[int], Optional[str]]:
        """The pid and host that hold the lock: the file's words, or Linux's list of locks."""
        try:
            pid, host = os.pread(fd, 256, 0).decode().split()
            return int(pid), host
        except (OSError, ValueError):
            pass
        try:
            st = os.fstat(fd)
            where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
            with open("/proc/locks") as f:
                for line in f:
                    parts = line.split()
                    if "FLOCK" in parts and where in parts and "->" not in parts:
                        return int(parts[parts.index(where) - 1]), socket.gethostname()
        except (OSError, ValueError):
            pass
        return None, None

    def _refuse(self, holder: Tuple[Optional[int], Optional[str]]) -> None:
        pid, host = holder
        if pid is None:
            who, stop = f"another process holds {self.path}", "kill -TERM the process"
        elif host == socket.gethostname():
            who, stop = f"pid {pid} on this host", f"kill -TERM {pid}"
        else:
            who, stop = f"pid {pid} on {host}", f"kill -TERM {pid} on {host}"
        raise RunDirBusy(another_run_here(self.run_dir, who, stop))


def _training_in_slurm_job(data: Mapping[str, Any]) -> Optional[str]:
    """For a record ``running`` on another host: its SLURM job where SLURM says it is active (not this process's)."""
    from launcher.runs.slurmstate import SLURM_ACTIVE, slurm_states

    job = data.get("submitit") or {}
    job_id = str(job.get("job_id") or "")
    if job.get("cluster") != "slurm" or not job_id:
        return None
    own = RunRecord.submitit_job()
    if own is not None and str(own.get("job_id")) == job_id:
        return None
    state = slurm_states([job_id]).get(job_id)
    if state not in SLURM_ACTIVE:
        return None
    return (f"SLURM job {job_id} on {data.get('host')}, {state} says squeue, started {data.get('start_time')}, "
            f"attempt {data.get('attempt')}")


# What a run's checkpoints are made of: resuming under other values trains another experiment. Other keys may change.
DEFINING = ("model", "optimizer", "data", "seed", "trainer._target_", "trainer.workflow")
# not compared: the world size is checked instead of trainer.devices; trust_checkpoint is how this command reads them
UNCOMPARED = ("trainer.devices", "trainer.trust_checkpoint")
# not the run's experiment: how its batches are loaded, and the val data (validation leaves training as it was)
FREE_IN_DEFINING = ("data.num_workers", "data.pin_memory", "data.persistent_workers", "data.prefetch_factor", "data.val")
LENGTH = ("trainer.max_epochs", "trainer.max_iters")
REPORTED = ("objective", "objective_mode")  # what a run returns: a finished run's rerun applies them to its result
_ABSENT = "<absent>"


def _flat(node: Any, prefix: str = "") -> Dict[str, Any]:
    if isinstance(node, dict) and node:
        out: Dict[str, Any] = {}
        for key, value in node.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: node}


# ${name:...}: a resolver's call (oc.env, now, hydra, ...), not another key's value
_RESOLVER_CALL = re.compile(r"\$\{\s*[\w.\-]+\s*:")
_ENV_CALL = re.compile(r"\$\{\s*oc\.env\s*:")


def plain_config(cfg: Any) -> Dict[str, Any]:
    """A config as ``run.json`` records it: interpolations of other keys resolved, resolver calls (``${oc.env:X}``,
    ``${now:...}``) kept as written, so nothing from the environment is written down."""
    return resolved_but(cfg, _RESOLVER_CALL)


def resolved_but(cfg: Any, kept: "re.Pattern[str]") -> Dict[str, Any]:
    """``cfg`` as plain values, resolved but for the strings ``kept`` finds (and keys reading them); as written where
    some key does not resolve here."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)

    def escaped(value: Any) -> Any:  # OmegaConf reads \${ as the text ${
        if isinstance(value, dict):
            return {key: escaped(item) for key, item in value.items()}
        if isinstance(value, list):
            return [escaped(item) for item in value]
        return re.sub(r"(?<!\\)\$\{", r"\\${", value) if isinstance(value, str) and kept.search(value) else value

    try:
        return OmegaConf.to_container(OmegaConf.create(escaped(raw)), resolve=True)  # type: ignore[return-value]
    except Exception:  # noqa: BLE001 -- a key that is missing
        return raw  # type: ignore[return-value]


def for_workers(cfg: Any) -> Dict[str, Any]:
    """``cfg`` for the workers of ``trainer.devices=N``: resolved here (``${hydra:...}``, ``${now:...}`` once for all),
    but for ``${oc.env:...}``, which each worker reads and records as one process does."""
    return resolved_but(cfg, _ENV_CALL)


def recorded_config(run_dir: Path) -> Optional[Dict[str, Any]]:
    """The config the run in ``run_dir`` was last started with (``run.json``'s, else ``.hydra/config.yaml``), or None."""
    from omegaconf import OmegaConf

    config = read_record(run_dir).get("config")
    if isinstance(config, dict):
        return config
    path = Path(run_dir) / ".hydra" / "config.yaml"
    if not path.is_file():
        return None
    try:
        return plain_config(OmegaConf.load(path))
    except Exception:
        return None


def config_changes(run_dir: Path, cfg: Any) -> List[Tuple[str, Any, Any]]:
    """``(key, recorded value, new value)`` for every key that differs from the run dir's recorded config; a group
    of settings added or removed as a whole (``~hooks.checkpointer``) is one change, its value a mapping."""
    from omegaconf import OmegaConf

    old = recorded_config(run_dir)
    if old is None:
        return []
    new = plain_config(cfg)
    before, after = _flat(old), _flat(new)
    for key in _timed_keys(cfg):  # ${now:...}: the time this command ran, not a change to the run's config
        after[key] = before.get(key, after[key])
    for key in UNCOMPARED:
        if key in after:
            after[key] = before.get(key, after[key])
    for key in _called_before_recorded_as_written(before, after):  # a record holding what it resolved to then
        if same_value(before[key], OmegaConf.select(cfg, key, default=_ABSENT, throw_on_resolution_failure=False)):
            after[key] = before[key]
    whole = _whole_groups(old, new)
    grouped = {key for key, _, _ in whole}
    inside = tuple(f"{key}." for key in grouped)
    return sorted(whole + [(k, before.get(k, _ABSENT), after.get(k, _ABSENT)) for k in set(before) | set(after)
                           if not same_value(before.get(k, _ABSENT), after.get(k, _ABSENT)) and k not in grouped
                           and not k.startswith(inside)],
                  key=lambda change: change[0])


def _called_before_recorded_as_written(before: Mapping[str, Any], after: Mapping[str, Any]) -> List[str]:
    """The keys that call a resolver now (``${oc.env:DATA}``) where an older record holds the value resolved."""
    def calls(value: Any) -> bool:
        return bool(_RESOLVER_CALL.search(str(value)))

    return [key for key, value in after.items() if key in before and isinstance(value, str) and calls(value)
            and not calls(before[key]) and not same_value(before[key], value)]


def same_value(a: Any, b: Any) -> bool:
    """``a == b``, but NaN equals NaN (``x=nan`` run again is no change), in lists and mappings too."""
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    return a == b


def split_additions(run_dir: Path, changes: Sequence[Tuple[str, Any, Any]],
                    overrides: Optional[Sequence[str]]) -> Tuple[List[Tuple[str, Any, Any]], List[Tuple[str, Any, Any]]]:
    """``changes`` split into this command's and the keys the record lacks that no differing override names
    (settings added to the config files since). Without ``overrides`` (a config made in Python) all are this command's."""
    if overrides is None:
        return list(changes), []
    recorded = read_record(run_dir).get("overrides")
    if not isinstance(recorded, list):
        return list(changes), []
    # this command's overrides the run was not started with, and the run's that this command dropped (hooks=minimal)
    differing = [o for o in overrides if o not in recorded] + [o for o in recorded if o not in overrides]
    # a key, or a group (model=cnn: model; hooks/ema@hooks.ema=ema: its package hooks.ema; a/b=c: a.b)
    named = [key.rpartition("@")[2] if "@" in key else key.replace("/", ".")
             for key in (str(o).split("=", 1)[0].lstrip("+~") for o in differing)]

    def by_this_command(key: str) -> bool:
        return any(key == n or key.startswith(n + ".") or n.startswith(key + ".") for n in named)

    added = [c for c in changes if c[1] == _ABSENT and not by_this_command(c[0])]
    return [c for c in changes if c not in added], added


def _timed_keys(cfg: Any) -> List[str]:
    """The keys of ``cfg`` whose value holds a ``${now:...}`` or reads such a key: each command resolves it anew."""
    from omegaconf import DictConfig, OmegaConf

    if not isinstance(cfg, DictConfig):
        return []
    raw = {key: value for key, value in _flat(OmegaConf.to_container(cfg, resolve=False, enum_to_str=True)).items()
           if isinstance(value, str) and "${" in value}
    timed = {key for key, value in raw.items() if "${now:" in value}
    while True:  # a key reading a timed one is timed too, however many keys apart
        reads = {key for key, value in raw.items() if key not in timed and any(
            re.search(r"\$\{\s*" + re.escape(t) + r"\s*[}.\[]", value) for t in timed)}
        if not reads:
            return sorted(timed)
        timed |= reads


def _whole_groups(old: Any, new: Any, prefix: str = "") -> List[Tuple[str, Any, Any]]:
    """``(key, old, new)`` for each mapping on one side whose other side is none (a hook removed, ``data.val=null``)."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return []
    out: List[Tuple[str, Any, Any]] = []
    for key in sorted(set(old) | set(new), key=str):
        a, b = old.get(key, _ABSENT), new.get(key, _ABSENT)
        if not (isinstance(a, dict) and isinstance(b, dict)) and (isinstance(a, dict) and bool(a)) != (isinstance(b, dict) and bool(b)):
            out.append((f"{prefix}{key}", a, b))
        else:
            out.extend(_whole_groups(a, b, f"{prefix}{key}."))
    return out


def _defines(key: str) -> bool:
    if any(key == k or key.startswith(k + ".") for k in FREE_IN_DEFINING):
        return False
    return any(key == k or key.startswith(k + ".") for k in DEFINING)


def _shown(value: Any) -> str:
    """A changed value as a message shows it: a group of settings added or removed by its ``_target_``."""
    if value is _ABSENT:
        return "(absent)"
    if isinstance(value, dict):
        return f"<{value['_target_']}>" if isinstance(value.get("_target_"), str) else "{...}"
    return repr(value)


def describe_changes(changes: Sequence[Tuple[str, Any, Any]], limit: int = 6) -> str:
    shown = ", ".join(f"{k}: {_shown(a)} -> {_shown(b)}" for k, a, b in changes[:limit])
    return shown + (f" and {len(changes) - limit} more" if len(changes) > limit else "")


def _changes_since(run_dir: Path, cfg: Any, ignore: Sequence[str] = ()) -> Tuple[List[Tuple[str, Any, Any]], List[Tuple[str, Any, Any]]]:
    """The changes from ``run_dir``'s recorded config (those that define the run first), and those that define it."""
    changes = sorted((c for c in config_changes(run_dir, cfg) if c[0] not in ignore),
                     key=lambda c: (not _defines(c[0]), not c[0].startswith("trainer.")))
    return changes, [c for c in changes if _defines(c[0])]


def check_rerun(run_dir: Path, cfg: Any) -> List[Tuple[str, Any, Any]]:
    """The changes from the run dir's run; a :class:`ConfigError` where they define another experiment, or where
    ``trainer.resume=false`` would start over the dir's checkpoints."""
    saved = candidates(Path(run_dir) / "checkpoints")
    if not saved and finished_result(run_dir) is None:
        return []  # nothing trained here yet (or a first attempt that failed to build): nothing to protect
    resume = cfg.trainer.get("resume", "auto") if "trainer" in cfg else "auto"
    if resume_off(resume) and not saved:
        return []  # a finished run whose checkpoints are gone, trained again from the start as asked
    if resume_off(resume):
        raise ConfigError(
            f"trainer.resume={str(resume).lower() if isinstance(resume, bool) or resume is None else resume}: run dir {str(run_dir)!r} holds checkpoints of an earlier run "
            f"({', '.join(p.name for p in saved[:3])}{', ...' if len(saved) > 3 else ''}) that a fresh start would "
            f"overwrite; choose {new_dir_advice()}, or delete its checkpoints/ (trainer.resume=auto resumes them)")
    changes, defining = _changes_since(run_dir, cfg)
    if defining:
        raise ConfigError(
            f"run dir {str(run_dir)!r} holds a run made with another config ({describe_changes(defining)}); its "
            f"checkpoints belong to that run. To resume it, {values_back(defining, cfg)}, or choose {new_dir_advice()} "
            f"for this one")
    return changes


def check_world_size(run_dir: Path, coming: int) -> None:
    """Refuse to train on a run of another number of processes than ``coming`` (its global batch and epoch length
    would differ), before anything in the run dir is touched."""
    recorded = read_record(run_dir).get("world_size")
    if not isinstance(recorded, int) or recorded == coming or not candidates(Path(run_dir) / "checkpoints"):
        return
    raise ConfigError(
        f"run dir {str(run_dir)!r} holds a run of {recorded} process(es), and this run would have {coming} (another "
        f"global batch); resume it with trainer.devices={recorded}, or choose {new_dir_advice()}")


def values_back(defining: Sequence[Tuple[str, Any, Any]], cfg: Any) -> str:
    """How to give a run's recorded values back, for the advice to resume it."""
    back = restoring_overrides(defining, cfg)
    if back:
        return (f"give that run's values back ({back} on the command line, or the config file that set them as it "
                f"was; its overrides are in run.json's \"overrides\" there)")
    return "rerun with that run's overrides (run.json's \"overrides\" there)"


def restoring_overrides(changes: Sequence[Tuple[str, Any, Any]], cfg: Any) -> str:
    """The overrides that give ``changes``' keys their recorded values back (``seed=3 ~model.bias``), skipping a key
    that interpolates another of them; "" where a whole group or a ``_target_`` differs, a value does not read
    back plainly, or it takes more than four."""
    from omegaconf import OmegaConf

    keys = {key for key, _, _ in changes}
    out = []
    for key, was, now in changes:
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent) if parent else cfg
        if OmegaConf.is_dict(node) and leaf in node and OmegaConf.is_interpolation(node, leaf):
            target = re.fullmatch(r"\$\{([\w.]+)\}", str(node._get_node(leaf)._value()))
            if target and _absolute_key(target.group(1), parent) in keys:
                continue  # follows a key given back here
        text = None if isinstance(was, dict) or key.endswith("_target_") or len(out) == 4 else \
            f"~{key}" if was is _ABSENT else _plain_override(("+" if now is _ABSENT else "") + key, was)
        if text is None:
            return ""
        out.append(text)
    return " ".join(out)


def _absolute_key(target: str, parent: str) -> Optional[str]:
    """The key ``${target}`` in node ``parent`` names (``${.x}``: parent's x); None above the root."""
    name = target.lstrip(".")
    up = len(target) - len(name) - 1  # ${.x}: no level up; ${..x}: one
    if up < 0:
        return target
    parts = parent.split(".") if parent else []
    if up > len(parts):
        return None
    return ".".join([*parts[: len(parts) - up], name])


def _plain_override(key: str, value: Any) -> Optional[str]:
    """``key=value`` as typed in a shell, with no quotes, where Hydra reads that back as ``value``; else None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    def text(v: Any) -> str:
        if v is None or isinstance(v, bool):
            return json.dumps(v)
        if isinstance(v, (list, tuple)):
            return "[" + ",".join(text(item) for item in v) + "]"
        return str(v)

    override = f"{key}={text(value)}"
    if not re.fullmatch(r"[\w+~./=:,\[\]-]+", override):  # nothing a shell or Hydra's grammar would read otherwise
        return None
    try:
        parsed = OverridesParser.create().parse_override(override).value()
    except Exception:  # noqa: BLE001 -- not an override Hydra reads
        return None
    return override if _same(parsed, value) else None


def _same(a: Any, b: Any) -> bool:
    """Equal, and of the same types throughout (the override ``k=3`` does not give back the string '3', nor 1 True)."""
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and (a == b or (a != a and b != b))  # (nan is nan's own value)


def check_resume_source(checkpoint: Any, run_dir: Path, cfg: Any) -> List[Tuple[str, Any, Any]]:
    """:func:`check_rerun` for ``trainer.resume=<a checkpoint of another run dir>``, against that run's record."""
    path = Path(os.path.abspath(str(checkpoint)))  # not resolved: a checkpoints/ linked elsewhere is still its run's
    if not path.is_file():
        return []  # the trainer says what is wrong with it
    source = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    if source == Path(os.path.abspath(run_dir)) or recorded_config(source) is None:
        return []
    changes, defining = _changes_since(source, cfg, ignore=("trainer.resume",))
    if defining:
        raise ConfigError(
            f"trainer.resume={checkpoint}: that checkpoint's run ({source}) was made with another config "
            f"({describe_changes(defining)}). To resume it, {values_back(defining, cfg)}, or start from its weights "
            f"with trainer.load_from={checkpoint}")
    return changes


def lengthens(changes: Sequence[Tuple[str, Any, Any]]) -> bool:
    """Whether ``changes`` raise the run's length (``trainer.max_epochs`` or ``max_iters``)."""
    return any(k in LENGTH and isinstance(a, int) and isinstance(b, int) and b > a for k, a, b in changes)


def save_config_files(run_dir: Path, files: Mapping[str, Any]) -> None:
    """``.hydra/<name>`` in the run dir for each ``{name: config or list}``, as YAML, as Hydra writes them."""
    from omegaconf import OmegaConf

    out = Path(run_dir) / ".hydra"
    out.mkdir(parents=True, exist_ok=True)
    for name, node in files.items():
        node = node if OmegaConf.is_config(node) else OmegaConf.create(node)
        atomic_write(out / name, OmegaConf.to_yaml(node).encode(), sync_dir=False)


def ignore_outputs_in_git(run_dir: Path) -> None:
    """``outputs/.gitignore`` (ignore all) when the run dir is under ``./outputs``: runs stay out of ``git status``."""
    root = Path.cwd() / "outputs"
    try:
        Path(run_dir).resolve().relative_to(root.resolve())
    except (ValueError, OSError):
        return
    marker = root / ".gitignore"
    if not marker.exists():
        try:
            marker.write_text("# Written by the launcher: run directories stay out of git.\n*\n")
        except OSError:
            pass
