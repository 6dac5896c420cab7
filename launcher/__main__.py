"""``python -m launcher [overrides]``: compose the config with Hydra, train, return the objective."""
from __future__ import annotations

import logging
import os
import re
import sys
from typing import List, Optional

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

import launcher
from launcher.engine import distributed
from launcher.runs.build import ConfigError
from launcher.engine.distributed import WorkerFailed
from launcher.engine.errors import REPORTED_JOB, ClusterUnreachable, RunDirBusy, RunError, output_dir_refused
from launcher.engine.signals import EXIT_INTERRUPTED

logger = logging.getLogger("launcher")


@hydra.main(config_path=launcher.runs.config.CONFIG_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
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
    except RunDirBusy as err:  # train.log is the other run's: the console alone says it
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or hc.mode == RunMode.MULTIRUN:
            raise
        print(f"Config error: {err}", file=sys.stderr, flush=True)
        sys.exit(2)
    except ConfigError as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or hc.mode == RunMode.MULTIRUN:
            traceback_to_log_files(err, f"Config error: {err}")
            raise  # in a sweep, Hydra records this job as failed and the other jobs keep their results
        if distributed.from_environment() is not None:  # under torchrun: each rank's line tagged with its rank
            logger.error("Config error: %s", err)
            traceback_to_log_files(err, "Its traceback:")
        else:  # in the form of composition's errors, on stderr; with its traceback in train.log
            traceback_to_log_files(err, f"Config error: {err}")
            print(f"Config error: {err}", file=sys.stderr, flush=True)
        sys.exit(2)
    except WorkerFailed as err:  # its traceback is in the worker's log; this process's says nothing more
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or hc.mode == RunMode.MULTIRUN:
            raise
        logger.error("Run failed: %s", err)
        sys.exit(1)
    except RunError as err:  # the whole story is its message (a NaN loss...): the launcher's frames go to train.log
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or hc.mode == RunMode.MULTIRUN:
            raise
        logs = [h.baseFilename for h in logging.getLogger().handlers + logger.handlers if isinstance(h, logging.FileHandler)]
        where = f" (traceback in {logs[0]})" if logs else ""  # under torchrun a rank's own train_rank<N>.log
        print(f"Run failed: {type(err).__name__}: {err}{where}", file=sys.stderr, flush=True)
        sys.exit(1)
    return result.objective


def exit_interrupted() -> None:
    """Exit 75 for a run recorded interrupted (its checkpoint saved): a second Ctrl-C or SIGTERM while Python
    shuts down changes nothing, and the exit status stays the one its ``run.json`` gives, which says "resume"."""
    import signal

    from launcher.engine.signals import SIGNALS

    for sig in SIGNALS:
        signal.signal(sig, signal.SIG_IGN)
    sys.exit(EXIT_INTERRUPTED)


def recorded_interrupted(run_dir: str) -> bool:
    """Whether ``run_dir``'s ``run.json`` says this process's run ended interrupted (a Ctrl-C came after it was written)."""
    import json

    try:
        with open(os.path.join(run_dir, "run.json")) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("status") == "interrupted" and record.get("pid") == os.getpid() \
        and record.get("exit_code") == EXIT_INTERRUPTED


def traceback_to_log_files(err: BaseException, message: str) -> None:
    """``message`` and ``err``'s traceback into the run's log file (``train.log``) only: the console keeps its one line."""
    record = logger.makeRecord(logger.name, logging.ERROR, __file__, 0, message, (),
                               (type(err), err, err.__traceback__))
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def save_job_config(cfg: DictConfig) -> None:
    """``.hydra/config.yaml``, ``hydra.yaml`` and ``overrides.yaml`` in the run dir, as Hydra writes them.

    Hydra would write them before the job starts (``hydra.output_subdir``, null in our config); written
    here, once the run dir's earlier run is known to fit this config, they always describe the
    config its checkpoints were made with: a rerun that is refused or trains nothing changes none.
    """
    from launcher.engine import distributed
    from launcher.runs.rundir import save_config_files

    env = distributed.from_environment()
    if env is not None and not env.is_main:
        return
    hc = HydraConfig.instance().cfg
    save_config_files(hc.hydra.runtime.output_dir,
                      {"config.yaml": cfg, "hydra.yaml": hc, "overrides.yaml": hc.hydra.overrides.task})


def explain_config_errors() -> None:
    """Errors in composing the config (a misspelled key or option, a value the schema refuses, a
    bad override) in one line naming the key, the value and what is accepted, exit status 2 as for
    any config error (Hydra prints several lines and exits 1); and a sweep job's ConfigError in its
    one line rather than a traceback. ``HYDRA_FULL_ERROR=1`` gets Hydra's full report instead."""
    from hydra._internal import utils as hydra_utils
    from hydra.errors import (CompactHydraException, ConfigCompositionException, InstantiationException, MissingConfigException,
                              OverrideParseException, SearchPathException)

    import yaml

    from launcher.runs.build import composition_message, group_list_message, group_value_message

    report = getattr(hydra_utils, "run_and_report", None)
    if report is None:  # a Hydra without it (a private function): its own messages, unchanged
        return

    def run_and_report(func):  # type: ignore[no-untyped-def]
        def composed():  # type: ignore[no-untyped-def]
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                return func()  # the whole traceback, as asked
            try:
                return explained()
            except Exception as err:
                if getattr(err, REPORTED_JOB, None) is None:
                    raise
                # a sweep job's failure, logged when the job ended; the sweep's report (at exit) lists every failed job
                sys.exit(1)

        def explained():  # type: ignore[no-untyped-def]
            try:
                return func()
            except InstantiationException as err:  # Hydra building its launcher, whose options we check
                if not isinstance(err.__cause__, ConfigError):
                    raise
                print(f"Config error: {err.__cause__}", file=sys.stderr)
                sys.exit(2)
            except SearchPathException as err:  # --config-dir that does not exist
                print(f"Config error: {err}; --config-dir takes a directory of config groups (model/, ...)", file=sys.stderr)
                sys.exit(2)
            except yaml.YAMLError as err:  # a config file that is not YAML: its place, not the parser's traceback
                if not read_by_hydra(err):
                    raise  # a YAML error of the run's own code (a hook, a dataset): reported as any error of the run
                print(f"Config error: {yaml_message(err)}", file=sys.stderr)
                sys.exit(2)
            except (MissingConfigException, ConfigCompositionException, OverrideParseException, ValueError) as err:
                unwritable = log_file_refused(err)
                if unwritable is not None:  # Hydra opening the run's log file in a dir that refuses it
                    print(f"Config error: cannot write the run's log file {unwritable.filename}: {unwritable.strerror}; "
                          f"hydra.run.dir (hydra.sweep.dir with -m) must name a directory this user can write to",
                          file=sys.stderr)
                    sys.exit(2)
                if isinstance(err, ConfigError):  # a sweep job's: the report at exit names it (else its one line here)
                    if getattr(err, REPORTED_JOB, None) is not None:
                        raise
                    # the launcher's own (an option submitit does not know, sbatch refusing the jobs): no job ran,
                    # so no sweep report (it would list every job pending); a rerun with the option mended runs them
                    no_sweep_report()
                    print(f"Config error: {err}", file=sys.stderr)
                    sys.exit(2)
                if isinstance(err, ValueError) and not group_value_message(err):
                    raise  # not one of composition's: an error of the run, reported as Hydra reports it
                try:
                    message = composition_message(err, sys.argv[1:])
                except Exception:  # never hide the error behind a failure to explain it
                    raise err from None
                print(f"Config error: {message}", file=sys.stderr)
                sys.exit(2)
            except TypeError as err:  # a config group given a list of what are no option names (hooks=[1,2])
                listed = group_list_message(err, sys.argv[1:])
                if listed is None:
                    raise
                print(f"Config error: {listed}", file=sys.stderr)
                sys.exit(2)
            except ClusterUnreachable as err:  # no job could be submitted, the config being right: not a config error
                no_sweep_report()
                print(f"Error: {err}", file=sys.stderr)
                sys.exit(1)
            except OSError as err:  # after MissingConfigException, an IOError too
                if not made_by_hydra(err):
                    raise
                print(f"Config error: {output_dir_refused(err)}", file=sys.stderr)
                sys.exit(2)
            except CompactHydraException as err:  # last: composition's errors are CompactHydraExceptions too
                plugins = sys.modules.get("launcher.sweep.plugins")  # imported where a sweep job was interrupted: not at start-up
                if plugins is None or not isinstance(err, plugins.JobInterrupted):
                    raise
                print(str(err), file=sys.stderr)  # a job stopped on a signal sent to it alone: resumable, not failed
                sys.exit(err.exit_code())

        return report(composed)

    def no_sweep_report() -> None:  # a sweep that launched no job has no report (it would list every job pending)
        callback = sys.modules.get("launcher.sweep.callback")
        if callback is not None:
            import atexit

            atexit.unregister(callback.SweepSummary._report)

    hydra_utils.run_and_report = run_and_report


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
    """The one-line error for a Hydra option (``-m``, ``--config-dir``...) between overrides, which Hydra's
    parser reports as a usage screen blaming the overrides after it; with the command in the order it takes.
    None whenever Hydra's parser takes ``argv`` (or fails for another reason, which it then reports)."""
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
    ``-hooks.console``: ``-h`` with a value), which Hydra's parser answers with its usage screen; None when argparse,
    as Hydra runs it (abbreviations, ``-cn=config``, ``-cjob``), takes every one."""
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
    """The one-line error for an override with nothing before its ``=`` (``=3``, ``+=x``), which Hydra takes as the
    primary config's group or the defaults list's and answers with its internal option names; else None."""
    for token in argv:
        sign, equals, value = re.match(r"([+~]*)(=?)(.*)", token, re.S).groups()  # type: ignore[union-attr]
        if equals and not token.startswith("-"):
            return (f"Config error: {token}: no key before '='; an override is key=value (e.g. optimizer.lr={value or '0.1'}), "
                    f"group=option (optimizer=adamw), +key=value to add a key, ~key to delete one")
    return None


def searchpath_not_found(argv: List[str]) -> Optional[str]:
    """The one-line refusal of a ``hydra.searchpath=[...]`` entry that is no config dir (a directory that does not
    exist, a package that does not import), which Hydra skips without a word, as ``--config-dir`` is refused; else None."""
    from launcher.runs.build import searchpath_override

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


if __name__ == "__main__":
    misplaced = unknown_option(sys.argv[1:]) or options_after_overrides(sys.argv[1:]) or keyless_override(sys.argv[1:]) \
        or searchpath_not_found(sys.argv[1:])
    if misplaced:
        print(misplaced, file=sys.stderr)
        sys.exit(2)
    explain_config_errors()
    from launcher import sweep
    if {"-m", "--multirun"} & set(sys.argv[1:]) or "hydra.mode=MULTIRUN" in sys.argv[1:]:
        import json

        sweep.register()  # hydra/sweeper=planned, hydra/launcher=local and slurm_detached
        from launcher.sweep.local import start_fork_server_early

        start_fork_server_early(sys.argv[1:])  # its imports overlap Hydra's composing
        # the sweep's command, for the run.json of each job that submitit starts (their own is its bootstrap)
        os.environ["LAUNCHER_SWEEP_COMMAND"] = json.dumps([sys.executable, "-m", "launcher", *sys.argv[1:]])
    else:  # the default sweeper, also for hydra.mode: MULTIRUN set in a config file (the launchers: 0.04 s more)
        sweep.register(["launcher.sweep.sweeper"])
    try:
        main()
    except KeyboardInterrupt:  # a Ctrl-C that aborts (while the run starts; a second one): one line, no traceback
        if os.environ.get("HYDRA_FULL_ERROR") != "1":
            def one_line(kind, value, tb):  # type: ignore[no-untyped-def]
                if issubclass(kind, KeyboardInterrupt):
                    print("Aborted by Ctrl-C (SIGINT).", file=sys.stderr, flush=True)
                else:
                    sys.__excepthook__(kind, value, tb)

            sys.excepthook = one_line
        # Unhandled, Python runs the exit handlers (a sweep's summary and report), then ends by SIGINT, as a
        # shell's loop expects of a Ctrl-C
        raise
