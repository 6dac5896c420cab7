"""The error a user's bad input ends in: the CLI prints its one-line message and exits 2."""
from __future__ import annotations


class ConfigError(ValueError):
    """A config value that cannot be built or used; the message names the key and what is accepted."""
