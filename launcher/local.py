"""``hydra/launcher=local``: hydra-submitit-launcher's local launcher, one process per job, at most
``max_parallel`` jobs at a time (default: one per usable CPU core).

More jobs at once than cores only contend for them: 8 jobs of ~11 s on 2 cores took 0.92x of the
sequential launcher's time all at once and 0.69x two at a time. Jobs go in groups of
``max_parallel``; every group runs, whatever failed before it, so one failing job loses no other's
result. Registered with Hydra by :func:`launcher.plugins.register`.
"""
from __future__ import annotations

import os
from typing import Any, List, Optional, Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher

from launcher.plugins import as_plain


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class CappedLocalLauncher(LocalLauncher):
    def __init__(self, max_parallel: Optional[int] = None, **params: Any) -> None:
        if max_parallel is not None and (isinstance(max_parallel, bool) or not isinstance(max_parallel, int) or max_parallel < 1):
            raise ValueError(f"hydra.launcher.max_parallel={max_parallel!r}: use a whole number >= 1, "
                             f"or null for one job per usable CPU core ({usable_cores()} here)")
        super().__init__(**params)
        self.max_parallel = max_parallel or usable_cores()

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        returns: List[JobReturn] = []
        for start in range(0, len(job_overrides), self.max_parallel):
            group = job_overrides[start:start + self.max_parallel]
            returns += super().launch(group, initial_job_idx + start)
        return returns

    def __reduce__(self) -> Any:
        """Pickled for the jobs as the plugin's LocalLauncher: the jobs need nothing of this class."""
        return (as_plain, (LocalLauncher, dict(self.__dict__)))


PLUGIN = CappedLocalLauncher
PLUGIN.__module__ = "hydra_plugins.launcher_local"  # the name conf/hydra/launcher/local.yaml gives
