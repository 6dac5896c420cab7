"""Hooks: ``HookBase`` and the built-in hooks, one module per family."""
from hooks.base import EVENTS, HookBase, Priority

__all__ = ["EVENTS", "HookBase", "Priority"]
