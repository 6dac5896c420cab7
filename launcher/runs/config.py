"""Schemas of the configs whose keys the launcher owns, stored in Hydra's ConfigStore.

The YAML files in ``conf/`` name these schemas in their defaults lists (``/schema/...``),
so a misspelled key (``trainer.max_epoch=3``) or a wrong type (``trainer.max_epochs=ten``)
fails while Hydra composes the config, before anything is built, naming the key.
Models, optimizers and datasets take free-form keys: their constructors check them.

The hooks' true/false settings are typed ``Any`` here, not ``bool``: OmegaConf takes any integer and words such as
``yes`` as a bool (``by_epoch=2`` ran as true); left as given, the build refuses anything but true or false, naming
the key, as it does for every parameter annotated ``bool``.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


class ObjectiveMode(Enum):
    """Which way the objective is better; a typo (``objective_mode=maximum``) fails at composition."""

    max = "max"
    min = "min"


def _config_dir() -> str:
    """``conf/`` beside the package in a source checkout, or ``launcher/conf`` in a wheel."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here / "conf", here.parent / "conf"):
        if (candidate / "config.yaml").is_file():
            return str(candidate)
    raise FileNotFoundError(f"launcher: no conf/config.yaml next to {here}; the installation is incomplete")


CONFIG_DIR = _config_dir()


@dataclass
class RootConf:
    seed: int = 0  # seeds python, numpy and torch (0 to 2**32-1); the data order follows it
    objective: str = "val/accuracy"  # the metric the run returns (what a sweeper optimises)
    objective_mode: ObjectiveMode = ObjectiveMode.max  # max | min: which way is better (the sweep summary's best job)
    model: Any = MISSING
    optimizer: Any = MISSING
    data: Any = MISSING
    trainer: Any = MISSING
    hooks: Dict[str, Any] = field(default_factory=dict)  # name -> hook config


@dataclass
class TrainerConf:
    _target_: str = MISSING
    device: str = "auto"  # auto (CUDA when present), cpu, cuda, cuda:N
    resume: Any = "auto"  # auto: newest valid checkpoint of this run dir; false: ignore them; or a checkpoint path
    load_from: Optional[str] = None  # model weights to start from (fine-tuning); ignored when resuming
    devices: int = 1  # > 1: DDP over that many worker processes on this machine (GPUs, or CPU processes)
    trust_checkpoint: bool = False  # resume from a checkpoint holding Python objects, whose unpickling can run code


@dataclass
class EpochTrainerConf(TrainerConf):
    _target_: str = "launcher.engine.trainer.EpochTrainer"
    max_epochs: int = 20  # training epochs
    workflow: List[Any] = field(default_factory=lambda: [["train", 1]])  # [[phase, epochs], ...]; phase: train|val


@dataclass
class IterTrainerConf(TrainerConf):
    _target_: str = "launcher.engine.trainer.IterTrainer"
    max_iters: int = 1000  # optimizer steps


@dataclass
class HookConf:
    _target_: str = MISSING
    priority: Optional[int] = None  # lower runs first; null keeps the hook's default


@dataclass
class IterationTimerConf(HookConf):
    _target_: str = "launcher.hooks.timer.IterationTimer"
    warmup: int = 3  # first steps left out of the reported speed


@dataclass
class LRSchedulerConf(HookConf):
    _target_: str = "launcher.hooks.lr_scheduler.LRScheduler"
    scheduler: Any = MISSING  # a _partial_ torch.optim.lr_scheduler config; its horizon is filled in when left out
    by_epoch: Any = False  # step once per epoch instead of once per iteration
    monitor: str = "val/loss"  # metric for ReduceLROnPlateau
    warmup_iters: int = 0  # iterations of warmup before the schedule
    warmup: str = "linear"  # linear | constant
    warmup_factor: float = 0.001  # the lr at the start of warmup, as a fraction of the base lr
    log_all_groups: Any = False  # also record lr/groupN for every parameter group


@dataclass
class EvaluatorConf(HookConf):
    _target_: str = "launcher.hooks.evaluator.Evaluator"
    period: int = 1  # validate every `period` epochs (iterations when by_epoch is false)
    by_epoch: Any = True
    at_end: Any = True  # validate after training unless the last validation is current


@dataclass
class PeriodicCheckpointerConf(HookConf):
    _target_: str = "launcher.hooks.checkpoint.PeriodicCheckpointer"
    period: int = 1  # save every `period` epochs (iterations when by_epoch is false)
    by_epoch: Any = True
    keep_last: int = 3  # periodic checkpoints kept; 0 keeps all
    save_final: Any = True  # checkpoints/final.pt when the run ends normally
    min_interval_secs: float = 10.0  # a periodic checkpoint due sooner after the last is skipped (not the run's last); 0: every period


@dataclass
class WriterConf(HookConf):
    period: int = 20  # write every `period` iterations (and after each validation, and at the end)
    window: int = 20  # smoothing window (median) for per-step scalars such as train/loss


@dataclass
class ConsoleWriterConf(WriterConf):
    _target_: str = "launcher.hooks.writers.ConsoleWriter"


@dataclass
class JSONWriterConf(WriterConf):
    _target_: str = "launcher.hooks.writers.JSONWriter"
    filename: str = "metrics.jsonl"  # inside the run dir
    flush_secs: float = 1.0  # rows reach the file at least this often (and at each validation, checkpoint, end)


@dataclass
class TensorBoardWriterConf(WriterConf):
    _target_: str = "launcher.hooks.writers.TensorBoardWriter"
    log_dir: str = "."  # relative to the run dir
    flush_secs: float = 1.0  # events reach the file at least this often (and at each validation, checkpoint, end)


@dataclass
class OptimizerStepConf(HookConf):
    _target_: str = "launcher.hooks.optim.OptimizerStep"
    accumulate: int = 1  # micro-batches per optimizer step
    clip_grad_norm: Optional[float] = None  # clip the total gradient norm to this
    norm_type: float = 2.0
    clip_grad_value: Optional[float] = None  # or clip each gradient value to +-this
    log_grad_norm: Any = False  # record grad_norm even without clipping
    amp: Optional[str] = None  # null | fp16 (with GradScaler) | bf16
    nonfinite: str = "raise"  # raise | skip: what a non-finite loss does


@dataclass
class EMAConf(HookConf):
    _target_: str = "launcher.hooks.ema.EMA"
    decay: float = 0.99
    eval_with_ema: Any = True  # validate with the EMA weights
    final_weights_ema: Any = True  # end the run (final.pt) with the EMA weights
    use_buffers: Any = True  # average buffers (BatchNorm statistics) too


@dataclass
class EarlyStoppingConf(HookConf):
    _target_: str = "launcher.hooks.early_stopping.EarlyStopping"
    monitor: str = "val/loss"
    mode: str = "min"  # min | max
    patience: int = 5  # validations without improvement before stopping
    min_delta: float = 0.0  # an improvement must beat the best by more than this
    check_finite: bool = True  # a NaN or infinite monitor stops the run at once (false: it counts towards patience)


@dataclass
class ProgressBarConf(HookConf):
    _target_: str = "launcher.hooks.progress.ProgressBar"
    refresh_per_second: float = 4.0
    force: Any = False  # also when stdout is not a terminal


@dataclass
class ProfilerConf(HookConf):
    _target_: str = "launcher.hooks.profiler.Profiler"
    wait: int = 5  # steps skipped first
    warmup: int = 2  # steps profiled but discarded
    active: int = 5  # steps recorded
    record_shapes: Any = False
    profile_memory: Any = False
    dirname: str = "profiler"  # inside the run dir


@dataclass
class PreciseBNConf(HookConf):
    _target_: str = "launcher.hooks.precise_bn.PreciseBN"
    num_batches: int = 20  # training batches to average BatchNorm statistics over


@dataclass
class ParamScheduleConf(HookConf):
    _target_: str = "launcher.hooks.param_schedule.ParamSchedule"
    key: str = "momentum"  # momentum | weight_decay | betas.0 | betas.1
    start: float = 0.85
    end: float = 0.95
    schedule: str = "cosine"  # linear | cosine, over the run's iterations


SCHEMAS = {
    "trainer": {"epoch": EpochTrainerConf, "iter": IterTrainerConf},
    "hooks": {
        "timer": IterationTimerConf,
        "lr_scheduler": LRSchedulerConf,
        "evaluator": EvaluatorConf,
        "checkpointer": PeriodicCheckpointerConf,
        "console": ConsoleWriterConf,
        "jsonl": JSONWriterConf,
        "tensorboard": TensorBoardWriterConf,
        "optimizer_step": OptimizerStepConf,
        "ema": EMAConf,
        "early_stopping": EarlyStoppingConf,
        "progress": ProgressBarConf,
        "profiler": ProfilerConf,
        "precise_bn": PreciseBNConf,
        "momentum_schedule": ParamScheduleConf,
    },
}


def register_configs() -> None:
    """Store the schemas under ``schema/`` (idempotent; Hydra's ConfigStore is process-wide)."""
    cs = ConfigStore.instance()
    cs.store(name="root_schema", group="schema", node=RootConf)
    for group, schemas in SCHEMAS.items():
        for name, node in schemas.items():
            cs.store(name=name, group=f"schema/{group}", node=node)
