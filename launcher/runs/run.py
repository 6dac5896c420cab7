"""A Hydra-composed experiment launcher for PyTorch.

From Python (notebooks, tests): ``cfg = launcher.compose(["trainer=iter"])`` then
``launcher.run(cfg, "some/dir")``. From the shell: ``python -m launcher trainer=iter``.
"""
from __future__ import annotations

import contextlib
import logging
import os
import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from omegaconf import DictConfig

from launcher.runs.build import ConfigError, _group_options, build, call
from launcher.runs.config import CONFIG_DIR, register_configs
from launcher.runs.rundir import same_command
from launcher.runs.objective import (ObjectiveCheck, warn_if_last_epochs_unvalidated, warn_if_objective_never_recorded,
                                      warn_if_objective_unknown)

logger = logging.getLogger("launcher")

__all__ = ["ConfigError", "RunResult", "build_trainer", "compose", "run"]


register_configs()


@dataclass
class RunResult:
    objective: float
    metrics: Dict[str, float] = field(default_factory=dict)
    status: str = "completed"
    run_dir: Optional[Path] = None
    stop_reason: Optional[str] = None  # why a run ended early ("received SIGTERM", early stopping's reason), as run.json has it


# One run at a time in a process through the Python API: torch's random state, its threads and the loggers are the
# process's, so two runs in threads at once drew from one generator (a seeded run did not repeat) and logged into
# each other's train.log. Processes (a sweep) run side by side.
_ONE_RUN_AT_A_TIME = threading.Lock()


def compose(overrides: Sequence[str] = (), config_dir: Optional[str] = None) -> DictConfig:
    """The run config for ``overrides``, as ``python -m launcher <overrides>`` would compose it.

    ``config_dir`` adds a user's config directory in front of the built-in one.
    Raises :class:`ConfigError` with the CLI's one-line message for a misspelled key or option, a
    value the schema refuses or a bad override.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException

    from launcher.runs.build import composition_message, group_list_message, group_value_message

    overrides = list(overrides)
    for override in overrides:
        key = override.lstrip("+~").partition("=")[0].strip()
        if (key.startswith(("hydra.", "hydra/")) or key == "hydra") and key != "hydra.searchpath":
            raise ConfigError(f"{override}: compose() returns the run's config without Hydra's own settings, so it would "
                              f"have no effect; give the run dir as launcher.run(cfg, run_dir=...), and run sweeps with "
                              f"python -m launcher -m ... (hydra.searchpath, or config_dir=, adds config dirs)")
    if config_dir:
        if not Path(config_dir).is_dir():
            raise ConfigError(f"config_dir: {str(config_dir)!r} is not a directory; give the directory that holds "
                              f"your config groups (model/, data/, ...)")
        overrides.append(f"hydra.searchpath=[file://{Path(config_dir).resolve()}]")
    if GlobalHydra.instance().is_initialized():
        GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=CONFIG_DIR, version_base="1.3"):
        try:
            return hydra_compose(config_name="config", overrides=overrides)
        except (MissingConfigException, ConfigCompositionException, OverrideParseException) as err:
            raise ConfigError(composition_message(err, overrides)) from err
        except ValueError as err:
            if isinstance(err, ConfigError) or not group_value_message(err):
                raise
            raise ConfigError(composition_message(err, overrides)) from err
        except TypeError as err:  # hooks=[1,2]
            listed = group_list_message(err, overrides)
            if listed is None:
                raise
            raise ConfigError(listed) from err


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def build_trainer(cfg: DictConfig, run_dir: Union[str, Path]) -> Any:
    """Seed, then build the model, optimizer, data, hooks and trainer of ``cfg`` (nothing runs).

    Raises :class:`ConfigError`, naming the key, for anything that cannot be built.
    """
    from omegaconf import OmegaConf

    from launcher.engine.hook import HookBase

    check_trainer_config(cfg)
    seed = cfg.seed
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        # NumPy's seeds are 32-bit, and torch's generators take the seed plus the epoch or rank in 64 bits
        raise ConfigError(f"seed={seed!r}: use a whole number from 0 to 2**32-1 ({2**32 - 1})")
    check_objective(cfg)
    # what needs neither the model nor the data, checked before either is built (which can take minutes)
    check_targets(cfg)
    factory = check_optimizer_settings(cfg)
    check_loader_settings(cfg)
    seed_everything(seed)
    if cfg.model.get("_target_"):
        logger.info("Instantiating model <%s>", cfg.model.get("_target_"))
    model = build("model", cfg.model)
    import torch

    if not isinstance(model, torch.nn.Module):
        raise ConfigError(
            f"model._target_: {cfg.model.get('_target_')} built a {type(model).__name__}, which is not a torch.nn.Module; "
            f"the model must be an nn.Module whose forward(batch) returns the loss in train mode and a dict of metrics "
            f"in eval mode (README: 'Model contract')")
    if next(model.parameters(), None) is None:  # the optimizer would say "empty parameter list", naming itself
        raise ConfigError(f"model._target_: {cfg.model.get('_target_')} built a {type(model).__name__} with no parameters: "
                          f"nothing to train; the model must hold its layers (torch.nn.Linear, ...) as attributes")
    # Built on the model's parameters before the trainer moves the model: Module.to keeps them.
    optimizer = call("optimizer", cfg.optimizer, factory, model.parameters())
    check_optimizer_numbers(optimizer)
    from launcher.data import check_splits
    check_splits(cfg.data)
    data = build("data", cfg.data)
    if not callable(getattr(data, "train_loader", None)):
        raise ConfigError(
            f"data._target_: {cfg.data.get('_target_')} built a {type(data).__name__}, which has no train_loader(); "
            f"data must build an object with train_loader() and val_loader(), such as launcher.data.DataLoaders "
            f"with your datasets as data.train and data.val (README: 'Your own data')")
    hooks: Dict[str, Any] = {}
    for name, node in cfg.hooks.items():
        if name == "_target_":  # an option file written like a model's, its hook not under a name
            raise ConfigError(
                f"hooks._target_: {node} is not under a hook's name; each entry of hooks is one hook "
                f"(name: {{_target_: ..., options}}), so a file conf/hooks/<option>.yaml nests its hook: a line "
                f"'<option>:' and its '_target_: ...' indented below it, as conf/hooks/console.yaml does"
            )
        if node is None:  # hooks.<name>=null leaves it out, as ~hooks.<name> does
            continue
        if not OmegaConf.is_dict(node):
            raise ConfigError(f"hooks.{name}: {node!r} is not a hook; each entry of hooks is one hook: "
                              f"name: {{_target_: ..., options}}, or null to leave it out")
        hook = build(f"hooks.{name}", node)
        if not isinstance(hook, HookBase):
            raise ConfigError(
                f"hooks.{name}._target_: {node.get('_target_')} built a {type(hook).__name__}, which is not "
                f"a launcher.hooks.HookBase; a hook must subclass it"
            )
        hooks[name] = hook
    logger.info("Hooks: %s", ", ".join(hooks) or "none")
    trainer = build("trainer", cfg.trainer, model=model, optimizer=optimizer, data=data, hooks=hooks, work_dir=Path(run_dir))
    trainer.rerun_hint = same_command(Path(run_dir))
    return trainer


def check_targets(cfg: DictConfig) -> None:
    """A ConfigError naming the key for a ``_target_`` (the model's, the data's, a dataset's, a hook's...) that does
    not import, before anything is built."""
    from omegaconf import OmegaConf

    from launcher.runs.build import get_object, why_not_importable

    def walk(node: Any, key: str) -> Iterator[Tuple[str, Any]]:
        if isinstance(node, dict):
            if isinstance(node.get("_target_"), str) and "${" not in node["_target_"]:  # as written: one interpolated
                yield key, node["_target_"]                                             # is the build's to report
            for name, value in node.items():
                yield from walk(value, f"{key}.{name}")

    for top in ("model", "optimizer", "data", "trainer", "hooks"):
        node = cfg.get(top)
        if not OmegaConf.is_dict(node):
            continue
        for key, target in walk(OmegaConf.to_container(node, resolve=False), top):
            if key == "hooks":  # an option file's hook not under a name: build_trainer says so
                continue
            try:
                get_object(target)
            except Exception:  # noqa: BLE001 -- any failure to import it: why_not_importable says which
                raise ConfigError(f"{key}._target_: cannot import {target!r}: {why_not_importable(target)}") from None


def check_optimizer_settings(cfg: DictConfig) -> Any:
    """The optimizer's factory (``optimizer`` with ``_partial_: true``), its settings checked before the model is
    built: a torch optimizer is made once on a stand-in parameter, so that a negative or non-number ``lr`` (torch's
    own checks) or a NaN one is refused at once."""
    import torch

    factory = build("optimizer", cfg.optimizer)
    if not callable(factory):
        raise ConfigError("optimizer: expected a factory of the model's parameters; set optimizer._partial_=true")
    if str(getattr(getattr(factory, "func", factory), "__module__", "")).startswith("torch.optim"):
        check_optimizer_numbers(call("optimizer", cfg.optimizer, factory, [torch.nn.Parameter(torch.zeros(1))]),
                                warn=False)
    return factory


def check_loader_settings(cfg: DictConfig) -> None:
    """The built-in data loaders' settings (``data.batch_size``, ``data.num_workers``...), checked without their
    datasets, which are neither built nor checked here."""
    from omegaconf import OmegaConf

    data = cfg.get("data")
    if not (OmegaConf.is_dict(data) and data.get("_target_") == "launcher.data.DataLoaders"):
        return
    try:
        loaders = OmegaConf.to_container(data, resolve=True)
    except Exception:  # noqa: BLE001 -- a value that resolves only in Hydra's job (${hydra:...}): the build reports it
        return
    loaders.update(train=None, val=None)  # type: ignore[union-attr]
    quiet = logging.getLogger("launcher.data")
    was, quiet.disabled = quiet.disabled, True  # its advice on worker options is for a run that loads data
    try:
        build("data", OmegaConf.create(loaders))
    finally:
        quiet.disabled = was


def check_objective(cfg: DictConfig) -> None:
    """A ConfigError for an empty ``objective`` (``objective=``), which would make every run return NaN."""
    if not isinstance(cfg.get("objective"), str) or not cfg.objective.strip():
        raise ConfigError(f"objective={cfg.get('objective')!r}: name the metric the run returns to Hydra (and the sweep "
                          f"summary ranks by), e.g. objective=val/accuracy, or objective=train/loss objective_mode=min")


def warn_if_a_loss_is_maximized(cfg: DictConfig) -> None:
    mode = getattr(cfg.get("objective_mode"), "value", cfg.get("objective_mode"))
    if "loss" in cfg.objective.rsplit("/", 1)[-1].lower() and mode == "max":
        logger.warning("objective=%s with objective_mode=max: a sweep ranks the highest %s best; set objective_mode=min",
                       cfg.objective, cfg.objective)


def check_optimizer_numbers(optimizer: Any, warn: bool = True) -> None:
    """Raise :class:`ConfigError` for a NaN or infinite hyperparameter (``optimizer.lr=nan``), which torch
    accepts and which would end the run at its first steps with a NaN loss that does not name the key;
    ``warn``: say that an lr of 0 trains nothing."""
    import math

    from launcher.engine import distributed
    for group in getattr(optimizer, "param_groups", []):
        for key, value in group.items():
            numbers = value if isinstance(value, (tuple, list)) and key != "params" else (value,)
            if key != "params" and any(isinstance(v, float) and not math.isfinite(v) for v in numbers):
                raise ConfigError(f"optimizer.{key}={value!r}: not a finite number; give a finite value")
            # torch checks only that they are >= 0: a momentum of 2 trained, diverging
            if key in ("momentum", "dampening") and isinstance(value, (int, float)) and not 0 <= value <= 1:
                raise ConfigError(f"optimizer.{key}={value!r}: should be in [0, 1]")
    lr = getattr(optimizer, "param_groups", [{}])[0].get("lr") if getattr(optimizer, "param_groups", None) else None
    if warn and isinstance(lr, (int, float)) and lr == 0 and distributed.is_main_process():  # once, not by each rank
        logger.warning("optimizer.lr=0: the weights will not change (a schedule scales this lr)")


def check_trainer_config(cfg: DictConfig) -> None:
    """The trainer class's :meth:`~launcher.engine.trainer.TrainerBase.check_config` on ``cfg.trainer``, before
    anything is built; a ``_target_`` that does not import is left to the build, which names it."""
    from hydra.utils import get_class
    from omegaconf import OmegaConf

    try:
        cls = get_class(str(cfg.trainer.get("_target_")))
    except Exception:  # noqa: BLE001 -- reported by build(), with the close names
        return
    check = getattr(cls, "check_config", None)
    if callable(check):
        check(OmegaConf.to_container(cfg.trainer, resolve=True))


def check_values_not_applied(cfg: DictConfig, changes: Sequence[Tuple[str, Any, Any]]) -> None:
    """The values a finished run does not take (it returns its recorded result) are checked still: a value no run
    would take (``trainer.max_epochs=0``, ``hooks.console.period=0``) is a config error, not a warning and exit 0.
    Each changed built-in hook is checked as a build checks it (only constructed); the trainer's settings were
    checked before, and so are the built-in data loaders' settings (``data.num_workers=-1``), without their datasets.
    Other values (a dataset's, the device) are checked only where a run builds them."""
    from omegaconf import OmegaConf

    if any(key.startswith("data.") and key.split(".")[1] not in ("train", "val") for key, _, _ in changes):
        check_loader_settings(cfg)
    for name in sorted({key.split(".")[1] for key, _, _ in changes if key.startswith("hooks.")}):
        node = cfg.hooks.get(name) if OmegaConf.is_dict(cfg.get("hooks")) else None
        # only the built-in hooks: a hook of the user's own may do more than check its arguments as it is made
        # (start a tracking run, open a connection), which a run that trains nothing must not
        if OmegaConf.is_dict(node) and str(node.get("_target_") or "").startswith("launcher.hooks."):
            build(f"hooks.{name}", node)


def new_run_dir(root: Union[str, Path] = "outputs") -> Path:
    """A new, empty ``<root>/<date>/<time to the microsecond>``, as the CLI names a single run's dir;
    created here, so that runs started at the same moment (threads, processes) never share one."""
    import datetime

    while True:
        now = datetime.datetime.now()
        path = Path(root) / now.strftime("%Y-%m-%d") / now.strftime("%H-%M-%S-%f")
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir()
            return path
        except FileExistsError:
            continue


@contextlib.contextmanager
def _log_to_run_dir(run_dir: Path) -> Iterator[None]:
    """The launcher's and hooks' log records (INFO and up) in ``<run_dir>/train.log`` while the block
    runs, as the CLI's logging config writes them; loggers are left as they were afterwards."""
    path = (run_dir / "train.log").resolve()
    for each in logging.getLogger().handlers + logging.getLogger("launcher").handlers:
        if isinstance(each, logging.FileHandler) and Path(each.baseFilename) == path:
            yield  # written already (a Hydra app of the user's own whose job dir this is)
            return
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(levelname)s] %(message)s", "%H:%M:%S"))
    handlers: List[logging.Handler] = [handler]
    if not logging.getLogger().handlers:
        # Logging left unconfigured: Python would print warnings and errors on stderr (its last-resort
        # handler), but only while no logger has a handler; the file's handler would silence them.
        console = logging.StreamHandler()
        console.setLevel(logging.WARNING)
        console.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        handlers.append(console)
    loggers = [logging.getLogger("launcher")]
    levels = [each.level for each in loggers]
    for each in loggers:
        for one in handlers:
            each.addHandler(one)
        if each.level == logging.NOTSET:
            each.setLevel(logging.INFO)
    try:
        yield
    finally:
        for each, level in zip(loggers, levels):
            for one in handlers:
                each.removeHandler(one)
            each.setLevel(level)
        for one in handlers:
            one.close()


def run(cfg: DictConfig, run_dir: Union[str, Path, None] = None, overrides: Optional[List[str]] = None,
        on_start: Optional[Callable[[], None]] = None, checked: bool = False) -> RunResult:
    """Build everything in ``cfg`` and train; ``run.json`` in ``run_dir`` records how it went.

    ``run_dir`` defaults to a new ``outputs/<date>/<time>`` under the current directory, as on the CLI.

    Running again in the same ``run_dir`` resumes from its newest valid checkpoint
    (``trainer.resume=auto``), and a run that already finished returns its recorded result
    without training, unless ``trainer.max_epochs`` (or ``max_iters``) was raised: then it trains
    on from its final checkpoint. A run dir whose run was made with another model, optimizer, data,
    seed, trainer or workflow is refused. Raises :class:`ConfigError` (before any training, and
    before anything in the run dir changes) when the config cannot be built or does not fit the run
    dir. ``on_start`` is called once the run will train (the CLI records its config there); under
    DDP after the ranks have met, so that no rank checks against a record another rank rewrote.
    ``checked``: the run dir was checked already (a worker of ``trainer.devices=N``).

    From Python (no ``on_start``), one run at a time per process (another thread's run is refused: they would
    share torch's random state), the run dir in the result is absolute, and a Ctrl-C stops the run with a
    checkpoint as on the CLI and then raises ``KeyboardInterrupt``, so that a notebook cell or a loop of runs
    stops too; ``run(cfg, result.run_dir)`` (the dir named in the message) resumes it.
    """
    if checked or on_start is not None:  # the CLI, a spawned worker
        return _run(cfg, run_dir, overrides, on_start, checked)
    if not _ONE_RUN_AT_A_TIME.acquire(blocking=False):
        raise RuntimeError("launcher.run: another run is training in this process now (in another thread); torch's "
                           "random state and the loggers are the process's, so runs side by side would not repeat "
                           "their results and would log into each other's train.log. Run them one after the other, "
                           "or in processes (python -m launcher -m ... runs a sweep's jobs in parallel)")
    try:
        result = _run(cfg, run_dir, overrides, None, False)  # a new dir once the config's own checks pass
    finally:
        _ONE_RUN_AT_A_TIME.release()
    if result.status == "interrupted" and result.stop_reason == "received SIGINT" and result.run_dir is not None:
        if (result.run_dir / "checkpoints" / "last").is_file():
            raise KeyboardInterrupt(f"the run stopped with a checkpoint in {result.run_dir}: launcher.run(cfg, "
                                    f"{str(result.run_dir)!r}) resumes it")
        raise KeyboardInterrupt(f"the run in {result.run_dir} stopped without a checkpoint (no checkpointer hook): a "
                                f"rerun starts over")
    return result


def _run(cfg: DictConfig, run_dir: Union[str, Path, None], overrides: Optional[List[str]],
         on_start: Optional[Callable[[], None]], checked: bool) -> RunResult:
    from launcher.runs.rundir import RunDirLock, save_config_files

    check_unresolvable(cfg)
    check_objective(cfg)  # also where a finished run returns its result without building anything
    from launcher.engine.trainer import check_devices

    from launcher.engine import distributed
    # before the run dir or the data: a typo costs nothing
    devices = check_devices(cfg.trainer.get("devices", 1), cfg.trainer.get("device", "auto"),
                            spawned=distributed.from_environment() is None)
    if run_dir is None:
        run_dir = new_run_dir()
    run_dir = Path(run_dir).absolute()  # the result's: a resume from another directory finds it
    run_dir.mkdir(parents=True, exist_ok=True)
    env = distributed.from_environment()
    # one holder per run: this process, or rank 0 of torchrun's or SLURM's (spawned workers run under their parent's)
    held = RunDirLock(run_dir) if not checked and (env is None or env.is_main) else contextlib.nullcontext()
    with held:  # before anything in the run dir is written or removed
        if not checked and on_start is None:  # the Python API (the CLI passes on_start; spawned workers, checked)
            with _log_to_run_dir(run_dir):  # train.log and .hydra/ as the CLI leaves them
                return _run_in_dir(cfg, run_dir, overrides, lambda: save_config_files(
                    run_dir, {"config.yaml": cfg, "overrides.yaml": list(overrides or [])}), checked, devices, env)
        return _run_in_dir(cfg, run_dir, overrides, on_start, checked, devices, env)


def _run_in_dir(cfg: DictConfig, run_dir: Path, overrides: Optional[List[str]], on_start: Optional[Callable[[], None]],
                checked: bool, devices: int, env: Any) -> RunResult:
    """:func:`run` in its run dir, held: the dir's record checked against this config, then the training."""
    from launcher.engine.errors import RunDirBusy
    from launcher.engine.files import candidates as saved_checkpoints, resume_off
    from launcher.runs.rundir import (LENGTH, REPORTED, ConfigFilesBefore, another_run_here, check_resume_source, check_rerun,
                                 check_world_size, describe_changes, finished_result, ignore_outputs_in_git, lengthens,
                                 new_dir_advice, split_additions, training_here_now)

    ignore_outputs_in_git(run_dir)
    if not checked:
        record = run_dir / "run.json"
        if record.exists() and not record.is_file():  # it would be read as no record, and fail to be written
            raise ConfigError(f"{record}: {'a directory' if record.is_dir() else 'not a file'} where the run's record "
                              f"(a file) goes; move it away, or give this run {new_dir_advice()}")
        other = training_here_now(run_dir) if env is None or env.is_main else None
        if other:  # one in a SLURM job on another host, or of a launcher that took no lock
            stop = f"scancel --signal=TERM {other.partition('SLURM job ')[2].split()[0].rstrip(',')}" if "SLURM job " in other \
                else "kill -TERM its pid"
            raise RunDirBusy(another_run_here(run_dir, other, stop))
        if env is None or env.is_main:  # no other run writes here now: a killed one's half-written record goes
            from launcher.engine.checkpoint import remove_stale_temporaries

            remove_stale_temporaries(run_dir, ".run.json.tmp*")  # not the sweep's files beside it (submitted.json)
            remove_stale_temporaries(run_dir / ".hydra")
        check_trainer_config(cfg)  # a value no run takes is named as such, before "another config" or "finished"
        changes, added = split_additions(run_dir, check_rerun(run_dir, cfg), overrides)
        if added and (env is None or env.is_main):
            logger.info("Settings the run's record lacks, which no override names (added to the config files since "
                        "it started: by a later launcher, or in your own), at their values now: %s", describe_changes(added))
        resume = cfg.trainer.get("resume", "auto")
        if isinstance(resume, str) and resume != "auto" and not resume_off(resume):
            elsewhere = check_resume_source(resume, run_dir, cfg)
            if elsewhere:
                logger.warning("The run of %s was started with other settings; continuing with: %s", resume,
                               describe_changes(elsewhere))
        done = finished_result(run_dir) if cfg.trainer.get("resume", "auto") in ("auto", True) else None
        checkpoints = run_dir / "checkpoints"
        gone = done is not None and not saved_checkpoints(checkpoints)  # its results stand in its record alone
        # a run without a checkpointer (hooks=none) saved none: its checkpoints are not "gone"
        never = gone and _saved_none(run_dir)
        if gone and lengthens(changes):
            raise ConfigError(nothing_to_train_on(run_dir, done, changes))
        if (done is None or lengthens(changes)) and cfg.trainer.get("resume", "auto") in ("auto", True):
            check_world_size(run_dir, env.world_size if env is not None else devices)  # it trains on from here
        if done is not None and not lengthens(changes):  # an explicit checkpoint path always trains on
            check_values_not_applied(cfg, changes)
            value = done["metrics"].get(cfg.objective)
            if value is None:  # a finished run reports another objective than it was run with: read from its metrics
                warn_if_objective_unknown(str(cfg.objective), done["metrics"], "the finished run's metrics", "It returns NaN")
                value = float("nan")
            logger.info("This run already finished (%s): %s = %s; not training again%s", done["status"], cfg.objective,
                        f"{value:.4f}" if isinstance(value, float) else value,
                        f" ({'it saved no checkpoint, having no checkpointer hook' if never else f'its checkpoints are gone from {checkpoints}'}: "
                        f"trainer.resume=false trains it again from the start)" if gone else "")
            unapplied = [c for c in changes if c[0] not in REPORTED]  # what it reports is applied to its record
            if unapplied:
                logger.warning("Not applied, as the run is over: %s. Raise trainer.max_epochs (or max_iters) to train "
                               "it on, or choose %s", describe_changes(unapplied), new_dir_advice())
            return RunResult(objective=float(value), metrics=done["metrics"], status=done["status"], run_dir=run_dir,
                             stop_reason=done.get("stop_reason"))
        if done is not None:
            logger.warning("This run finished (%s) at iteration %s; training it on to the new length (its LR schedule "
                           "goes on from its saved state, made for the old length: a cosine schedule past its end climbs back towards its "
                           "base LR; start a new run dir for one that spans the new length)", done["status"], done.get("iter"))
        if changes:
            length = any(k in LENGTH for k, _, _ in changes) and done is None
            workers = [(a, b) for k, a, b in changes if k == "data.num_workers" and isinstance(a, int) and isinstance(b, int)
                       and (a == 0) != (b == 0)]
            logger.warning("This run dir's run was started with other settings; continuing with: %s%s%s", describe_changes(changes),
                           "; the LR schedule goes on from its checkpointed state, made for the old length (a cosine "
                           "schedule will not span the new one: start a new run dir for that)" if length else "",
                           f"; data.num_workers {workers[0][0]} -> {workers[0][1]}: a dataset's random augmentation draws "
                           f"differently with workers and without, so the run goes on but is no longer bitwise the "
                           f"uninterrupted one (any number of workers above 0 draws alike)" if workers else "")

    # a rerun that trains nothing (a bad value found while building) keeps the run dir's record and config files
    before = ConfigFilesBefore(run_dir) if on_start is not None and (env is None or env.is_main) else None
    try:
        return _run_or_spawn(cfg, run_dir, overrides, on_start, devices, env, before)
    except BaseException:
        if before is not None:
            before.restore_if_record_kept()
        raise


def _run_or_spawn(cfg: DictConfig, run_dir: Path, overrides: Optional[List[str]], on_start: Optional[Callable[[], None]],
                  devices: int, env: Any, before: Any = None) -> RunResult:
    from launcher.engine import distributed
    if env is None and devices > 1:
        if on_start is not None:
            on_start()
        return _run_spawned(cfg, run_dir, overrides, devices, before)
    if env is not None and devices > 1 and devices != env.world_size:
        logger.warning("trainer.devices=%d is ignored: this process is rank %d of %d started by %s",
                       devices, env.rank, env.world_size, env.source)
    if env is None:
        if on_start is not None:
            on_start()
        return _train(cfg, run_dir, overrides, main=True)
    if env.source == "slurm" and not env.is_main:  # Hydra pointed every task's log at the one train.log
        distributed.rank_log_files(env.rank, run_dir)
    distributed.init(env, str(cfg.trainer.get("device", "auto")))
    if on_start is not None:
        distributed.broadcast_object(None)  # every rank has checked the run dir against its record by now
        on_start()
    try:
        result = _train(cfg, run_dir, overrides, main=env.is_main, before_chain=distributed.shutdown)
    except BaseException:
        distributed.shutdown(wait_for_peers=False)
        raise
    distributed.shutdown()
    return result


def _train(cfg: DictConfig, run_dir: Path, overrides: Optional[List[str]], main: bool,
           before_chain: Callable[[], None] = lambda: None) -> RunResult:
    """Build and train in this process; ``main``: this process records ``run.json`` (rank 0 under DDP).

    ``before_chain`` runs before an interrupted run hands the signal on (submitit's handler requeues
    the job and exits): under DDP, leaving the process group once every rank is done.
    """
    from launcher.engine import distributed
    from launcher.engine.signals import SignalLatch

    env = distributed.from_environment()
    distributed.share_cores(env)  # before anything is built: a sweep's jobs side by side must not each take every core
    if "SUBMITIT_EXECUTOR" in os.environ and logging.getLogger("submitit").handlers:
        # submitit's logger writes to the job's log itself; passed on to the run's handlers too, each of its lines
        # showed twice there (and in train.log)
        logging.getLogger("submitit").propagate = False
    with distributed.errors_in_main_log(run_dir, env):
        if env is not None and env.source != "spawn":  # torchrun's agent (srun) ends the others with it when a rank fails
            return _train_held(cfg, run_dir, overrides, main, before_chain)
        with SignalLatch(say=main) as latch:  # a SIGTERM while the trainer is built stops it at its first step
            result = _train_held(cfg, run_dir, overrides, main, before_chain)
            if result.status == "interrupted":  # stopped on a signal, its checkpoint saved: another one asks nothing more
                latch.received = None  # (sent on, it would end the process by the signal, not the exit status 75)
            return result


def _train_held(cfg: DictConfig, run_dir: Path, overrides: Optional[List[str]], main: bool,
                before_chain: Callable[[], None]) -> RunResult:
    from launcher.runs.rundir import RunRecord, plain_config
    from launcher.engine.signals import EXIT_INTERRUPTED, GracefulStop, pass_on_late

    record = RunRecord(run_dir, cfg.seed, overrides, write=main, config=plain_config(cfg) if main else None)
    record.start()
    trainer = None
    stopper = None
    unsaved_since = None
    try:
        trainer = build_trainer(cfg, run_dir)
        trainer.meta = {"overrides": list(overrides or []), "seed": cfg.seed, "objective": cfg.objective}
        said = warn_if_objective_never_recorded(trainer, str(cfg.objective))  # the objective's warning: given once
        warn_if_last_epochs_unvalidated(trainer)
        unsaved_since = warn_if_resumed_without_checkpointer(trainer)
        if str(cfg.objective).startswith("val/"):  # a misspelt one stops the run at the first validation, on every rank
            trainer.register_hooks({"objective_check": ObjectiveCheck(str(cfg.objective))})
        if main:
            warn_if_a_loss_is_maximized(cfg)
        logger.info("Training %s for %d steps on %s; run dir %s", type(trainer).__name__, trainer.max_iters, trainer.device, run_dir)
        stopper = GracefulStop(trainer).__enter__()
        metrics = trainer.train()
        stopper.trained = True  # a second Ctrl-C from here finds the run over: its record and exit status stand
    except BaseException as err:
        if stopper is not None:
            stopper.__exit__(type(err), err, err.__traceback__)
        status = trainer.status if trainer is not None and trainer.status not in ("created", "running") else "failed"
        if isinstance(err, KeyboardInterrupt):
            status = "aborted"
        elif not isinstance(err, (ConfigError, SystemExit)):
            log_to_files_only(err)
        # a Ctrl-C that aborts ends the process by SIGINT (130, as a shell reports it)
        code = 2 if isinstance(err, ConfigError) else 130 if isinstance(err, KeyboardInterrupt) else 1
        trained = trainer is not None and trainer.started_at is not None and trainer.iter != trainer.started_at
        if trained:
            warn_if_nothing_saved(trainer, unsaved_since)  # a failed run's rerun goes back there too
        try:
            if trained or not record.keep_earlier():  # one that trained nothing keeps a finished run's record
                text = str(err) or ("stopped by Ctrl-C" if isinstance(err, KeyboardInterrupt) else "")  # as a DDP run's
                record.finish(status, code, _metrics_of_a_failed_run(trainer),
                              error=f"{type(err).__name__}: {text}" if text else type(err).__name__)
        except OSError as unrecorded:  # a full disk refuses the record too: the error is the run's, not this one
            logger.warning("Could not record how the run ended in %s (%s: %s); its status there is stale",
                           record.path, type(unrecorded).__name__, unrecorded.strerror or unrecorded)
        raise
    exit_code = EXIT_INTERRUPTED if trainer.status == "interrupted" else 0
    try:  # a signal until the record is written finds the run trained: GracefulStop holds it, and the record says how it ended
        objective = metrics.get(cfg.objective)
        if objective is None:
            # an interrupted run has not validated yet: its rerun reports; under DDP rank 0 says it, as it said the others
            if trainer.status != "interrupted" and not said and trainer.is_main:
                warn_if_objective_unknown(str(cfg.objective), metrics, "the run's metrics", "The run returns NaN")
            objective = float("nan")
        warn_if_nothing_saved(trainer, unsaved_since)
        record.finish(trainer.status, exit_code, metrics, objective={"name": cfg.objective, "value": objective},
                      stop_reason=trainer.stop_reason if trainer.status != "completed" else None, iter=trainer.iter,
                      resumed_from=str(trainer.resumed_from) if trainer.resumed_from else None)
        if trainer.status == "interrupted" and main:  # said with the handlers still ours: a Ctrl-C changes nothing
            _say_interrupted(trainer, run_dir, stopper.name or trainer.stop_reason)
    finally:
        stopper.__exit__(None, None, None)
    if stopper.received is not None and trainer.status != "interrupted":
        pass_on_late(stopper.received, trainer.status)  # recorded as it ended: to the handler the run's replaced
    if trainer.status == "interrupted":
        before_chain()
        stopper.chain()  # e.g. submitit's handler, which requeues the job: the checkpoint is on disk now
    else:
        logger.info("Finished (%s): %s = %.4f%s", trainer.status, cfg.objective, objective, _measured_when(trainer, cfg.objective))
    return RunResult(objective=float(objective), metrics=metrics, status=trainer.status, run_dir=run_dir,
                     stop_reason=trainer.stop_reason if trainer.status != "completed" else None)


def _say_interrupted(trainer: Any, run_dir: Path, why: Optional[str]) -> None:
    """The last line of an interrupted run (rank 0's: it wrote the checkpoint; the other ranks cannot tell whether
    it is on disk yet): its iteration, exit code and how to resume."""
    from launcher.engine.files import candidates
    from launcher.runs.rundir import same_command
    from launcher.engine.signals import EXIT_INTERRUPTED

    last = trainer.checkpoint_dir / "last"
    saved = last.is_file() and last.read_text().strip() == f"iter_{trainer.iter:07d}.pt"
    older = [] if saved else candidates(trainer.checkpoint_dir)  # one it resumed from, or a hook of one's own saved
    advice = (f"Run {same_command(run_dir)} to resume." if saved else
              f"No checkpoint of it was written (no checkpointer hook): {same_command(run_dir)} resumes from "
              f"{older[0].name}, an older one." if older else
              "No checkpoint was written (no checkpointer hook): a rerun starts over.")
    logger.warning("Interrupted at iteration %d (%s); exit code %d. %s", trainer.iter, why, EXIT_INTERRUPTED, advice)


def _measured_when(trainer: Any, key: str) -> str:
    """`` (validated after epoch 2/3, not at the end)`` for an objective last recorded before the run's last step
    (a workflow whose last epochs have no val phase; a validation period that does not divide the run), else ``""``."""
    if not trainer.storage.has(key):
        return ""
    step = trainer.storage.history(key).latest_iter()  # the 0-based step it was recorded at
    if step >= trainer.iter - 1:
        return ""
    what = "validated" if key.startswith("val/") else "recorded"
    epochs = trainer.epochs_in(step + 1) if trainer.LENGTH_KEY == "max_epochs" else None
    return f" ({what} after epoch {epochs}, not at the end)" if epochs else \
        f" ({what} after {step + 1} of {trainer.iter} steps, not at the end)"


def check_unresolvable(cfg: DictConfig) -> None:
    """A ConfigError naming the key, its value as written and why, for a value that does not resolve
    (``seed=${oc.env:NOPE}``, a ``???`` left unset): found before anything is built, not as a traceback
    from wherever the key is first read. ``${hydra:...}`` is left alone (it resolves only inside Hydra's job)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

    try:
        for top in cfg:  # not Hydra's own node, which a config composed with return_hydra_config holds
            if top == "hydra":
                continue
            node = cfg._get_node(top)
            if OmegaConf.is_config(node):
                OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
            else:
                cfg[top]  # a value: reading it resolves it
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None)
        if not key:
            return  # not about one key: whoever reads the config reports it
        if isinstance(err, MissingMandatoryValue):
            options = _group_options(str(key)) if "." not in str(key) else []
            if options:  # a group left without an option (~model)
                raise ConfigError(f"{key}: no option chosen for this config group (removed with ~{key}?); choose one: "
                                  f"{' or '.join(f'{key}={o}' for o in options)}") from None
            raise ConfigError(f"{key}: no value given (??? in the config); set it, e.g. {key}=<value>") from None
        raw: Any = "???"
        try:
            parent, _, leaf = str(key).rpartition(".")
            node = OmegaConf.select(cfg, parent) if parent else cfg
            raw = node._get_node(leaf)._value()  # type: ignore[union-attr]  # as written, unresolved
        except Exception:  # noqa: BLE001 -- the message goes without it
            pass
        if isinstance(raw, str) and "${hydra:" in raw:
            return
        reason = str(getattr(err, "msg", "") or err).splitlines()[0]
        reason = reason.replace("KeyError raised while resolving interpolation: ", "").strip('"')
        raise ConfigError(f"{key}={raw}: {_not_a_container(cfg, str(key), raw, reason) or reason}") from None


def _not_a_container(cfg: DictConfig, key: str, raw: Any, reason: str) -> Optional[str]:
    """For an interpolation through a key that holds a value where it should hold settings (``data.train=abc``
    under ``data.val.size=${..train.size}``): that key and its value, not OmegaConf's words about a node."""
    import re

    from omegaconf import OmegaConf

    node = re.search(r"node `([^`]+)` is not a container", reason)
    ref = re.fullmatch(r"\$\{(\.*)([\w.]+)\}", raw) if isinstance(raw, str) else None
    if node is None or ref is None:
        return None
    dots, path = len(ref.group(1)), ref.group(2).split(".")
    base = key.split(".")[:-1]
    base = base[:len(base) - (dots - 1)] if dots else []
    # the node OmegaConf names: the first segments of the interpolation's path (train, or data.train for ${data.train.x})
    upto = next((k for k in range(1, len(path)) if ".".join(path[:k]) == node.group(1) or
                 ".".join(path[:k]).endswith("." + node.group(1))), None)
    if upto is None:
        return None
    where = ".".join(base + path[:upto])
    value = OmegaConf.select(cfg, where, default=None, throw_on_resolution_failure=False)
    value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    return f"{where} is {'null' if value is None else repr(value)}, which holds no {'.'.join(path[upto:])}: {where} takes a group of settings"


def _metrics_of_a_failed_run(trainer: Any) -> Dict[str, Any]:
    """The last metrics of a run that failed, for its record; none where reading them fails too (a metric a hook put
    wrong): the record still says how the run ended, not ``running`` for good."""
    if trainer is None:
        return {}
    try:
        return trainer.final_metrics(sync=False)
    except Exception as err:  # noqa: BLE001 -- the run's own error is the one to report
        logger.error("The run's last metrics could not be read for run.json: %s: %s", type(err).__name__, err)
        return {}


def log_to_files_only(err: BaseException) -> None:
    """The error that ends a run, with its traceback, in the run's log files (``train.log``): the
    console gets it from Hydra's report, but a log read later (a SLURM job's) should say how the run ended."""
    record = logger.makeRecord(logger.name, logging.ERROR, __file__, 0, "Run failed: %s: %s", (type(err).__name__, err),
                               (type(err), err, err.__traceback__))
    for handler in logging.getLogger().handlers + logger.handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def warn_if_resumed_without_checkpointer(trainer: Any) -> Optional[int]:
    """A rerun of a run dir with checkpoints, without the checkpointer hook (``~hooks.checkpointer``): it resumes,
    saves nothing, and leaves ``checkpoints/`` (``final.pt`` too) at the point it resumed from while ``run.json``
    records its end; a later rerun goes back there. Say so before training; where a hook of the user's own may
    save them, :func:`warn_if_nothing_saved` asks after training: returns the time (ns) to ask from, else None."""
    import time

    from launcher.engine.files import candidates

    if not trainer.is_main or trainer.resume != "auto" or any(h.saves_checkpoints for h in trainer.hooks):
        return None
    if candidates(trainer.checkpoint_dir):
        if any(type(h).__module__.partition(".")[0] != "launcher" for h in trainer.hooks):
            return time.time_ns()  # one of the user's own hooks may be their checkpointer
        logger.warning("This run resumes from its checkpoints in %s but has no checkpointer hook (hooks.checkpointer): it "
                       "saves none, so a stop loses what it trains, and they (final.pt too) will not hold the model it "
                       "ends with. Keep hooks.checkpointer (drop ~hooks.checkpointer) to save them", trainer.checkpoint_dir)
    return None


def warn_if_nothing_saved(trainer: Any, since: Optional[int]) -> None:
    """After training from :func:`warn_if_resumed_without_checkpointer`'s ``since``: no hook (of the user's own)
    wrote a checkpoint while the run trained on from its checkpoints."""
    from launcher.engine.files import candidates

    if since is None or trainer.started_at is None or trainer.iter == trainer.started_at or trainer.status == "interrupted":
        return  # an interrupted run's last line says what a rerun resumes from
    newest = candidates(trainer.checkpoint_dir)
    if not newest or max(p.stat().st_mtime_ns for p in newest) < since:
        finished = trainer.status in ("completed", "stopped")
        logger.warning("This run resumed from its checkpoints in %s and trained on to iteration %d, but no hook saved a "
                       "checkpoint there (it has no checkpointer hook, hooks.checkpointer): they (final.pt too) hold "
                       "iteration %d's model, not the one it %s, and %s", trainer.checkpoint_dir, trainer.iter,
                       trainer.started_at, "ended with" if finished else "reached",
                       "a longer rerun trains on from there" if finished else "a rerun goes on from there")


def _run_spawned(cfg: DictConfig, run_dir: Path, overrides: Optional[List[str]], devices: int, before: Any = None) -> RunResult:
    """``trainer.devices=N``: train in N worker processes on this machine (DDP), rank 0 recording the run.
    ``before`` (:class:`~launcher.runs.rundir.ConfigFilesBefore`): the record found, which a failure that trained
    nothing leaves as rank 0 kept it."""
    import json
    import signal
    import time

    from launcher.engine import distributed
    from launcher.runs.rundir import for_workers, mark_failed
    from launcher.engine.signals import chain_to, pass_on_late

    try:
        distributed.timeout_s()  # the environment's setting, said once here rather than by each worker
    except distributed.DistributedError as err:
        raise ConfigError(str(err)) from None
    logger.info("Starting %d worker processes (trainer.devices=%d); their logs: %s/train.log (rank 0), "
                "train_rank<N>.log (others)", devices, devices, run_dir)
    config = for_workers(cfg)

    def mark_aborted() -> None:
        if before is None or not before.record_kept():
            mark_failed(run_dir, "KeyboardInterrupt: stopped by Ctrl-C", status="aborted", exit_code=130)

    started = time.time()
    try:
        root = logging.getLogger()  # the console's level here: the CLI's INFO; from Python, warnings unless configured
        console_level = root.getEffectiveLevel() if root.handlers else logging.WARNING
        received, previous = distributed.spawn(_spawned_worker, (config, str(run_dir), list(overrides or []), console_level),
                                               devices)
    except KeyboardInterrupt:
        if not _finished_since(run_dir, started):
            mark_aborted()
            raise
        # a Ctrl-C while the workers shut down, after rank 0 had recorded the run's end (a single process takes it so)
        logger.warning("Ctrl-C after the run had finished: %s", "its record and final checkpoint stand" if
                       (run_dir / "checkpoints" / "final.pt").is_file() else "its record stands")
        received, previous = None, None
    except Exception as err:  # torch.multiprocessing's ProcessRaisedException / ProcessExitedException
        received, previous = _after_worker_failure(err, run_dir, before is not None and before.record_kept()), None
    try:
        data = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError) as err:
        raise RuntimeError(f"the workers ended but {run_dir / 'run.json'} cannot be read: {err}") from err
    status = data.get("status", "failed")
    if received == signal.SIGINT and status in ("aborted", "running"):  # torch's workers exit 0 on KeyboardInterrupt
        mark_aborted()
        raise KeyboardInterrupt
    metrics = data.get("metrics", {})
    value = metrics.get(cfg.objective, float("nan"))
    if status == "interrupted" and callable(previous) and previous is not signal.default_int_handler:
        chain_to(previous, received)  # e.g. submitit's handler, which requeues the job: rank 0's checkpoint is on disk
    elif received is not None and received != signal.SIGINT and status in ("completed", "stopped"):
        pass_on_late(received, status)  # it came as the run ended, once rank 0 had recorded it
    return RunResult(objective=float(value), metrics=metrics, status=status, run_dir=run_dir,
                     stop_reason=data.get("stop_reason"))


def nothing_to_train_on(run_dir: Path, done: Mapping[str, Any], changes: Sequence[Tuple[str, Any, Any]]) -> str:
    """The refusal of a finished run (its record ``done``) lengthened by ``changes`` whose dir holds no checkpoint."""
    from launcher.runs.rundir import LENGTH, describe_changes, new_dir_advice

    checkpoints = run_dir / "checkpoints"
    never = _saved_none(run_dir)
    return (f"{describe_changes([c for c in changes if c[0] in LENGTH])}: this run finished ({done['status']} at "
            f"iteration {done.get('iter')}), and "
            f"{'saved no checkpoint (it ran without a checkpointer hook)' if never else f'{checkpoints} holds no checkpoint'} "
            f"to train it on from (its results stay in run.json); train it again from the start with trainer.resume=false "
            f"(which rewrites its metrics.jsonl and run.json), or choose {new_dir_advice()}")


def _saved_none(run_dir: Path) -> bool:
    """Whether ``run_dir``'s run never saved a checkpoint (hooks=none): no checkpoints dir, and no checkpointer hook."""
    return not (run_dir / "checkpoints").exists() and not _had_checkpointer(run_dir)


def _had_checkpointer(run_dir: Path) -> bool:
    """Whether the config ``run_dir``'s run was last started with has a checkpointer hook (True where unknown)."""
    from launcher.runs.rundir import recorded_config

    from hydra.utils import get_class

    hooks = (recorded_config(run_dir) or {}).get("hooks")
    if not isinstance(hooks, dict):
        return True
    for hook in hooks.values():
        try:
            if isinstance(hook, dict) and getattr(get_class(str(hook.get("_target_"))), "saves_checkpoints", False):
                return True
        except Exception:  # noqa: BLE001 -- a hook's class that no longer imports: it may have been one
            return True
    return False


def _finished_since(run_dir: Path, since: float) -> bool:
    """Whether ``run_dir``'s record says its run finished, written at or after ``since`` (this attempt's end)."""
    from launcher.runs.rundir import finished_result

    try:
        return finished_result(run_dir) is not None and (run_dir / "run.json").stat().st_mtime >= since
    except OSError:
        return False


def _after_worker_failure(err: Exception, run_dir: Path, kept: bool = False) -> int:
    """Raise what a worker's failure means for the run: a ConfigError (one line, exit 2, as in one
    process) or :class:`WorkerFailed` naming the rank, its error and its log, recorded in ``run.json``
    unless rank 0 ``kept`` the earlier record (an attempt that trained nothing). But when a signal passed
    on to the workers ended one after rank 0 had recorded the run's end, the run stands: say so and
    return that signal."""
    import re

    from launcher.engine import distributed
    from launcher.runs.rundir import finished_result, mark_failed

    message = distributed.describe_worker_failure(err)
    forwarded = getattr(err, "forwarded", None)
    if forwarded and finished_result(run_dir) is not None:
        stands = "its record and final checkpoint stand" if (run_dir / "checkpoints" / "final.pt").is_file() else "its record stands"
        logger.warning("%s, after the run had finished: %s", message, stands)
        return int(forwarded[0])
    config_error = re.match(r"rank \d+ failed: (?:launcher\.errors\.)?ConfigError: (.*)", message)
    if config_error:  # the config, as a single process would report it
        if not kept:
            mark_failed(run_dir, f"ConfigError: {config_error.group(1)}", exit_code=2)
        raise ConfigError(config_error.group(1)) from None
    rank = getattr(err, "error_index", None)
    log = run_dir / ("train.log" if not rank else f"train_rank{rank}.log")
    if not kept:
        mark_failed(run_dir, message)
    raise distributed.WorkerFailed(f"{message} (log: {log})") from None


def _spawned_worker(rank: int, world_size: int, store: str, parent: int, ready: Any, config: dict, run_dir: str,
                    overrides: List[str], console_level: int = logging.INFO) -> None:
    """One worker of ``trainer.devices=N``: joins the process group and trains its share."""
    import signal

    from omegaconf import OmegaConf

    from launcher.engine import distributed
    from launcher.engine.signals import SIGNALS

    try:
        distributed.worker_started(rank, parent, ready)
        distributed.worker_environment(rank, world_size, store)
        distributed.worker_logging(rank, Path(run_dir), console_level)
        register_configs()
        run(OmegaConf.create(config), run_dir, overrides, checked=True)  # the parent checked the run dir
    except KeyboardInterrupt:  # torch's worker wrapper would exit 0 on it, and the parent wait for its peers
        raise SystemExit(130) from None
    finally:  # a stop signal or Ctrl-C from here is the parent's late copy: ignored (handlers are gone as Python shuts
        for sig in SIGNALS:  # down; a KeyboardInterrupt, Ctrl-C's, waiting for threads was a traceback)
            signal.signal(sig, signal.SIG_IGN)
