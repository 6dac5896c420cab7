"""The sweep layer: Hydra's launcher and sweeper plugins for ``-m`` (basic, local in parallel through a fork server,
SLURM), the sweep summary, and the ``SweepSummary`` callback. It uses the run layer; nothing below imports it."""
from __future__ import annotations

import importlib
import sys
from typing import Sequence

MODULES = ("launcher.sweep.sweeper", "launcher.sweep.local", "launcher.sweep.slurm")


def register(modules: Sequence[str] = MODULES) -> None:
    import hydra_plugins
    from hydra.core.plugins import Plugins

    Plugins.instance()  # first: its look for plugins executes their modules anew, which ours subclass
    for module_name in modules:
        module = importlib.import_module(module_name)
        for cls in module.PLUGINS:
            sys.modules[cls.__module__] = module
            setattr(hydra_plugins, cls.__module__.rpartition(".")[2], module)
            Plugins.instance().register(cls)
