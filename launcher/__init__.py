"""A Hydra-composed experiment launcher for PyTorch.

From Python (notebooks, tests)::

    cfg = launcher.compose(["trainer=iter"])
    result = launcher.run(cfg, "some/dir")

From the shell: ``python -m launcher trainer=iter``. The layers, each importing only those below it:
``launcher.engine`` (the trainers, hooks' base, metrics, checkpoints, DDP), ``launcher.runs`` (config to objects,
the run dir and its record, the steps of one run), ``launcher.sweep`` (Hydra launcher plugins for ``-m``).
The built-in hooks are in ``launcher.hooks``; ``docs/design.md`` draws the whole.
"""
from launcher.engine.errors import ConfigError
from launcher.engine.hook import HookBase
from launcher.runs.run import RunResult, build_trainer, compose, run

__all__ = ["ConfigError", "HookBase", "RunResult", "build_trainer", "compose", "run"]
