"""Hooks: ``HookBase`` and the built-in hooks, one module per family."""
from launcher.engine.hook import EVENTS, HookBase, Priority

__all__ = ["EVENTS", "HookBase", "Priority"]
