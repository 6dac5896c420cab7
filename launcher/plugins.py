"""Our Hydra launcher plugins: ``hydra/launcher=local`` (:mod:`launcher.local`) and
``hydra/launcher=slurm_detached`` (:mod:`launcher.slurm`), subclasses of hydra-submitit-launcher's.

Hydra takes launchers only from the ``hydra_plugins`` namespace package, which an editable install of
this project cannot add to. So ``python -m launcher`` calls :func:`register` before a multirun: each
module is made importable as the ``hydra_plugins.<name>`` module its config's ``_target_`` names (the
class's ``__module__``), and the class is registered with Hydra's plugin registry. The jobs are pickled
as the plugin's plain classes (each class's ``__reduce__``; the SLURM jobs as
:class:`launcher.slurm.SlurmJob`, importable without registering), so a job process needs none of this.
"""
from __future__ import annotations

import importlib
import sys

MODULES = ("launcher.local", "launcher.slurm")


def register() -> None:
    import hydra_plugins
    from hydra.core.plugins import Plugins

    for module_name in MODULES:
        module = importlib.import_module(module_name)
        for cls in module.PLUGINS:
            sys.modules[cls.__module__] = module
            setattr(hydra_plugins, cls.__module__.rpartition(".")[2], module)
            Plugins.instance().register(cls)


def as_plain(cls: type, state: dict) -> object:
    """Unpickles one of our launchers as the plugin's own ``cls`` with the same attributes."""
    plain = cls.__new__(cls)
    plain.__dict__.update(state)
    return plain
