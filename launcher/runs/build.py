"""Building objects from config with ``hydra.utils.instantiate``; a failure becomes a one-line
:class:`ConfigError` naming the key, its value and what is accepted (not Hydra's chained errors)."""
from __future__ import annotations

import difflib
import importlib
import inspect
import logging
import os
import pkgutil
import re
import sysconfig
import traceback
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Tuple

from hydra.errors import InstantiationException
from hydra.utils import get_object as _hydra_get_object
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from launcher.engine.errors import ConfigError


def get_object(path: str) -> Any:
    """Hydra's ``get_object`` without the ERROR record it logs before raising (the ConfigError says it once)."""
    log = logging.getLogger("hydra.utils")
    disabled, log.disabled = log.disabled, True
    try:
        return _hydra_get_object(path)
    finally:
        log.disabled = disabled


# A message that starts with one of these already names the key at fault.
GROUPS = tuple(f"{group}." for group in ("model", "optimizer", "data", "trainer", "hooks"))


def _target_of(node: Any) -> Optional[str]:
    return node.get("_target_") if isinstance(node, DictConfig) else None


def _node_at(root: Any, key: str, full_key: str) -> Any:
    """The sub-node ``full_key`` (relative to the root config) inside ``root`` (which sits at ``key``)."""
    rel = full_key[len(key) + 1 :] if full_key.startswith(key + ".") else ""
    return OmegaConf.select(root, rel) if rel else root


def accepted_names(target: Optional[str], supplied: Sequence[str] = ()) -> List[str]:
    """The keyword arguments ``target`` accepts (following ``**kwargs`` up a class's bases), less ``supplied``."""
    try:
        obj = get_object(target) if target else None
    except Exception:
        return []
    funcs = [c.__init__ for c in obj.__mro__ if "__init__" in vars(c)] if inspect.isclass(obj) else [obj]
    names: list = []
    for func in funcs:
        try:
            params = inspect.signature(func).parameters
        except (TypeError, ValueError):
            break
        names += [n for n, p in params.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and n != "self"
                  and n not in names and n not in supplied]
        if not any(p.kind == p.VAR_KEYWORD for p in params.values()):
            break
    return names


def factory_arguments(target: str, partial: bool) -> List[str]:
    """What a config node for ``target`` may set: its arguments, less the first of a ``_partial_`` factory."""
    names = accepted_names(target)
    return names[1:] if partial else names


def _accepted(target: Optional[str], supplied: Sequence[str] = ()) -> str:
    names = accepted_names(target, supplied)
    return f"; {target} accepts: {', '.join(names)}" if names else ""


def why_not_importable(target: str) -> str:
    """What is wrong with a dotted path: the missing module, or the missing name and close matches."""
    parts = target.split(".")
    module, i = None, len(parts)
    while i > 0:
        try:
            module = importlib.import_module(".".join(parts[:i]))
            break
        except ModuleNotFoundError as e:
            if e.name and not ".".join(parts[:i]).startswith(e.name):
                return f"importing {'.'.join(parts[:i])!r} failed: {e}"
            i -= 1
        except Exception as e:  # the module exists but raised while importing
            return f"importing {'.'.join(parts[:i])!r} raised {type(e).__name__}: {e}"
    if module is None and parts[0] == "hooks" and len(parts) > 1:  # the built-in hooks' package before it moved
        return f"no module named 'hooks': the built-in hooks are launcher.hooks ({'.'.join(['launcher', *parts])})"
    if module is None:
        return f"no module named {parts[0]!r} (is it installed, or on PYTHONPATH?)"
    obj: Any = module
    for j in range(i, len(parts)):
        if not hasattr(obj, parts[j]):
            names = [n for n in dir(obj) if not n.startswith("_")]
            if hasattr(obj, "__path__"):  # a package: its submodules count too
                names += [m.name for m in pkgutil.iter_modules(obj.__path__)]
            close = difflib.get_close_matches(parts[j], names, n=3)
            hint = f"; did you mean {', '.join(repr('.'.join(parts[:j] + [c])) for c in close)}?" if close else ""
            return f"{'.'.join(parts[:j])!r} has no attribute {parts[j]!r}{hint}"
        obj = getattr(obj, parts[j])
    return "it imports here; the error came from Hydra"


def _given(sub: Any) -> str:
    if not isinstance(sub, DictConfig):
        return ""
    items = [f"{k}={sub._get_node(k)!s}" for k in sub if k not in ("_target_", "_partial_", "_recursive_", "_convert_")]
    text = ", ".join(items)
    return f" (given {text[:300]})" if items else ""


def _mistyped(full_key: str, sub: Any, target: Optional[str]) -> Optional[str]:
    """The first value whose type cannot be what ``target`` expects, judged by the parameter's default
    (``optimizer.lr=abc``); None when all look right."""
    if not isinstance(sub, DictConfig) or not target:
        return None
    try:
        params = inspect.signature(get_object(target)).parameters
    except Exception:
        return None
    for name in sub:
        param = params.get(str(name))
        if param is None or param.default is inspect.Parameter.empty or param.default is None:
            continue
        try:
            value = sub[name]  # interpolations resolved
        except Exception:
            continue
        default = param.default
        if isinstance(default, bool):
            wrong, wanted = not isinstance(value, bool), "true or false"
        elif isinstance(default, (int, float)):
            wrong, wanted = isinstance(value, bool) or not isinstance(value, (int, float)), "a number"
        else:
            continue
        if wrong:
            return f"{full_key}.{name}: {value!r} is not {wanted}{_env_hint(sub, name, value, f'{full_key}.{name}')}"
    return None


# Annotations that admit one kind of scalar (also as text), and the values that fit each.
_SCALAR_ANNOTATIONS = {
    bool: ("true or false", lambda v: isinstance(v, bool)),
    int: ("an integer", lambda v: isinstance(v, int) and not isinstance(v, bool)),
    float: ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
}
_SCALAR_ANNOTATIONS.update({t.__name__: rule for t, rule in list(_SCALAR_ANNOTATIONS.items())})


def _tuple_length(annotation: Any) -> Optional[int]:
    """N for an annotation ``tuple[A, B, ...]`` of N items (not ``tuple[A, ...]``); else None."""
    import typing

    try:
        args = typing.get_args(annotation)
        return len(args) if typing.get_origin(annotation) is tuple and args and Ellipsis not in args else None
    except Exception:  # noqa: BLE001 -- an annotation typing cannot read
        return None


def _misfit(key: str, node: Any) -> Optional[str]:
    """The first value in ``node`` (or a node inside it) whose parameter is annotated exactly ``bool``, ``int``,
    ``float`` or an N-tuple and that does not fit: constructors seldom check (``nesterov=maybe`` trained)."""
    if not isinstance(node, DictConfig):
        return None
    target = _target_of(node)
    params: Any = {}
    if target:
        try:
            built = get_object(target)
        except Exception:
            built = None
        for evaluated in (True, False):  # annotations kept as text (``from __future__ import annotations``) read as types
            try:
                params = inspect.signature(built, eval_str=evaluated).parameters
                break
            except Exception:  # a name the annotation's module lacks (TYPE_CHECKING imports): the text, as it is
                params = {}
    for name in node:
        try:
            value = node[name]  # interpolations resolved
        except Exception:
            continue
        if isinstance(value, DictConfig):
            found = _misfit(f"{key}.{name}", value)
            if found:
                return found
            continue
        param = params.get(str(name))
        arity = _tuple_length(param.annotation) if param is not None else None
        example = f", e.g. {list(param.default)}" if param is not None and isinstance(param.default, tuple) else ""
        if arity is not None and isinstance(value, (int, float, str)):  # betas=0.9: "'float' object is not subscriptable"
            return f"{key}.{name}: {value!r} is one value; {target} takes a list of {arity} there{example}"
        if arity is not None and isinstance(value, ListConfig) and len(value) != arity:  # AdamW's betas: a ValueError at step 0
            return (f"{key}.{name}: {OmegaConf.to_container(value)} has {len(value)} value(s); {target} takes {arity} "
                    f"there{example}")
        try:
            rule = _SCALAR_ANNOTATIONS.get(param.annotation) if param is not None else None
        except TypeError:  # an unhashable annotation
            rule = None
        # null passes where it is the parameter's own default (``seed: int = None``), not for a required one
        if rule is not None and not rule[1](value) and (value is not None or param.default is not None):
            kind = rule[0]
            shown = "null" if value is None else repr(value)
            return (f"{key}.{name}: {shown} is not {kind} ({target} takes {'a bool' if kind == 'true or false' else kind} "
                    f"there){_env_hint(node, name, value, f'{key}.{name}')}")
    return None


def _env_hint(node: DictConfig, name: Any, value: Any, full_key: str) -> str:
    """For a string an environment variable gave (``${oc.env:X,true}``): how to read the value it spells; else ``""``."""
    try:
        raw = node._get_node(name)._value()
    except Exception:  # noqa: BLE001
        return ""
    if not isinstance(value, str) or not isinstance(raw, str) or not raw.startswith("${oc.env:") or not raw.endswith("}"):
        return ""
    decoded = f"${{oc.decode:{raw}}}"
    return f"; {raw} gives a string: {decoded} reads the value it spells (on the command line: '{full_key}=\"{decoded}\"')"


_HYDRA_INSTANTIATE = os.path.join("hydra", "_internal", "instantiate", "_instantiate2.py")


def _frames_inside(err: BaseException) -> List[traceback.FrameSummary]:
    """The frames of ``err``'s traceback below the call that built the object (none: the call itself failed)."""
    frames = traceback.extract_tb(err.__traceback__)
    calls = [i for i, f in enumerate(frames) if f.filename == __file__ or f.filename.endswith(_HYDRA_INSTANTIATE)]
    return frames[calls[-1] + 1:] if calls else []


def _library_dirs() -> List[str]:
    """Where the standard library, installed packages and the launcher's own packages live."""
    import site

    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the launcher package's parent
    paths = sysconfig.get_paths()
    dirs = {paths["stdlib"], paths["purelib"], paths["platlib"], os.path.join(here, "launcher"), os.path.join(here, "hooks"),
            *getattr(site, "getsitepackages", lambda: [])(), site.getusersitepackages()}
    return [os.path.normcase(os.path.join(os.path.abspath(d), "")) for d in dirs if d]


def _raised_in_user_code(frames: List[traceback.FrameSummary]) -> Optional[str]:
    """``file:line in function`` of the innermost frame in the user's own code (not a library's), or None."""
    libraries = _library_dirs()
    for frame in reversed(frames):
        path = os.path.normcase(os.path.abspath(frame.filename))
        parts = set(path.split(os.sep))
        if frame.filename.startswith("<") or any(path.startswith(d) for d in libraries) or \
                {"site-packages", "dist-packages"} & parts:
            continue
        try:
            shown = os.path.relpath(frame.filename)
        except ValueError:  # another drive (Windows)
            shown = frame.filename
        return f"{frame.filename if shown.startswith('..') else shown}:{frame.lineno} in {frame.name}"
    return None


def _config_does_not_bind(target: Optional[str], sub: Any, supplied: Sequence[str]) -> bool:
    """Whether the config's keys (and ``supplied``) fail to bind to ``target``'s signature: the config's fault,
    however deep the TypeError was raised."""
    if not target or not isinstance(sub, DictConfig) or "_args_" in sub:
        return False
    try:
        signature = inspect.signature(get_object(target))
    except Exception:  # noqa: BLE001 -- no signature to check against
        return False
    given = {str(k): None for k in sub if not str(k).startswith("_")}
    given.update({name: None for name in supplied})
    try:
        (signature.bind_partial if sub.get("_partial_") else signature.bind)(**given)
    except TypeError:
        return True
    return False


def _cause(err: BaseException) -> BaseException:
    """What the built object raised, under Hydra's InstantiationException wrapper."""
    return err.__cause__ if isinstance(err, InstantiationException) and err.__cause__ else err


def explain(key: str, node: Any, err: BaseException, supplied: Sequence[str] = ()) -> ConfigError:
    """An exception raised building ``node`` (at ``key``) as a one-line ConfigError; ``supplied``: the launcher's
    own arguments."""
    cause = _cause(err)
    message = str(err)
    match = re.search(r"full_key: (\S+)", message)
    # OmegaConf names the node it failed in; a list the target was handed (AdamW's betas) names itself alone ("[1]")
    full_key = match.group(1) if match and match.group(1).startswith(key) else key
    sub = _node_at(node, key, full_key) if isinstance(node, DictConfig) else node
    target = _target_of(sub)
    if isinstance(err, InstantiationException) and message.startswith("Error locating target"):
        return ConfigError(f"{full_key}._target_: cannot import {target!r}: {why_not_importable(str(target))}")
    if isinstance(err, InstantiationException) and message.startswith("Expected a callable target"):
        kind = re.search(r"of type '([^']+)'", message)
        found = f"a {kind.group(1)}" if kind else "not callable"
        close = ""
        if kind and kind.group(1) == "module":  # the module of the class meant: name its classes
            module = importlib.import_module(str(target))
            classes = sorted(n for n, v in vars(module).items() if inspect.isclass(v) and v.__module__ == module.__name__
                             and not n.startswith("_"))
            close = f"; {target} has: {', '.join(classes[:8])}" if classes else ""
        return ConfigError(f"{full_key}._target_: {target} is {found}, not a class or function to build{close}")
    inside = _frames_inside(cause)
    # A TypeError about arguments is the config's when they do not bind to the target, or name a config key passed
    # on (**kwargs to a base class); not one raised by a call inside the user's __init__.
    named = re.search(r"argument:? '(\w+)'", str(cause))
    from_config = not inside or (named is not None and isinstance(sub, DictConfig) and named.group(1) in sub) or \
        (isinstance(cause, TypeError) and _config_does_not_bind(target, sub, supplied))
    signature_error = isinstance(cause, TypeError) and from_config and re.search(
        r"unexpected keyword argument|required (positional |keyword-only )?argument|takes \d+ positional", str(cause))
    own_check = str(cause).startswith(GROUPS)  # the object's own message, already naming its key (data.shuffle ...)
    mistyped = _mistyped(full_key, sub, target) if isinstance(cause, (ValueError, TypeError)) and not signature_error \
        and not own_check else None
    if mistyped:
        return ConfigError(f"{mistyped} ({target} raised {type(cause).__name__}: {_first_line(cause)})")
    if isinstance(cause, TypeError) and "argument" in str(cause) and from_config:
        partial = ""
        takes_partial = full_key == "optimizer" or full_key.endswith(".scheduler")  # the factories we call
        if "required positional argument" in str(cause) and isinstance(sub, DictConfig) and not sub.get("_partial_") \
                and takes_partial:
            partial = f"; set {full_key}._partial_: true (the launcher passes the parameters, or the optimizer, itself)"
        extra = ""
        if "unexpected keyword argument" in str(cause) and isinstance(sub, DictConfig):  # every one, not the first alone
            names = accepted_names(target, supplied)
            keys = [str(k) for k in sub.keys() if not str(k).startswith("_") and str(k) not in names]
            if names and keys:
                import sys

                def out(k: str) -> str:  # the override that added it, else the deletion that leaves the file's key out
                    given = [a for a in sys.argv[1:] if a.lstrip("+").partition("=")[0] == f"{full_key}.{k}"]
                    return f"drop {given[-1]}" if given else f"~{full_key}.{k}"

                extra = (f"; it takes none of the config's keys {', '.join(keys)} (leave them out: "
                         f"{', '.join(out(k) for k in keys)})" if len(keys) > 1 else f" (leave it out: {out(keys[0])})")
        return ConfigError(f"{full_key}: {target} rejected the config: {_first_line(cause)}{partial}{extra}"
                           f"{_accepted(target, supplied)}")
    if isinstance(cause, ConfigError):
        return cause
    if isinstance(cause, MissingMandatoryValue):
        return ConfigError(f"{full_key}: no value given (??? in the config); set it, e.g. {full_key}=<value>")
    if isinstance(cause, (ValueError, TypeError)) and own_check:
        return ConfigError(str(cause))
    where = f"{full_key} ({target})" if target else full_key
    raised_at = _raised_in_user_code(inside)
    at = f"; raised at {raised_at} (traceback in train.log, or with HYDRA_FULL_ERROR=1)" if raised_at else ""
    text = _first_line(cause).removesuffix(" ...") if isinstance(cause, OmegaConfBaseException) else str(cause)
    return ConfigError(f"{where}: {type(cause).__name__}: {text}{_given(sub)}{at}")


def _first_line(err: BaseException) -> str:
    """An exception's message cut to its first line (torch lists every overload of a function below it)."""
    text = str(err).strip()
    first = text.splitlines()[0] if text else type(err).__name__
    return first + (" ..." if first != text else "")


def build(key: str, node: Any, **kwargs: Any) -> Any:
    """``instantiate(node, **kwargs)``; any failure becomes a :class:`ConfigError` naming ``key``."""
    if isinstance(node, DictConfig) and "_target_" not in node:
        close = difflib.get_close_matches("_target_", [str(k) for k in node.keys()], n=1, cutoff=0.6)
        hint = f" ({key}.{close[0]} is there: a misspelt _target_?)" if close else ""
        raise ConfigError(f"{key}: no _target_ given{hint}; set {key}._target_ to the class or function to build")
    misfit = _misfit(key, node)
    if misfit:
        raise ConfigError(misfit)
    try:
        return instantiate(node, **kwargs)
    except Exception as err:
        if _from_distributed(err):
            raise  # a peer gone or a network fault while building (e.g. the trainer's broadcasts): not the config
        _raise_code_error(err)
        raise explain(key, node, err, supplied=list(kwargs)) from err


# Raised by the code being built, never by a config value: shown with the traceback that says where.
CODE_ERRORS = (NameError, SyntaxError)


def _raise_code_error(err: BaseException) -> None:
    cause = _cause(err)
    if isinstance(cause, CODE_ERRORS):
        raise cause from None


def _from_distributed(err: BaseException) -> bool:
    import torch.distributed as dist

    dist_error = getattr(dist, "DistError", ())
    return isinstance(err, dist_error) or isinstance(err.__cause__, dist_error)


def call(key: str, node: Any, factory: Any, *args: Any) -> Any:
    """``factory(*args)`` for a ``_partial_`` config at ``key``; failures become a :class:`ConfigError`."""
    try:
        return factory(*args)
    except Exception as err:
        _raise_code_error(err)
        raise explain(key, node, err) from err


def unknown_key_message(err: BaseException, overrides: Sequence[str] = ()) -> Optional[str]:
    """One line for an override of a key the config lacks (``trainer.max_epoch=3``), naming the close match and
    the keys accepted there; None for another error. ``overrides``: the command line's."""
    from dataclasses import is_dataclass

    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    cause = err.__cause__ or err.__context__  # a key in a config file: Hydra raises without ``from``
    parent = getattr(cause, "parent_node", None)
    if not isinstance(cause, (ConfigAttributeError, ConfigKeyError)) or not cause.full_key or not isinstance(parent, DictConfig):
        return None
    in_file = re.match(r"In '([^']+)': ", str(err))  # the key is set in a config file, not by an override
    full, key = str(cause.full_key), str(cause.key)
    where = full.rpartition(".")[0]
    if where == "hydra.launcher" and not [k for k in parent.keys() if not str(k).startswith("_")]:
        return (f"{full}: the basic launcher (the default) takes no options; {key} is one of another launcher's: "
                f"-m hydra/launcher=local (max_parallel), slurm or slurm_detached, then {full}=...")
    keys = [str(k) for k in parent.keys() if not str(k).startswith("_") and (where or k != "hydra")]
    fixed = isinstance(cause.object_type, type) and is_dataclass(cause.object_type)  # a schema: no new keys
    target = parent.get("_target_") if not fixed else None
    takes = [n for n in factory_arguments(str(target), parent.get("_partial_") is True) if n not in keys] \
        if isinstance(target, str) else []
    if takes and not in_file:  # a node of a _target_'s arguments (a scheduler's): new keys are its parameters
        if key in takes:
            return f"{full}: not in the config yet; {target} takes it: add it with +{full}=..."
        close = difflib.get_close_matches(key, keys + takes, n=1)
        hint = f"; did you mean {where}.{close[0]}?" if close else "."
        listed = f"{', '.join(keys)}; with +: " if keys else "(added with +) "
        return f"{full}: no such key in {where}{hint} Accepted there: {listed}{', '.join(takes)} (what {target} takes)"
    close = difflib.get_close_matches(key, keys, n=1)
    hint = f"; did you mean {where + '.' if where else ''}{close[0]}?" if close else "."
    given = [o.partition("=")[0] for o in overrides if "=" in o and not o.startswith(("+", "~", "-"))]
    deeper = next((k for k in given if k == full or k.startswith(full + ".")), full)  # the key the user set, under it
    if in_file or full == "hydra" or full.startswith("hydra."):
        add = ""  # a file's key is mended in the file; Hydra's settings take no keys of one's own
    elif fixed and not where:  # the top level: no _target_ takes its keys
        add = f" (a key of your own is added with +{deeper}=...)"
    elif fixed:  # the schema's keys are the built-in class's; a class of one's own may take more
        add = f" (an argument of a _target_ of your own that the schema lacks is added with +{full}=...)"
    elif where == "hooks":
        add = f" (a hook of your own is added with +hooks.{key}._target_=<module.Class>)"
        if key in _group_options("hooks", overrides):  # a built-in hook this run's preset leaves out
            add = (f" ({key} is an option of the hooks group: add it to the run's hooks, e.g. 'hooks=[default,{key}]', "
                   f"then set {deeper})")
    else:
        add = f" (a new key is added with +{deeper}=...)"
    accepted = f"Accepted there: {', '.join(keys)}" if keys else f"{where or 'The config'} has no keys yet"
    source = f" (set in config file {in_file.group(1)}.yaml)" if in_file else ""
    return f"{full}: no such key in {where or 'the config'}{source}{hint} {accepted}{add}"


def searchpath_override(overrides: Sequence[str]) -> List[str]:
    """The command line's last ``hydra.searchpath=[...]`` override, as a list of one (or none)."""
    return [o for o in overrides if o.lstrip("+").startswith("hydra.searchpath=")][-1:]


def _group_options(group: str, overrides: Sequence[str] = ()) -> List[str]:
    """The options of config ``group`` (with ``overrides``' ``hydra.searchpath``), while Hydra is initialized."""
    from hydra.core.global_hydra import GlobalHydra

    try:
        loader = GlobalHydra.instance().config_loader()
        return list(loader.get_group_options(group, overrides=searchpath_override(overrides)))
    except Exception:  # noqa: BLE001 -- not initialized, or the searchpath does not parse
        return []


def missing_option_message(err: BaseException, overrides: Sequence[str] = ()) -> Optional[str]:
    """One line for a group option that does not exist (``model=resnet``), naming the close match and the
    options there are; else None."""
    from hydra.core.global_hydra import GlobalHydra

    match = re.search(r"Could not (?:load|find) '([^']+)'", str(err))
    if not match or "/" not in match.group(1) or not GlobalHydra.instance().is_initialized():
        return None
    group, _, name = match.group(1).rpartition("/")
    options = _group_options(group, overrides)
    if not options:
        return None
    close = difflib.get_close_matches(name, options, n=1)
    by_target = _option_by_target(group, name, options, overrides)
    if by_target and close != [by_target[0]]:  # the name of what it builds, not of the option
        hint = f"; did you mean {by_target[0]!r} (its _target_ is {by_target[1]})?"
    else:
        hint = f"; did you mean {close[0]!r}?" if close else "."
    where = _defaults_list_naming(group, name, overrides)
    return f"{group}: there is no option {name!r}{where}{hint} Available: {', '.join(options)}"


def _config_repo(overrides: Sequence[str]) -> Any:
    """Hydra's (private) config repository, to load one config file with its defaults list unmerged."""
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader()
    return loader._parse_overrides_and_create_caching_repo(None, searchpath_override(overrides))[1]


def _option_by_target(group: str, name: str, options: Sequence[str], overrides: Sequence[str]) -> Optional[Tuple[str, str]]:
    """``(option, its _target_)`` for the option of ``group`` whose ``_target_``'s module or class is ``name``."""
    from omegaconf import OmegaConf

    def targets(node: Any) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "_target_" and isinstance(value, str):
                    yield value
                else:
                    yield from targets(value)

    wanted = name.replace("_", "").lower()
    try:
        repo = _config_repo(overrides)
        for option in options:
            result = repo.load_config(f"{group}/{option}")
            for target in targets(OmegaConf.to_container(result.config, resolve=False)) if result is not None else ():
                if wanted in (part.replace("_", "").lower() for part in target.split(".")[1:]):
                    return option, target
    except Exception:  # noqa: BLE001 -- Hydra's internals moved: the close name alone
        return None
    return None


def _defaults_list_naming(group: str, name: str, overrides: Sequence[str]) -> str:
    """`` (in <file>'s defaults list)`` where the missing option comes from a config file an override selected."""
    from hydra.core.default_element import GroupDefault

    selected = []
    for override in overrides:
        key, eq, value = override.lstrip("+").partition("=")
        if not eq or key.startswith("hydra"):
            continue
        if key.strip("/") == group and name in re.split(r"[\[\],\s]+", value):
            return ""  # the command line names it: the message's own key says where
        if re.fullmatch(r"[\w/.-]+", key) and re.fullmatch(r"[\w/.-]+", value):
            selected.append(f"{key}/{value}")
    try:
        repo = _config_repo(overrides)
        for config_path in selected:
            result = repo.load_config(config_path)
            for item in (result.defaults_list or []) if result is not None else ():
                values = item.value if isinstance(getattr(item, "value", None), list) else [getattr(item, "value", None)]
                if isinstance(item, GroupDefault) and item.group.strip("/") == group and name in values:
                    where = str(result.path)
                    file = (str(Path(where[len("file://"):]) / config_path) if where.startswith("file://")
                            else config_path) + ".yaml"
                    return f" (in {file}'s defaults list)"
    except Exception:  # noqa: BLE001 -- Hydra's internals moved: the message without the file
        return ""
    return ""


def _group_overrides(args: Sequence[str], wrong: Any) -> Iterator[Tuple[str, str, Any, List[str]]]:
    """``(arg, group, value, its options)`` for each override in ``args`` of a config group whose value ``wrong``
    says is no option name."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for arg in args:
        try:
            override = parser.parse_override(arg)
            value = override.value()
        except Exception:  # noqa: BLE001 -- not an override this is about
            continue
        if override.is_delete() or not wrong(value):
            continue
        options = _group_options(override.key_or_group)
        if options:
            yield arg, override.key_or_group, value, options


def group_value_message(err: BaseException) -> Optional[str]:
    """One line for a config group given a value that is no option name (``model=null``); else None."""
    import sys

    if not re.match(r"Config group override must be a string or a list", str(err)):
        return None
    for arg, group, _, options in _group_overrides(sys.argv[1:], lambda v: not isinstance(v, (str, list, dict))):
        return f"{arg}: {group} is a config group; give one of its options: {', '.join(options)}"
    return f"{err}: a config group takes an option name"


def group_list_message(err: BaseException, overrides: Sequence[str]) -> Optional[str]:
    """One line for a config group given a list holding no option name (``hooks=[1,2]``); else None."""
    if not isinstance(err, TypeError) or not any(frame.filename.endswith(os.path.join("hydra", "_internal", "defaults_list.py"))
                                                 for frame in traceback.extract_tb(err.__traceback__)):
        return None
    def wrong(value: Any) -> bool:
        return isinstance(value, list) and not all(isinstance(item, str) for item in value)

    for arg, group, value, options in _group_overrides(overrides, wrong):
        bad = next(v for v in value if not isinstance(v, str))
        return (f"{arg}: {'null' if bad is None else repr(bad)} is not an option of the config group {group}; a list "
                f"takes option names (e.g. {group}=[{','.join(options[:2])}]) from: {', '.join(options)}")
    return None


def _missing_key_listing(path: str) -> Optional[str]:
    """`` <parent> has: a, b`` for the keys beside ``path`` in the config of the other overrides; "" when it cannot
    be told, None when ``path`` is there, null."""
    import sys

    from hydra.core.global_hydra import GlobalHydra
    from hydra.types import RunMode

    parent = path.rpartition(".")[0]
    others = [a for a in sys.argv[1:] if "=" in a and not a.startswith(("-", "~"))]
    for overrides in (others, []):
        try:
            cfg = GlobalHydra.instance().config_loader().load_configuration("config", overrides, RunMode.RUN)
            node = OmegaConf.select(cfg, parent) if parent else cfg
        except Exception:
            continue
        if isinstance(node, DictConfig):
            keys = [str(k) for k in node.keys() if not str(k).startswith("_") and (parent or k != "hydra")]
            if path.rpartition(".")[2] in keys:  # there, but null: Hydra deletes only keys with a value
                return None
            close = difflib.get_close_matches(path.rpartition(".")[2], keys, n=1)
            hint = f"; did you mean {parent + '.' if parent else ''}{close[0]}?" if close else "."
            return f"{hint} {parent or 'The config'} has: {', '.join(keys)}"
    return ""


# An example value for the built-in schema's list keys.
_LIST_EXAMPLES = {"trainer.workflow": "[[train,2],[val,1]]"}


def _override_value(full_key: str, overrides: Sequence[str]) -> Optional[str]:
    """The value ``full_key`` was given on the command line, as typed (the last override of it), or None."""
    given = None
    for item in overrides:
        key, eq, value = item.partition("=")
        if eq and key.lstrip("+~") == full_key:
            given = value
    return given


def _shape_message(full_key: str, msg: str, cause: BaseException, overrides: Sequence[str]) -> Optional[str]:
    """A value of the wrong shape (one value for a list, a list for a string...) as the key, the value and what it
    takes; None for OmegaConf's other refusals."""
    given = _override_value(full_key, overrides)
    value = getattr(cause, "value", None)
    shown = given if given is not None else repr(value)
    if "is not a ListConfig, list or tuple" in msg or (msg.startswith("Cannot merge") and "object_type=list" in msg):
        return (f"{full_key}={shown}: this key takes a list, e.g. "
                f"{full_key}={_LIST_EXAMPLES.get(full_key, '[' + shown + ']')}")
    converted = re.match(r"Cannot convert '(\w+)' to string", msg)
    if converted:
        kind = {"list": "a list", "dict": "a group of settings"}.get(converted.group(1), converted.group(1))
        return f"{full_key}={shown}: this key takes one string (a path, a name), not {kind}"
    typed = re.match(r"Value '.*' of type '\w+' could not be converted to (Integer|Float)", msg)
    if typed:  # trainer.max_epochs=ten
        kind = {"Integer": "a whole number", "Float": "a number"}[typed.group(1)]
        current = getattr(cause, "child_node", None)  # the value the key had before the override: an example
        example = current._value() if hasattr(current, "_value") else None
        if value is not None:  # the value refused, not another override of the same key (max_epochs=ten max_epochs=2)
            shown = str(value)
        return f"{full_key}={shown}: this key takes {kind}" + (f", e.g. {full_key}={example}" if example is not None else "")
    if msg.startswith("Cannot merge DictConfig with"):
        return (f"{full_key}={shown}: {full_key} is a group of settings, not a single value or a list; set its keys "
                f"({full_key}.<key>=...)" + (", or drop it with null" if full_key == "data.val" else ""))
    return None


def composition_message(err: BaseException, overrides: Sequence[str] = ()) -> str:
    """Any error Hydra raises while composing the config, in one line naming the key, the value and what is
    accepted; ``overrides``: those it was composed with."""
    for message in (unknown_key_message(err, overrides), missing_option_message(err, overrides), group_value_message(err)):
        if message:
            return message
    text = str(err)
    cause = err.__cause__
    full_key = getattr(cause, "full_key", None)
    if full_key and "does not support deletion" in str(getattr(cause, "msg", "")):  # ~trainer.max_epochs
        return (f"~{full_key}: {full_key} is a setting of the built-in schema and cannot be deleted; give it a value "
                f"instead ({full_key}=...)")
    if full_key and getattr(cause, "msg", None):  # a value the schema refuses: trainer.max_epochs=ten
        if "is not Optional" in str(cause.msg):  # OmegaConf's words for null where the schema wants a value
            return f"{full_key}=null: this key needs a value; give one, e.g. {full_key}=<value>, or leave the override out"
        shaped = _shape_message(full_key, str(cause.msg), cause, overrides)
        first = str(cause.msg).strip().splitlines()[0]
        if not shaped and f"~{full_key}" in overrides and first.startswith("Interpolation key"):
            return (f"~{full_key}: {full_key} reads another key that an earlier ~ override deleted ({first}); "
                    f"put ~{full_key} before that deletion")
        return shaped or f"{full_key}: {first}"
    deleted = re.match(r"Could not delete from config\. '([^']+)' does not exist", text)
    if deleted:
        path = deleted.group(1)
        listing = _missing_key_listing(path)
        if listing is None:
            return f"~{path}: {path} is null (unset already): leave the override out, or give it a value with {path}=..."
        return f"~{path}: nothing to delete, {path} is not in the config{listing or '.'}"
    appended = re.match(r"Could not append to config\. An item is already at '([^']+)'\.\s*Either remove \+ prefix: '([^']+)'", text)
    if appended:
        key, plain = appended.groups()
        return f"+{plain}: {key} is in the config already; set it with {plain}, or add-or-set it with ++{plain}"
    override = getattr(err, "override", None)  # a bad override's grammar: name the override
    lines = re.sub(r"\s*\n\s*", "; ", text.strip())  # Hydra's own lines, joined
    return f"{override}: {lines}" if override and override not in lines else lines
