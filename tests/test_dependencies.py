"""The dependencies whose internals the launcher reaches into are pinned below their next release."""
from __future__ import annotations

import tomllib
from importlib import metadata

from packaging.requirements import Requirement

from conftest import REPO

# Packages whose private modules or attributes the launcher uses (hydra._internal, submitit's executors and
# job classes, the submitit launcher plugin's classes): a release may change them without notice.
REACHED_INTO = {"hydra-core": "1.4", "omegaconf": "2.4", "submitit": "1.6", "hydra-submitit-launcher": "1.3"}


def declared() -> dict:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return {Requirement(line).name.lower(): Requirement(line) for line in project["dependencies"]}


def test_packages_reached_into_have_an_upper_bound_that_the_installed_version_meets():
    requirements = declared()
    for name, first_untested in REACHED_INTO.items():
        spec = requirements[name].specifier
        assert not spec.contains(first_untested), f"{name}: {spec} admits {first_untested}, whose internals are untested"
        installed = metadata.version(name)
        assert spec.contains(installed), f"{name} {installed} is installed, outside the declared {spec}"
