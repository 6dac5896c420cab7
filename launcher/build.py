"""Building objects from config with ``hydra.utils.instantiate``, with errors that name the key.

Hydra's own errors for a bad ``_target_`` or a rejected argument are long and chained; a
:class:`ConfigError` says in one line which key was wrong, its value, and what is accepted.
"""
from __future__ import annotations

import inspect
import re
from typing import Any, Optional

from hydra.errors import InstantiationException
from hydra.utils import get_object, instantiate
from omegaconf import DictConfig, OmegaConf


class ConfigError(ValueError):
    """A config value that cannot be built; the message names the key and what is accepted."""


def _target_of(node: Any) -> Optional[str]:
    return node.get("_target_") if isinstance(node, DictConfig) else None


def _node_at(root: Any, key: str, full_key: str) -> Any:
    """The sub-node ``full_key`` (relative to the root config) inside ``root`` (which sits at ``key``)."""
    rel = full_key[len(key) + 1 :] if full_key.startswith(key + ".") else ""
    return OmegaConf.select(root, rel) if rel else root


def _accepted(target: Optional[str]) -> str:
    try:
        obj = get_object(target) if target else None
        params = inspect.signature(obj).parameters if obj is not None else {}
    except Exception:
        return ""
    names = [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and n != "self"]
    return f"; {target} accepts: {', '.join(names)}" if names else ""


def explain(key: str, node: Any, err: BaseException) -> ConfigError:
    """Turn an exception raised while building ``node`` (at config ``key``) into a one-line ConfigError."""
    cause = err.__cause__ if isinstance(err, InstantiationException) and err.__cause__ else err
    message = str(err)
    match = re.search(r"full_key: (\S+)", message)
    full_key = match.group(1) if match else key
    sub = _node_at(node, key, full_key) if isinstance(node, DictConfig) else node
    target = _target_of(sub)
    if isinstance(err, InstantiationException) and message.startswith("Error locating target"):
        return ConfigError(f"{full_key}._target_: cannot import {target!r} ({type(cause).__name__}: {cause})")
    if isinstance(cause, TypeError) and "argument" in str(cause):
        return ConfigError(f"{full_key}: {target} rejected the config: {cause}{_accepted(target)}")
    if isinstance(cause, ConfigError):
        return cause
    where = f"{full_key} ({target})" if target else full_key
    return ConfigError(f"{where}: {type(cause).__name__}: {cause}")


def build(key: str, node: Any, **kwargs: Any) -> Any:
    """``instantiate(node, **kwargs)``; any failure becomes a :class:`ConfigError` naming ``key``."""
    if isinstance(node, DictConfig) and "_target_" not in node:
        raise ConfigError(f"{key}: no _target_ given; set {key}._target_ to the class or function to build")
    try:
        return instantiate(node, **kwargs)
    except Exception as err:
        raise explain(key, node, err) from err
