"""The error a user's bad input ends in: the CLI prints its one-line message and exits 2."""
from __future__ import annotations


class ConfigError(ValueError):
    """A config value that cannot be built or used; the message names the key and what is accepted."""


class RunDirBusy(ConfigError):
    """Another run is working in the run dir: the CLI prints its one line on stderr, not in the run dir's
    ``train.log`` (the other run's), and exits 2."""


def did_you_mean(value: str, accepted, key: str) -> str:
    """``"; did you mean <key>=<closest>?"`` for the accepted name closest to a misspelt ``value``, else ``""``."""
    import difflib

    close = difflib.get_close_matches(str(value), [str(a) for a in accepted], n=1)
    return f"; did you mean {key}={close[0]}?" if close else ""


def output_dir_refused(err: OSError) -> str:
    """The one-line config error for a run or sweep dir that cannot be made (a file in its place, a directory or
    file system this user cannot write to, by default the current directory's ``outputs/``)."""
    import os

    where = f" (in {os.getcwd()})" if err.filename and not os.path.isabs(str(err.filename)) else ""
    return (f"cannot make the output dir {err.filename}: {err.strerror}{where}; hydra.run.dir (hydra.sweep.dir and "
            f"hydra.sweep.subdir with -m) must name a directory this user can write to")


def describe(value: object) -> str:
    """What a batch, or a model's output, is, in the words every message shows it with: a tensor's shape, a dict's
    keys, a list's or tuple's length and its first parts, else its type."""
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
    """What a run stopped at a boundary for ``err`` asks the user to mend: "the config" for a
    :class:`ConfigError`, "the val data (data.val)" (or train data) for a batch of it that could not be loaded, else "the model" (its output
    in eval mode, say)."""
    if isinstance(err, (BatchCollateError, DataError)):
        key = str(err).partition(":")[0]  # their messages start with the split's key
        return f"the {key.rpartition('.')[2]} data ({key})" if key.startswith("data.") else "the data"
    return "the config" if isinstance(err, ConfigError) else "the model"


class ClusterUnreachable(RuntimeError):
    """SLURM's controller did not answer ``sbatch``: no job was submitted, and nothing in the config is wrong. The
    CLI prints its one line and exits 1; the same command submits the sweep once the controller answers."""


class RunError(Exception):
    """An error that ends a run whose message is the whole story (what went wrong, where, what to change):
    the CLI prints it in one line, ``Run failed: ...``, exit status 1, and its traceback (the launcher's own
    frames) goes to ``train.log``. Each kind also derives from the built-in error it would otherwise be."""


class NonFiniteLoss(RunError, FloatingPointError):
    """The loss became infinite or NaN: the run stops there. The message names the iteration and every
    loss; the CLI prints it in one line (its traceback, all the trainer's own frames, goes to ``train.log``)."""


class ModelOutputError(RunError, TypeError):
    """A model's forward returned what the trainer cannot take as a loss (or metrics); names what it got."""


class ModelInputError(RunError, TypeError):
    """A model's forward failed on the first batch it was given in a way that says it does not take the
    batch as the loader yields it (``forward(x)`` given ``[x, y]``); names the batch and the contract."""


class BatchCollateError(RunError, RuntimeError):
    """The train loader could not make a batch of its samples (torch's collate: samples of other shapes); names
    the batch, torch's words, and what a batch's samples must share."""


class DataError(RunError, RuntimeError):
    """The data's own code (a dataset's ``__getitem__``, a worker, a collate function) raised while loading a batch:
    names ``data.train`` or ``data.val``, the batch, the error and the line of the user's code that raised it. The
    error it stands for is its ``__cause__``, whose traceback goes to ``train.log``. Like a
    :class:`BatchCollateError`, it stops a training run at the step's boundary with a checkpoint of the training so far
    (the train data's in one process only: under DDP the other ranks are inside the step)."""


class HookStateError(RunError, RuntimeError):
    """A hook's state could not go into a checkpoint (its ``state_dict`` holds what pickle cannot take) or come out
    of one (its ``load_state_dict`` refused what its checkpoint holds); names the hook (and the file)."""


class CheckpointWriteError(RunError, RuntimeError):
    """A checkpoint could not be written (a full disk, a directory that refuses writes); names the file."""


# Set on a sweep job's error once the job's failure is logged and recorded for the sweep's report: the
# CLI then ends the sweep with that report alone, not Hydra's traceback of the sweeper re-raising it.
REPORTED_JOB = "launcher_reported_job"


def mark_reported(err: BaseException, job: int) -> None:
    try:
        setattr(err, REPORTED_JOB, job)
    except (AttributeError, TypeError):  # an exception type without a __dict__: reported as Hydra reports it
        pass
