"""``python -m launcher [overrides]``: compose the config with Hydra, train, return the objective."""
from __future__ import annotations

import logging
import os
import re
import sys
from pathlib import Path
from typing import List, Optional, Tuple

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

import launcher
from launcher.engine import distributed
from launcher.engine.distributed import WorkerFailed
from launcher.engine.errors import REPORTED_JOB, ClusterUnreachable, ConfigError, RunDirBusy, RunError, output_dir_refused
from launcher.engine.signals import EXIT_INTERRUPTED, SIGNALS
from launcher.runs.build import composition_message, group_list_message, group_value_message, searchpath_override
from launcher.runs.config import CONFIG_DIR
from launcher.runs.run import log_to_files_only
from launcher.runs.rundir import read_record, save_config_files

logger = logging.getLogger("launcher")


@hydra.main(config_path=CONFIG_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
    """One run in Hydra's job dir; returns its objective. Errors end it in one line with their exit status."""
    hc = HydraConfig.get()
    try:
        overrides = OmegaConf.to_container(hc.overrides.task, resolve=False)  # as typed: "x=${y}" stays text
        result = launcher.run(cfg, hc.runtime.output_dir, overrides, on_start=lambda: save_job_config(cfg))
        if result.status == "interrupted":
            exit_interrupted()
    except KeyboardInterrupt:  # a second Ctrl-C after the run recorded itself interrupted: the record stands
        if not recorded_interrupted(hc.runtime.output_dir):
            raise
        exit_interrupted()
    except (ConfigError, WorkerFailed, RunError) as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or hc.mode == RunMode.MULTIRUN:
            if isinstance(err, ConfigError) and not isinstance(err, RunDirBusy):
                log_to_files_only(err, f"Config error: {err}")
            raise  # in a sweep, Hydra records this job as failed and the other jobs keep their results
        sys.exit(report_run_error(err))
    return result.objective


def report_run_error(err: Exception) -> int:
    """The error that ended the run in one line on the console, its traceback in the run's log; its exit status."""
    if isinstance(err, RunDirBusy):  # train.log is the other run's: the console alone says it
        print(f"Config error: {err}", file=sys.stderr, flush=True)
        return 2
    if isinstance(err, ConfigError):
        if distributed.from_environment() is not None:  # under torchrun: each rank's line tagged with its rank
            logger.error("Config error: %s", err)
            log_to_files_only(err, "Its traceback:")
        else:
            log_to_files_only(err, f"Config error: {err}")
            print(f"Config error: {err}", file=sys.stderr, flush=True)
        return 2
    if isinstance(err, WorkerFailed):  # its traceback is in the worker's log
        logger.error("Run failed: %s", err)
        return 1
    logs = [h.baseFilename for h in logging.getLogger().handlers + logger.handlers if isinstance(h, logging.FileHandler)]
    where = f" (traceback in {logs[0]})" if logs else ""  # under torchrun a rank's own train_rank<N>.log
    print(f"Run failed: {type(err).__name__}: {err}{where}", file=sys.stderr, flush=True)
    return 1


def exit_interrupted() -> None:
    """Exit 75 ("resume") for a run recorded interrupted; a signal while Python shuts down changes nothing."""
    import signal

    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    sys.exit(EXIT_INTERRUPTED)


def recorded_interrupted(run_dir: str) -> bool:
    """Whether ``run_dir``'s ``run.json`` says this process's run ended interrupted."""
    record = read_record(Path(run_dir))
    return record.get("status") == "interrupted" and record.get("pid") == os.getpid() \
        and record.get("exit_code") == EXIT_INTERRUPTED


def save_job_config(cfg: DictConfig) -> None:
    """``.hydra/config.yaml``, ``hydra.yaml`` and ``overrides.yaml`` in the run dir, as Hydra writes them, but once
    the run dir's record fits this config (``hydra.output_subdir`` is null): a refused rerun changes none."""
    env = distributed.from_environment()
    if env is not None and not env.is_main:
        return
    hc = HydraConfig.instance().cfg
    save_config_files(hc.hydra.runtime.output_dir,
                      {"config.yaml": cfg, "hydra.yaml": hc, "overrides.yaml": hc.hydra.overrides.task})


def explain_config_errors() -> None:
    """Hydra's report of an error before the run (composing the config, making the run dir) replaced by one line
    naming the key, the value and what is accepted (exit 2); ``HYDRA_FULL_ERROR=1`` keeps Hydra's full report."""
    from hydra._internal import utils as hydra_utils

    report = getattr(hydra_utils, "run_and_report", None)
    if report is None:  # a Hydra without it (a private function): its own messages
        return

    def run_and_report(func):  # type: ignore[no-untyped-def]
        def explained():  # type: ignore[no-untyped-def]
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                return func()
            try:
                return func()
            except Exception as err:
                said = one_line(err)
                if said is None and getattr(err, REPORTED_JOB, None) is not None:
                    sys.exit(1)  # a sweep job's failure, logged as it ended; the sweep's report lists every one
                if said is None:
                    raise
                print(said[0], file=sys.stderr, flush=True)
                sys.exit(said[1])

        return report(explained)

    hydra_utils.run_and_report = run_and_report


def one_line(err: Exception) -> Optional[Tuple[str, int]]:
    """An error Hydra would report before the run, as one line and its exit status; None: Hydra's own report."""
    import yaml
    from hydra.errors import (CompactHydraException, ConfigCompositionException, InstantiationException,
                              MissingConfigException, OverrideParseException, SearchPathException)

    if isinstance(err, InstantiationException):  # Hydra building its launcher, whose options we check
        return (f"Config error: {err.__cause__}", 2) if isinstance(err.__cause__, ConfigError) else None
    if isinstance(err, SearchPathException):  # --config-dir that does not exist
        return f"Config error: {err}; --config-dir takes a directory of config groups (model/, ...)", 2
    if isinstance(err, yaml.YAMLError):  # a config file that is not YAML (not one the run's own code reads)
        return (f"Config error: {yaml_message(err)}", 2) if read_by_hydra(err) else None
    if isinstance(err, (MissingConfigException, ConfigCompositionException, OverrideParseException, ValueError)):
        return composition_line(err)
    if isinstance(err, TypeError):  # a config group given a list of what are no option names (hooks=[1,2])
        listed = group_list_message(err, sys.argv[1:])
        return (f"Config error: {listed}", 2) if listed else None
    if isinstance(err, ClusterUnreachable):  # no job could be submitted, the config being right
        no_sweep_report()
        return f"Error: {err}", 1
    if isinstance(err, OSError):
        return (f"Config error: {output_dir_refused(err)}", 2) if made_by_hydra(err) else None
    plugins = sys.modules.get("launcher.sweep.plugins")  # imported where a sweep job was interrupted
    if isinstance(err, CompactHydraException) and plugins is not None and isinstance(err, plugins.JobInterrupted):
        return str(err), err.exit_code()  # a job stopped on a signal sent to it alone: resumable, not failed
    return None


def composition_line(err: Exception) -> Optional[Tuple[str, int]]:
    """A composition error (or the launcher's own ConfigError at start-up) in one line; None for another error."""
    unwritable = log_file_refused(err)
    if unwritable is not None:  # Hydra opening the run's log file in a dir that refuses it
        return (f"Config error: cannot write the run's log file {unwritable.filename}: {unwritable.strerror}; "
                f"hydra.run.dir (hydra.sweep.dir with -m) must be writable", 2)
    if isinstance(err, ConfigError):
        if getattr(err, REPORTED_JOB, None) is not None:  # a sweep job's: the report at exit names it
            return None
        no_sweep_report()  # the launcher's own (sbatch refusing the jobs): no job ran
        return f"Config error: {err}", 2
    if isinstance(err, ValueError) and not group_value_message(err):
        return None  # not one of composition's: an error of the run
    try:
        return f"Config error: {composition_message(err, sys.argv[1:])}", 2
    except Exception:  # noqa: BLE001 -- never hide the error behind a failure to explain it
        return None


def no_sweep_report() -> None:
    """A sweep that launched no job has no report (it would list every job pending)."""
    callback = sys.modules.get("launcher.sweep.callback")
    if callback is not None:
        import atexit

        atexit.unregister(callback.SweepSummary._report)


def yaml_message(err: Exception) -> str:
    """A YAML error in one line: the file, line and column, and what the parser expected there."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "a config file"
    what = "; ".join(str(part) for part in (getattr(err, "context", None), getattr(err, "problem", None)) if part)
    return f"{where}: {what or err} (not valid YAML)"


def read_by_hydra(err: Exception) -> bool:
    """Whether ``err`` comes from Hydra reading a config file (its config sources), not from the run."""
    import traceback

    return any(f"{os.sep}hydra{os.sep}" in f.filename and "config_source" in f.filename
               for f in traceback.extract_tb(err.__traceback__))


def log_file_refused(err: BaseException) -> Optional[OSError]:
    """The OSError under logging's "Unable to configure handler 'file'" (Hydra setting up ``train.log``), or None."""
    if not (isinstance(err, ValueError) and str(err).startswith("Unable to configure handler")):
        return None
    cause = err.__cause__ or err.__context__
    return cause if isinstance(cause, OSError) and cause.filename else None


def made_by_hydra(err: OSError) -> bool:
    """Whether ``err`` comes from Hydra making a run or sweep dir (``mkdir`` called from Hydra's code)."""
    import traceback

    frames = traceback.extract_tb(err.__traceback__)
    while len(frames) > 1 and frames[-1].name == "mkdir" and frames[-2].name == "mkdir":  # pathlib's, making parents
        frames.pop()
    return bool(frames) and frames[-1].name == "mkdir" and any(f"{os.sep}hydra{os.sep}" in f.filename for f in frames[-3:-1])


def options_after_overrides(argv: List[str]) -> Optional[str]:
    """The one-line error for a Hydra option (``-m``, ``--config-dir``...) after an override (Hydra's parser shows
    its usage screen), with the command in the order it takes; None where Hydra's parser takes ``argv``."""
    import argparse
    import contextlib
    import io

    if {"-h", "--help", "--version", "--hydra-help"} & set(argv):
        return None  # options that print and exit as they are parsed
    try:
        from hydra._internal.utils import get_args_parser

        parser = get_args_parser()
        with contextlib.redirect_stderr(io.StringIO()):
            _, extra = parser.parse_known_args(argv)
    except (Exception, SystemExit):  # noqa: BLE001 -- a Hydra without it, or another error: Hydra's own report
        return None
    if not extra:
        return None
    actions = {opt: action for action in parser._actions for opt in action.option_strings}
    options: List[str] = []
    overrides: List[str] = []
    late = ""
    i = 0
    while i < len(argv):
        token = argv[i]
        action = actions.get(token.partition("=")[0] if token.startswith("--") else token)
        if not token.startswith("-") or action is None:
            overrides.append(token)
        else:
            late = late or (token if overrides else "")
            following = argv[i + 1] if i + 1 < len(argv) and "=" not in token else None
            takes_value = following is not None and (action.nargs is None or (
                action.nargs == argparse.OPTIONAL and action.choices is not None and following in action.choices))
            options.extend([token, following] if takes_value else [token])  # type: ignore[list-item]
            i += takes_value
        i += 1
    if not late:
        return None
    import shlex

    return (f"Config error: {late} comes after the override {overrides[0]}; Hydra reads its options (-m, --config-dir, "
            f"--cfg, ...) before the overrides: python -m launcher {shlex.join(options + overrides)}")


def unknown_option(argv: List[str]) -> Optional[str]:
    """The one-line error for a token with a leading ``-`` that none of Hydra's options takes (``--config_dir``,
    ``-hooks.console``); None when Hydra's argparse takes every one."""
    import difflib

    try:
        from hydra._internal.utils import get_args_parser

        parser = get_args_parser()
        options = [o for action in parser._actions for o in action.option_strings if o.startswith("--")]
    except Exception:  # noqa: BLE001 -- a Hydra without it: its own report
        return None
    takes_value = False
    for token in argv:
        if token == "--":  # positional from here on: Hydra's parser says what it makes of them
            return None
        if takes_value:  # the value of the option before it (--config-dir conf)
            takes_value = False
            continue
        try:
            parsed = parser._parse_optional(token)
        except (Exception, SystemExit):  # noqa: BLE001 -- an ambiguous abbreviation: argparse's own message
            return None
        if parsed is None:  # not an option: an override, or a value such as -1
            continue
        action, name, explicit = parsed[:3]
        if action is not None and not (explicit is not None and action.nargs == 0):
            takes_value = explicit is None and action.nargs is None
            continue
        bare = token.lstrip("-")
        if "=" in bare or "." in bare or not token.startswith("--"):  # an override written with a leading dash
            key, _, value = bare.partition("=")
            return (f"Config error: {token}: not an option, and an override takes no leading '-': write {key}={value or '...'} "
                    f"to set {key}, or ~{key} to delete it (options: python -m launcher --help)")
        close = difflib.get_close_matches(token.partition("=")[0], options, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        return f"Config error: {token}: not an option of python -m launcher{hint} (options: python -m launcher --help)"
    return None


def keyless_override(argv: List[str]) -> Optional[str]:
    """The one-line error for an override with nothing before its ``=`` (``=3``, ``+=x``); else None."""
    for token in argv:
        sign, equals, value = re.match(r"([+~]*)(=?)(.*)", token, re.S).groups()  # type: ignore[union-attr]
        if equals and not token.startswith("-"):
            return (f"Config error: {token}: no key before '='; an override is key=value (e.g. optimizer.lr={value or '0.1'}), "
                    f"group=option (optimizer=adamw), +key=value to add a key, ~key to delete one")
    return None


def searchpath_not_found(argv: List[str]) -> Optional[str]:
    """The one-line refusal of a ``hydra.searchpath=[...]`` entry that is no config dir (Hydra skips it silently)."""
    given = searchpath_override(argv)
    if not given:
        return None
    from hydra._internal.sources_registry import SourcesRegistry
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.plugins import Plugins

    Plugins.instance()  # registers the kinds of config source (file://, pkg://), as Hydra's start does

    try:
        entries = OverridesParser.create().parse_override(given[0]).value()
    except Exception:  # noqa: BLE001 -- not parsed: Hydra's own error names it
        return None
    for entry in entries if isinstance(entries, list) else [entries]:
        entry = str(entry)
        scheme = entry.partition("://")[0] if "://" in entry else "file"
        try:
            found = SourcesRegistry.instance().resolve(scheme)("hydra.searchpath", entry).available()
        except Exception:  # noqa: BLE001 -- an unknown scheme, a package that fails to import
            found = False
        if not found:
            where = entry.partition("://")[2] if "://" in entry else entry
            what = (f"no package {where!r} with an __init__.py can be imported" if scheme == "pkg" else
                    f"{os.path.abspath(where)} is not a directory" if scheme == "file" else
                    f"'{scheme}://' is no kind of source")
            return (f"Config error: hydra.searchpath: {entry}: {what}; each entry is a directory of config groups "
                    f"(file://<dir>, relative to {os.getcwd()}) or a package holding them (pkg://<module>)")
    return None


def check_command_line(argv: List[str]) -> None:
    """Mistakes Hydra's parser answers with a usage screen or its internal words, said in one line (exit 2)."""
    wrong = unknown_option(argv) or options_after_overrides(argv) or keyless_override(argv) or searchpath_not_found(argv)
    if wrong:
        print(wrong, file=sys.stderr)
        sys.exit(2)


def register_plugins(argv: List[str]) -> None:
    """The launcher's Hydra plugins: the sweeper, and for ``-m`` the launchers and the fork server (started early:
    its imports overlap Hydra's composing)."""
    from launcher import sweep

    if not ({"-m", "--multirun"} & set(argv) or "hydra.mode=MULTIRUN" in argv):
        sweep.register(["launcher.sweep.sweeper"])  # also for hydra.mode: MULTIRUN set in a config file
        return
    import json

    from launcher.sweep.local import start_fork_server_early

    sweep.register()
    start_fork_server_early(argv)
    # the sweep's command, for the run.json of each job that submitit starts (their own is its bootstrap)
    os.environ["LAUNCHER_SWEEP_COMMAND"] = json.dumps([sys.executable, "-m", "launcher", *argv])


def ctrl_c_in_one_line() -> None:
    """A Ctrl-C that aborts (while the run starts; a second one) ends in one line, not a traceback."""
    if os.environ.get("HYDRA_FULL_ERROR") == "1":
        return

    def one_line_hook(kind, value, tb):  # type: ignore[no-untyped-def]
        if issubclass(kind, KeyboardInterrupt):
            print("Aborted by Ctrl-C (SIGINT).", file=sys.stderr, flush=True)
        else:
            sys.__excepthook__(kind, value, tb)

    sys.excepthook = one_line_hook


if __name__ == "__main__":
    check_command_line(sys.argv[1:])
    explain_config_errors()
    register_plugins(sys.argv[1:])
    try:
        main()
    except KeyboardInterrupt:
        ctrl_c_in_one_line()
        raise  # unhandled: the exit handlers run (a sweep's summary), then Python ends by SIGINT, as a shell expects
