"""The error a user's bad input ends in: the CLI prints its one-line message and exits 2."""
from __future__ import annotations

import difflib
import os


class ConfigError(ValueError):
    """A config value that cannot be built or used; the message names the key and what is accepted."""


class RunDirBusy(ConfigError):
    """Another run is working in the run dir: printed on stderr only (its ``train.log`` is the other run's)."""


def did_you_mean(value: str, accepted, key: str) -> str:
    """``"; did you mean <key>=<closest>?"`` for the accepted name closest to a misspelt ``value``, else ``""``."""
    close = difflib.get_close_matches(str(value), [str(a) for a in accepted], n=1)
    return f"; did you mean {key}={close[0]}?" if close else ""


def not_a_metric(key: str, name: str, metrics) -> ConfigError:
    """The error for ``key`` naming ``name``, which validation (recording ``metrics``) does not record."""
    return ConfigError(f"{key}: {name!r} is not a validation metric (validation records: "
                       f"{', '.join(sorted(metrics)) or 'none'}){did_you_mean(name, metrics, key)}")


def output_dir_refused(err: OSError) -> str:
    """The config error for a run or sweep dir that cannot be made."""
    where = f" (in {os.getcwd()})" if err.filename and not os.path.isabs(str(err.filename)) else ""
    return (f"cannot make the output dir {err.filename}: {err.strerror}{where}; hydra.run.dir (hydra.sweep.dir and "
            f"hydra.sweep.subdir with -m) must name a directory this user can write to")


def describe(value: object) -> str:
    """A batch or model output in a message's words: a tensor's shape, a dict's keys, a sequence's parts, else its type."""
    import torch

    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {list(value.shape)}"
    if isinstance(value, dict):
        return f"a dict with keys {sorted(map(str, value))}" if value else "an empty dict"
    if isinstance(value, (list, tuple)):
        parts = ", ".join(describe(x) for x in value[:4]) + (", ..." if len(value) > 4 else "")
        return f"a {type(value).__name__} of {len(value)}" + (f" ({parts})" if value else "")
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def what_to_mend(err: BaseException) -> str:
    """What a run stopped for ``err`` asks the user to mend: the config, the train or val data, else the model."""
    if isinstance(err, (BatchCollateError, DataError)):
        key = str(err).partition(":")[0]  # their messages start with the split's key
        return f"the {key.rpartition('.')[2]} data ({key})" if key.startswith("data.") else "the data"
    return "the config" if isinstance(err, ConfigError) else "the model"


class ClusterUnreachable(RuntimeError):
    """SLURM's controller did not answer ``sbatch``: nothing was submitted (the CLI exits 1; rerun once it answers)."""


class RunError(Exception):
    """An error whose message is the whole story: the CLI prints ``Run failed: ...`` and exits 1, the traceback
    goes to ``train.log``. Each kind also derives from the built-in error it would otherwise be."""


class NonFiniteLoss(RunError, FloatingPointError):
    """The loss became infinite or NaN; names the iteration and every loss."""


class ModelOutputError(RunError, TypeError):
    """A model's forward returned what the trainer cannot take as a loss (or metrics); names what it got."""


class ModelInputError(RunError, TypeError):
    """A model's forward does not take the batch as the loader yields it; names the batch and the contract."""


class BatchCollateError(RunError, RuntimeError):
    """The train loader could not collate a batch of its samples; names the batch and torch's words."""


class DataError(RunError, RuntimeError):
    """The data's own code raised while loading a batch; names the split, the batch and the user's line (the
    original error is its ``__cause__``). Stops training at the step boundary, with a checkpoint."""


class HookStateError(RunError, RuntimeError):
    """A hook's state could not be saved to or loaded from a checkpoint; names the hook (and the file)."""


class CheckpointWriteError(RunError, RuntimeError):
    """A checkpoint could not be written (a full disk, a directory that refuses writes); names the file."""


# Set on a sweep job's error once it is in the sweep's report: the CLI then prints the report, not a traceback.
REPORTED_JOB = "launcher_reported_job"


def mark_reported(err: BaseException, job: int) -> None:
    try:
        setattr(err, REPORTED_JOB, job)
    except (AttributeError, TypeError):  # no __dict__: reported as Hydra reports it
        pass
