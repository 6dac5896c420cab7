"""The config checks that run before anything is built (which can take minutes): each raises a one-line
:class:`ConfigError` naming the key, its value and what is accepted."""
from __future__ import annotations

import logging
import math
import re
from typing import Any, Iterator, Optional, Sequence, Tuple

from omegaconf import DictConfig, OmegaConf

from launcher.engine import distributed
from launcher.engine.errors import ConfigError
from launcher.engine.hook import HookBase
from launcher.runs.build import _group_options, build, call, get_object, why_not_importable

logger = logging.getLogger("launcher")


def check_config(cfg: DictConfig) -> int:
    """What needs no run dir, so that a typo costs nothing: values that do not resolve, the objective, the
    devices; returns the number of devices (``trainer.devices``)."""
    from launcher.engine.trainer import check_devices  # imports torch

    check_unresolvable(cfg)
    check_objective(cfg)
    return check_devices(cfg.trainer.get("devices", 1), cfg.trainer.get("device", "auto"),
                         spawned=distributed.from_environment() is None)


def check_unresolvable(cfg: DictConfig) -> None:
    """A value that does not resolve (``seed=${oc.env:NOPE}``, a ``???`` left unset), named with its key and its
    value as written; ``${hydra:...}`` resolves only inside Hydra's job and is left alone."""
    from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

    try:
        for top in cfg:
            if top == "hydra":  # Hydra's own node, in a config composed with return_hydra_config
                continue
            node = cfg._get_node(top)
            if OmegaConf.is_config(node):
                OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
            else:
                cfg[top]  # reading a value resolves it
    except OmegaConfBaseException as err:
        key = getattr(err, "full_key", None)
        if not key:
            return  # not about one key: whoever reads the config reports it
        if isinstance(err, MissingMandatoryValue):
            options = _group_options(str(key)) if "." not in str(key) else []
            if options:  # a group left without an option (~model)
                raise ConfigError(f"{key}: no option chosen for this config group (removed with ~{key}?); choose one: "
                                  f"{' or '.join(f'{key}={o}' for o in options)}") from None
            raise ConfigError(f"{key}: no value given (??? in the config); set it, e.g. {key}=<value>") from None
        raw = _as_written(cfg, str(key))
        if isinstance(raw, str) and "${hydra:" in raw:
            return
        reason = str(getattr(err, "msg", "") or err).splitlines()[0]
        reason = reason.replace("KeyError raised while resolving interpolation: ", "").strip('"')
        raise ConfigError(f"{key}={raw}: {_not_a_container(cfg, str(key), raw, reason) or reason}") from None


def _as_written(cfg: DictConfig, key: str) -> Any:
    """The value at ``key`` unresolved, or ``???`` where it cannot be read."""
    try:
        parent, _, leaf = key.rpartition(".")
        node = OmegaConf.select(cfg, parent) if parent else cfg
        return node._get_node(leaf)._value()  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 -- the message goes without it
        return "???"


def _not_a_container(cfg: DictConfig, key: str, raw: Any, reason: str) -> Optional[str]:
    """For an interpolation through a key that holds a value where it should hold settings (``data.train=abc``
    under ``data.val.size=${..train.size}``): that key and its value, not OmegaConf's words about a node."""
    node = re.search(r"node `([^`]+)` is not a container", reason)
    ref = re.fullmatch(r"\$\{(\.*)([\w.]+)\}", raw) if isinstance(raw, str) else None
    if node is None or ref is None:
        return None
    dots, path = len(ref.group(1)), ref.group(2).split(".")
    base = key.split(".")[:-1]
    base = base[:len(base) - (dots - 1)] if dots else []
    # the node OmegaConf names: the first segments of the interpolation's path (train, or data.train)
    upto = next((k for k in range(1, len(path)) if ".".join(path[:k]) == node.group(1) or
                 ".".join(path[:k]).endswith("." + node.group(1))), None)
    if upto is None:
        return None
    where = ".".join(base + path[:upto])
    value = OmegaConf.select(cfg, where, default=None, throw_on_resolution_failure=False)
    value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    return (f"{where} is {'null' if value is None else repr(value)}, which holds no {'.'.join(path[upto:])}: "
            f"{where} takes a group of settings")


def check_objective(cfg: DictConfig) -> None:
    """An empty ``objective`` (``objective=``) would make every run return NaN."""
    if not isinstance(cfg.get("objective"), str) or not cfg.objective.strip():
        raise ConfigError(f"objective={cfg.get('objective')!r}: name the metric the run returns, "
                          f"e.g. objective=val/accuracy, or objective=train/loss objective_mode=min")


def check_seed(cfg: DictConfig) -> int:
    """The seed, a whole number NumPy takes (32 bits)."""
    seed = cfg.seed
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32:
        raise ConfigError(f"seed={seed!r}: use a whole number from 0 to 2**32-1 ({2**32 - 1})")
    return seed


def check_trainer_config(cfg: DictConfig) -> None:
    """The trainer class's ``check_config`` on ``cfg.trainer``; a ``_target_`` that does not import is left to
    the build, which names it."""
    from hydra.utils import get_class

    try:
        cls = get_class(str(cfg.trainer.get("_target_")))
    except Exception:  # noqa: BLE001 -- reported by build(), with the close names
        return
    check = getattr(cls, "check_config", None)
    if callable(check):
        check(OmegaConf.to_container(cfg.trainer, resolve=True))


def check_targets(cfg: DictConfig) -> None:
    """Every ``_target_`` (the model's, a dataset's, a hook's...) imports."""
    def walk(node: Any, key: str) -> Iterator[Tuple[str, Any]]:
        if isinstance(node, dict):
            if isinstance(node.get("_target_"), str) and "${" not in node["_target_"]:  # an interpolated one: the build's
                yield key, node["_target_"]
            for name, value in node.items():
                yield from walk(value, f"{key}.{name}")

    for top in ("model", "optimizer", "data", "trainer", "hooks"):
        node = cfg.get(top)
        if not OmegaConf.is_dict(node):
            continue
        for key, target in walk(OmegaConf.to_container(node, resolve=False), top):
            if key == "hooks":  # an option file's hook not under a name: build_hook says so
                continue
            try:
                get_object(target)
            except Exception:  # noqa: BLE001 -- any failure to import it: why_not_importable says which
                raise ConfigError(f"{key}._target_: cannot import {target!r}: {why_not_importable(target)}") from None


def check_optimizer_settings(cfg: DictConfig) -> Any:
    """The optimizer's factory (``_partial_: true``); a torch optimizer is made once on a stand-in parameter, so
    that a bad ``lr`` is refused before the model is built."""
    import torch

    factory = build("optimizer", cfg.optimizer)
    if not callable(factory):
        raise ConfigError("optimizer: expected a factory of the model's parameters; set optimizer._partial_=true")
    if str(getattr(getattr(factory, "func", factory), "__module__", "")).startswith("torch.optim"):
        check_optimizer_numbers(call("optimizer", cfg.optimizer, factory, [torch.nn.Parameter(torch.zeros(1))]),
                                warn=False)
    return factory


def check_optimizer_numbers(optimizer: Any, warn: bool = True) -> None:
    """A NaN or infinite hyperparameter (torch accepts them; the loss goes NaN), a momentum outside [0, 1];
    ``warn``: say that an lr of 0 trains nothing."""
    groups = getattr(optimizer, "param_groups", None) or []
    for group in groups:
        for key, value in group.items():
            if key == "params":
                continue
            numbers = value if isinstance(value, (tuple, list)) else (value,)
            if any(isinstance(v, float) and not math.isfinite(v) for v in numbers):
                raise ConfigError(f"optimizer.{key}={value!r}: not a finite number; give a finite value")
            if key in ("momentum", "dampening") and isinstance(value, (int, float)) and not 0 <= value <= 1:
                raise ConfigError(f"optimizer.{key}={value!r}: should be in [0, 1]")
    lr = groups[0].get("lr") if groups else None
    if warn and isinstance(lr, (int, float)) and lr == 0 and distributed.is_main_process():
        logger.warning("optimizer.lr=0: the weights will not change (a schedule scales this lr)")


def check_loader_settings(cfg: DictConfig) -> None:
    """The built-in loaders' settings (``data.batch_size``, ``data.num_workers``...), without their datasets."""
    data = cfg.get("data")
    if not (OmegaConf.is_dict(data) and data.get("_target_") == "launcher.data.DataLoaders"):
        return
    try:
        loaders = OmegaConf.to_container(data, resolve=True)
    except Exception:  # noqa: BLE001 -- a value that resolves only in Hydra's job (${hydra:...}): the build reports it
        return
    loaders.update(train=None, val=None)  # type: ignore[union-attr]
    quiet = logging.getLogger("launcher.data")
    was, quiet.disabled = quiet.disabled, True  # its advice on worker options is for a run that loads data
    try:
        build("data", OmegaConf.create(loaders))
    finally:
        quiet.disabled = was


def check_values_not_applied(cfg: DictConfig, changes: Sequence[Tuple[str, Any, Any]]) -> None:
    """A finished run's rerun trains nothing, but a changed value no run would take is still a config error:
    the built-in loaders' settings and each changed built-in hook are built (not a hook of one's own, whose
    construction may start a tracking run)."""
    if any(key.startswith("data.") and key.split(".")[1] not in ("train", "val") for key, _, _ in changes):
        check_loader_settings(cfg)
    for name in sorted({key.split(".")[1] for key, _, _ in changes if key.startswith("hooks.")}):
        node = cfg.hooks.get(name) if OmegaConf.is_dict(cfg.get("hooks")) else None
        if OmegaConf.is_dict(node) and str(node.get("_target_") or "").startswith("launcher.hooks."):
            build(f"hooks.{name}", node)


def check_model(cfg: DictConfig, model: Any) -> None:
    """The model is an ``nn.Module`` with parameters to train."""
    import torch

    target = cfg.model.get("_target_")
    if not isinstance(model, torch.nn.Module):
        raise ConfigError(f"model._target_: {target} built a {type(model).__name__}, which is not a torch.nn.Module "
                          f"(docs/contracts.md: the model)")
    if next(model.parameters(), None) is None:  # the optimizer would say "empty parameter list", naming itself
        raise ConfigError(f"model._target_: {target} built a {type(model).__name__} with no parameters: nothing to "
                          f"train; hold the layers as attributes")


def check_data(cfg: DictConfig, data: Any) -> None:
    """The data object has ``train_loader()``."""
    if not callable(getattr(data, "train_loader", None)):
        raise ConfigError(f"data._target_: {cfg.data.get('_target_')} built a {type(data).__name__}, which has no "
                          f"train_loader(); data must build an object with train_loader() and val_loader(), such as "
                          f"launcher.data.DataLoaders")


def build_hook(name: str, node: Any) -> Optional[Any]:
    """``hooks.<name>`` built and checked to be a HookBase; None for ``hooks.<name>=null``."""
    if name == "_target_":  # an option file written like a model's, its hook not under a name
        raise ConfigError(f"hooks._target_: {node} is not under a hook's name; a file conf/hooks/<option>.yaml nests "
                          f"its hook under '<option>:' (see conf/hooks/console.yaml)")
    if node is None:
        return None
    if not OmegaConf.is_dict(node):
        raise ConfigError(f"hooks.{name}: {node!r} is not a hook; each entry of hooks is one hook: "
                          f"name: {{_target_: ..., options}}, or null to leave it out")
    hook = build(f"hooks.{name}", node)
    if not isinstance(hook, HookBase):
        raise ConfigError(f"hooks.{name}._target_: {node.get('_target_')} built a {type(hook).__name__}, which is not "
                          f"a launcher.hooks.HookBase; a hook must subclass it")
    return hook
