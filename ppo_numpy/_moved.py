"""Module paths that moved in the redesign, kept importable (with a DeprecationWarning).

``import ppo_numpy.demo`` still works and gives the module now at
``ppo_numpy.programs.demo`` (the same module object), so code and docs written
against the old layout keep running; ``python -m`` on an old path runs the new
module. Listed here, in one place, instead of a stub file at every old path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

#: old dotted path -> new dotted path
MOVED = {
    "ppo_numpy.demo": "ppo_numpy.programs.demo",
    "ppo_numpy.walkthrough": "ppo_numpy.programs.walkthrough",
    "ppo_numpy.overoptimisation": "ppo_numpy.programs.overoptimisation",
    "ppo_numpy.kl_controllers": "ppo_numpy.training.kl_controllers",
    "ppo_numpy.training.cli": "ppo_numpy.programs.train",
    "ppo_numpy.explain.cli": "ppo_numpy.programs.explain",
    "ppo_numpy.explain.docs": "ppo_numpy.programs.hand_calculations",
    "ppo_numpy.oracle.cli": "ppo_numpy.programs.oracle",
    "ppo_numpy.policy.report": "ppo_numpy.programs.gradient_report",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, new: str):
        self.new = new

    def create_module(self, spec):
        return importlib.import_module(self.new)

    def exec_module(self, module):
        pass  # already executed under its new name

    def get_code(self, name):
        # for ``python -m old.path``: runpy executes the new module's code as __main__
        return importlib.util.find_spec(self.new).loader.get_code(self.new)


class _MovedFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        new = MOVED.get(name)
        if new is None:
            return None
        warnings.warn(f"{name} moved to {new}; import it from there", DeprecationWarning,
                      stacklevel=2)
        return importlib.util.spec_from_loader(name, _Alias(new))


def install() -> None:
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
