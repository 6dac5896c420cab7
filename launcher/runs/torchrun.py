"""Under torchrun: one run dir for every rank, the same config on every rank, and no ``-m`` sweeps (a Hydra callback)."""
from __future__ import annotations

import logging
import re
from typing import Any

from hydra.experimental.callback import Callback

from launcher.engine.distributed import DistributedError, all_gather_object, broadcast_object, from_environment, init
from launcher.runs.rundir import _flat, same_value

logger = logging.getLogger("launcher")


def share_run_dir(config: Any) -> None:
    """Under torchrun, make every rank use rank 0's run dir (Hydra would time-stamp one per rank).

    Called from the Hydra callback before the run dir is made: joins the process group (so a
    rank that cannot reach the master fails here, with the address in the message), takes rank
    0's resolved ``hydra.run.dir``, and sends other ranks' log files to ``train_rank<N>.log``.
    """
    from omegaconf import OmegaConf, open_dict

    env = from_environment()
    if env is None or env.source == "slurm":  # SLURM jobs get their dir from the sweep launcher
        return
    init(env, str(config.trainer.get("device", "auto")) if "trainer" in config else "auto")
    check_same_config(config)
    run_dir = broadcast_object(str(config.hydra.run.dir) if env.is_main else None)
    with open_dict(config):
        config.hydra.run.dir = run_dir
        if not env.is_main:
            for handler in (OmegaConf.select(config, "hydra.job_logging.handlers") or {}).values():
                if OmegaConf.is_dict(handler) and "filename" in handler:  # train.log, or a logging config's own file
                    name = str(handler._get_node("filename")._value())
                    handler.filename = re.sub(r"(\.\w+)?$", rf"_rank{env.rank}\1", name, count=1)
            config.hydra.output_subdir = None  # rank 0 writes .hydra/
            console = OmegaConf.select(config, "hydra.job_logging.handlers.console")
            if console is not None:
                console.level = "WARNING"  # one console voice; each rank's file keeps everything
                formatters = OmegaConf.select(config, "hydra.job_logging.formatters")
                name = console.get("formatter")
                fmt = OmegaConf.select(formatters, f"{name}.format") if formatters is not None and name else None
                if isinstance(fmt, str):  # its warnings and errors, which rank 0's console shows too, say whose they are
                    tagged = fmt.replace("%(levelname)s]", f"%(levelname)s][rank {env.rank}]", 1)
                    formatters[f"{name}_rank"] = {**OmegaConf.to_container(formatters[name], resolve=False),
                                                  "format": tagged if tagged != fmt else f"[rank {env.rank}] {fmt}"}
                    console.formatter = f"{name}_rank"


def check_same_config(config: Any) -> None:
    """Raise :class:`DistributedError` on every rank when the ranks were started with different configs (nodes
    given other overrides): each would train its own model, silently, or wait for the others at a step they
    never take (another batch size, another length). Compares the configs as written, less Hydra's."""
    from omegaconf import OmegaConf

    mine = _flat({k: v for k, v in OmegaConf.to_container(config, resolve=False, enum_to_str=True).items() if k != "hydra"})
    configs = all_gather_object(mine)
    first = configs[0]
    for rank, other in enumerate(configs[1:], start=1):
        keys = sorted(k for k in set(first) | set(other)
                      if not same_value(first.get(k, "(absent)"), other.get(k, "(absent)")))
        if keys:
            shown = ", ".join(f"{k}={other.get(k, '(absent)')} (rank 0: {first.get(k, '(absent)')})" for k in keys[:5])
            more = f" and {len(keys) - 5} more" if len(keys) > 5 else ""
            raise DistributedError(f"rank {rank} was started with another config than rank 0: {shown}{more}; start every "
                                   f"rank (each node's torchrun) with the same overrides (a per-node value: key='${{oc.env:VAR}}')")


class TorchrunCallback(Callback):  # type: ignore[misc]
    """Hydra callback (conf/config.yaml): under torchrun, one run dir for all ranks; no ``-m`` sweeps.

    Hydra turns a callback's exceptions into warnings, so failures here end the process themselves.
    """

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        try:
            share_run_dir(config)
        except DistributedError as err:
            _fail(str(err))

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        env = from_environment()
        if env is not None and env.source == "torchrun":
            _fail("-m (a sweep) cannot run under torchrun: every rank would run the whole sweep. Sweep DDP jobs "
                  "with trainer.devices=N, or with hydra/launcher=slurm hydra.launcher.tasks_per_node=N")


def _fail(message: str) -> None:
    import sys

    logging.basicConfig()
    logger.error("%s", message)
    sys.exit(2)
