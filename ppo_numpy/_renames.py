"""Names of the contract renamed so that each symbol has one name (docs/conventions.md, "One
name per symbol"), the old spellings kept working with a DeprecationWarning naming the new one.

* the clip width epsilon is ``epsilon`` (and ``epsilon_high``) everywhere: the ``PPOConfig``
  field ``eps`` (so config files, checkpoints and ``train --eps``) and ``explain``'s ``--eps``
  and ``--eps-high`` are the old spellings;
* the epsilon added to a standard deviation (or to the variance under its square root) is
  ``std_eps``, as the presets' option of that name: ``eps=`` of ``whiten``,
  ``grpo_advantages``, ``grpo_passk_advantages``, ``gdpo_advantages``,
  ``reinforce_plus_plus_advantages`` and ``reinforce_plus_plus_baseline_advantages``, the
  ``PPOConfig`` field ``grpo_eps`` and ``explain grpo --eps`` are the old spellings.
"""

from __future__ import annotations

import argparse
import warnings

#: PPOConfig fields (config files, checkpoints, the train command's flags): old -> new
CONFIG_FIELDS = {"eps": "epsilon", "grpo_eps": "grpo_std_eps"}


def warn_renamed(where: str, old: str, new: str, stacklevel: int = 3) -> None:
    """The DeprecationWarning of an old spelling: ``"<where>: <old> is deprecated, use <new>"``."""
    warnings.warn(f"{where}: {old} is deprecated, use {new} (the same value; one name per "
                  "symbol, docs/conventions.md)", DeprecationWarning, stacklevel=stacklevel)


def renamed_keyword(where: str, renamed: dict, old: str, new: str, value, default):
    """The value of keyword ``new`` of the function ``where``, taking the old spelling ``old``
    from ``renamed`` (the function's ``**renamed``) with a DeprecationWarning.

    Any other name in ``renamed`` is a TypeError, as Python's for an unknown keyword; the old
    and the new spelling together (``new`` not at its default) are a TypeError too.

    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     renamed_keyword("whiten", {"eps": 0.5}, "eps", "std_eps", 1e-8, 1e-8)
    ...     str(w[0].message)[:42]
    0.5
    'whiten: eps= is deprecated, use std_eps= ('
    >>> renamed_keyword("whiten", {}, "eps", "std_eps", 0.1, 1e-8)
    0.1
    """
    unknown = sorted(set(renamed) - {old})
    if unknown:
        raise TypeError(f"{where}() got an unexpected keyword argument {unknown[0]!r}")
    if old not in renamed:
        return value
    warn_renamed(where, f"{old}=", f"{new}=", stacklevel=4)
    if value is not default and value != default:
        raise TypeError(f"{where}: {old}= is the old spelling of {new}=; pass {new}= alone")
    return renamed[old]


def renamed_fields(where: str, fields: dict, renames: dict = CONFIG_FIELDS,
                   stacklevel: int = 4) -> dict:
    """``fields`` with each old name of ``renames`` replaced by its new one (a
    DeprecationWarning each); both spellings of one field are a TypeError."""
    out = dict(fields)
    for old, new in renames.items():
        if old in out:
            warn_renamed(where, old, new, stacklevel=stacklevel)
            if new in out:
                raise TypeError(f"{where}: {old} is the old spelling of {new}; give {new} alone")
            out[new] = out.pop(old)
    return out


class RenamedOption(argparse.Action):
    """A command-line option's old spelling: stores into the new option's ``dest`` with a
    DeprecationWarning naming the new option (shown: a command's user is the one to tell)."""

    def __init__(self, option_strings, dest, new_option, **kwargs):
        self.new_option = new_option
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        with warnings.catch_warnings():
            warnings.simplefilter("always", DeprecationWarning)
            warn_renamed(parser.prog, option_string, self.new_option, stacklevel=2)
        setattr(namespace, self.dest, values)
