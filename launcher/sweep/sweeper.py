"""``hydra/sweeper=planned`` (our default): Hydra's basic sweeper, without composing every job before the first
one starts."""
from __future__ import annotations

from typing import Sequence

from hydra.core.plugins import Plugins

from launcher.sweep.plugins import check_each_value_composes, checked

Plugins.instance()  # Hydra's first look for plugins executes their modules anew: subclass the sweeper it then holds
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # noqa: E402


class PlannedSweeper(BasicSweeper):
    """Hydra's basic sweeper less its composing every job up front (0.1 s a job): the sweep's plan has composed jobs
    that between them use every swept value (:func:`launcher.sweep.plugins.check_each_value_composes`); the others
    are composed as each starts. Where the plan did not run (``hydra.callbacks`` replaced), the check runs here."""

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        if not checked(self.config):
            check_each_value_composes(self.config, batch, self.hydra_context.config_loader)


PlannedSweeper.__module__ = "hydra_plugins.launcher_sweeper"  # the name conf/hydra/sweeper/planned.yaml gives
PLUGINS = (PlannedSweeper,)
