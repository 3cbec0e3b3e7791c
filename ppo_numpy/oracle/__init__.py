"""The test oracle: framework presets, test cases, golden files and comparisons.

* :mod:`ppo_numpy.oracle.presets`: one :class:`Preset` per framework convention
  (``seed``, ``trl``, ``trl-0.11``, ``verl``, ``openrlhf``, ``deepspeed-chat``,
  ``lm-human-preferences``) composing the core functions into that framework's
  pipeline; ``docs/conventions.md`` and ``docs/frameworks.md`` give the facts.
* :mod:`ppo_numpy.oracle.cases`: seeded random batches and named edge cases.
* :mod:`ppo_numpy.oracle.compare`, :mod:`ppo_numpy.oracle.golden`,
  :mod:`ppo_numpy.programs.oracle`: comparing an implementation against a preset,
  golden files, and ``python -m ppo_numpy oracle`` (``docs/oracle.md``).

>>> from ppo_numpy.oracle import get_preset
>>> get_preset("trl").defaults["lam"]
0.95
"""

from .presets import DEFAULT_PRESET, INPUT_NAMES, PRESETS, Preset, get_preset

__all__ = ["DEFAULT_PRESET", "INPUT_NAMES", "PRESETS", "Preset", "get_preset"]
