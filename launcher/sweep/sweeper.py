"""``hydra/sweeper=planned`` (our default): Hydra's basic sweeper, without composing every job before the first
one starts. Registered with Hydra by :func:`launcher.sweep.plugins.register`."""
from __future__ import annotations

from typing import Sequence

from hydra.core.plugins import Plugins

from launcher.sweep.plugins import check_each_value_composes, checked

Plugins.instance()  # Hydra's first look for plugins executes their modules anew: subclass the sweeper it then holds
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper  # noqa: E402


class PlannedSweeper(BasicSweeper):
    """Hydra's basic sweeper (every combination of the swept values, in turn), less its composing every job
    before the first one starts (``validate_batch_is_legal``: about 0.1 s a job, so 20 s for a sweep of 200
    seeds, 100 s for 1000). :func:`launcher.sweep.plugins.plan_sweep`, which our ``SweepSummary`` callback runs
    before the sweeper, has composed jobs that between them use every swept value (32 jobs at most; see
    :func:`launcher.sweep.plugins.check_each_value_composes`); the others are composed as each starts, and one that
    does not compose is a failed job. Where it has not (``hydra.callbacks`` replaced, or the callback
    failed), the same check runs here."""

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        if not checked(self.config):
            check_each_value_composes(self.config, batch, self.hydra_context.config_loader)


PlannedSweeper.__module__ = "hydra_plugins.launcher_sweeper"  # the name conf/hydra/sweeper/planned.yaml gives
PLUGINS = (PlannedSweeper,)
