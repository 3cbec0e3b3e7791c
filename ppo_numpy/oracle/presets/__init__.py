"""Framework presets: the core functions composed into each framework's PPO pipeline.

A preset takes one batch of rollout data (the :data:`INPUT_NAMES`) and returns
what that framework computes from it in one update on the whole batch (one
epoch, one minibatch): the per-token rewards, advantages and returns, the
policy and value losses, their gradients with respect to ``logp`` and
``values``, and the statistics the framework logs, under its own names::

    >>> from ppo_numpy.oracle.presets import get_preset
    >>> out = get_preset("verl")(case)                       # doctest: +SKIP
    >>> out["advantages"], out["stat/actor/pg_clipfrac"]      # doctest: +SKIP

One module per preset (``seed``, ``trl`` with TRL 0.11, ``verl``, ``openrlhf``,
``deepspeed_chat``, ``lm_human_preferences``, ``trl_grpo``, ``verl_grpo``,
``openrlhf_grpo``); each framework's own helpers in one module (``_trl``, ``_verl``,
``_openrlhf``: its rollout correction, verl's trainer aggregation); what every preset shares
in ``_common`` (the ``Preset`` type, reading a case, the masked compositions of the core
kernels, named apart from the public functions: ``masked_gae``, ``masked_whiten``, ...). A
case is checked once, into a :class:`~ppo_numpy.batch.Rollout`, and the
parameters once; the pipelines call the core kernels. Every choice a preset makes
is a keyword of a core function; each preset's docstring states the choices as
facts with the repository and file they come from (details and versions in
``docs/frameworks.md``; the settings side by side in ``docs/conventions.md``).
``"seed"``, the default, is the objective's own convention (docs/objective.md).

The case
--------
``case`` maps the :data:`INPUT_NAMES` to arrays: ``logp``, ``logp_old``,
``logp_ref`` (B, T) log-probs of the taken response tokens under the current,
rollout and reference policies; ``values`` (B, T) the value head being trained;
``old_values`` (B, T) the value head at rollout time (GAE input, value-clip
centre); ``scores`` (B,) the reward model's scores; ``mask`` (B, T), 1 for
response tokens; optionally ``logp_rollout`` (B, T), the inference engine's log-probs of
the same tokens, read by each preset's rollout-correction options (docs/conventions.md
section 14). A case in the form of :mod:`ppo_numpy.oracle.cases`
(``{"inputs": {...}, "params": {...}}``) is accepted too; its ``params`` are
overrides, and keyword overrides given to the call win over them.

Conventions shared by every preset
----------------------------------
* The KL penalty in the rewards uses ``logp_old``: every framework computes its
  rewards at rollout time, before the update.
* Outputs are float64 and exactly 0 where the framework does not use them:
  ``rewards`` outside the positions its GAE reads, ``advantages`` outside the
  policy loss's mask, ``returns`` outside the value loss's mask. Frameworks
  leave other numbers there (masked later); compare the used positions only.
* ``value_loss`` is the value loss *before* any ``vf_coef`` (which is in
  ``defaults`` where the framework adds the value loss to the policy loss).
* ``dlogp`` = d policy_loss / d logp and ``dvalues`` = d value_loss / d values
  (:mod:`ppo_numpy.grads.loss_grads`); the advantages and returns are constants.
* A case outside the framework's convention raises ValueError naming why (for
  example a mask that is not a prefix of ones for ``trl``, or padding in
  ``lm-human-preferences``, which has no mask).
"""

from __future__ import annotations

from . import (
    deepspeed_chat,
    lm_human_preferences,
    openrlhf,
    openrlhf_grpo,
    seed,
    trl,
    trl_grpo,
    verl,
    verl_grpo,
)
from ._common import GROUP_INPUT_NAMES, INPUT_NAMES, Preset

__all__ = ["DEFAULT_PRESET", "GROUP_INPUT_NAMES", "INPUT_NAMES", "PRESETS", "Preset",
           "get_preset"]

DEFAULT_PRESET = "seed"

#: name -> Preset, in the order of ``docs/conventions.md``
PRESETS = {p.name: p for p in (seed.PRESET, trl.PRESET, trl.PRESET_0_11, verl.PRESET,
                               openrlhf.PRESET, deepspeed_chat.PRESET,
                               lm_human_preferences.PRESET,
                               # the critic-free family (cases with groups, no values)
                               trl_grpo.PRESET, verl_grpo.PRESET, openrlhf_grpo.PRESET)}


def get_preset(name: str) -> Preset:
    """The preset called ``name``; ValueError listing the valid names otherwise.

    >>> get_preset("verl").defaults["dual_clip"]
    3.0
    """
    if name not in PRESETS:
        raise ValueError(f"preset: unknown preset {name!r}; valid ones are {', '.join(PRESETS)}")
    return PRESETS[name]


def as_preset(preset):
    """:func:`get_preset` of a name; anything else (a Preset, a callable) as it is."""
    return get_preset(preset) if isinstance(preset, str) else preset
