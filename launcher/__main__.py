"""``python -m launcher [overrides]``: compose the config with Hydra, train, return the objective."""
from __future__ import annotations

import logging
import os
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

import launcher
from launcher.build import ConfigError
from launcher.signals import EXIT_INTERRUPTED

logger = logging.getLogger("launcher")


@hydra.main(config_path=launcher.CONFIG_DIR, config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
    hc = HydraConfig.get()
    try:
        result = launcher.run(cfg, hc.runtime.output_dir, list(hc.overrides.task))
    except ConfigError as err:
        if os.environ.get("HYDRA_FULL_ERROR") == "1" or hc.mode == RunMode.MULTIRUN:
            raise  # in a sweep, Hydra records this job as failed and the other jobs keep their results
        logger.error("Config error: %s", err)
        sys.exit(2)
    if result.status == "interrupted":
        sys.exit(EXIT_INTERRUPTED)
    return result.objective


if __name__ == "__main__":
    if {"-m", "--multirun"} & set(sys.argv[1:]) or "hydra.mode=MULTIRUN" in sys.argv[1:]:
        from launcher import plugins

        plugins.register()  # hydra/launcher=local and slurm_detached
    main()
