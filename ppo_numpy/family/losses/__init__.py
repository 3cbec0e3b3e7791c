"""The policy-loss family as a table: ``loss_type`` -> its member (docs/conventions.md
section 15).

Each member is one module with its forward, its gradient ``d<name>`` and its statistics
(:class:`~ppo_numpy.family.losses.entry.Loss` says what it gives). The policy loss
(:mod:`ppo_numpy.policy_loss.kernel`) looks the member up here by name and writes once what
wraps every member: the ratio (clamp, sequence level, cap), the rollout weights, the
aggregation and the KL term.

=========  ========  ==============================================================
loss_type  module    term (to maximise)
=========  ========  ==============================================================
clip       clip      min(rho A, clip(rho, 1 - eps, 1 + eps_high) A): PPO, the default
cispo      cispo     sg(w) A logp, w the clipped ratio
vespo      vespo     sg(phi_i) A logp, phi a Gamma weight of the sequence ratio
sapo       sapo      g(rho) A, g a smooth gate
geo_mean   gmpo      s_i Abar_i, s_i the geometric mean of the token ratios (GMPO)
gpg        gpg       A logp
clip_cov   cov       the clipped term, tokens of large covariance dropped
kl_cov     cov       rho A - coef abs(log rho) on tokens of large covariance
dppo_tv    dppo      sg(min(rho, c)) v A logp, v the total-variation trust region
dppo_kl    dppo      the same, v the binary-KL trust region
dro        dro       A logp - (beta / 2) (log rho)^2
=========  ========  ==============================================================

GSPO is the ``clip`` member at ``importance_level="sequence"`` (the ratio is the sequence ratio
s_i); LUSPO is GSPO aggregated by ``agg="luspo"``; Dr. GRPO is ``clip`` aggregated by
``"dr_grpo"``.

A new member: one module that builds a ``Loss``, and one line in :data:`LOSSES`. A loss can
also be registered without touching the package (:func:`register`), as
``tests/test_loss_table.py`` does with a toy loss.
"""

from __future__ import annotations

from . import cispo, clip, cov, dppo, dro, gmpo, gpg, sapo, vespo
from .entry import Loss

__all__ = ["LOSSES", "Loss", "register"]

#: loss_type -> its member
LOSSES = {
    "clip": clip.LOSS,
    "cispo": cispo.LOSS,
    "vespo": vespo.LOSS,
    "sapo": sapo.LOSS,
    "geo_mean": gmpo.LOSS,
    "gpg": gpg.LOSS,
    "clip_cov": cov.CLIP_COV,
    "kl_cov": cov.KL_COV,
    "dppo_tv": dppo.TV,
    "dppo_kl": dppo.KL,
    "dro": dro.LOSS,
}


def register(name: str, loss: Loss) -> None:
    """Add ``loss`` to the table under ``name`` (a new name; TypeError for anything but a
    :class:`Loss`, ValueError for a name already there)."""
    if not isinstance(loss, Loss):
        raise TypeError(f"loss: expected a Loss, got {type(loss).__name__}")
    if not isinstance(name, str) or not name or name in LOSSES:
        raise ValueError(f"name: expected a new loss type's name, got {name!r}")
    LOSSES[name] = loss
