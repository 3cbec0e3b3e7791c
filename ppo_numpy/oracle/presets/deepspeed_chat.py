"""DeepSpeed-Chat's ``DeepSpeedPPOTrainer`` (preset ``deepspeed-chat``).
"""

from __future__ import annotations

from ..._checks import where_valid
from ...batch import Rollout
from ._common import (
    Preset,
    losses,
    masked_gae,
    masked_shaped_rewards,
    mean_rows,
    require_finite,
    require_prefix,
    result,
    slot_after,
    step_losses,
)
from ._step import normaliser_for

_DSCHAT = "microsoft/DeepSpeedExamples"
_DSCHAT_DIR = "applications/DeepSpeed-Chat"


def _deepspeed_chat(x: Rollout, p: dict, step=None) -> dict:
    """DeepSpeed-Chat's ``DeepSpeedPPOTrainer`` (microsoft/DeepSpeedExamples @ 3b458596,
    applications/DeepSpeed-Chat/dschat/rlhf/ppo_trainer.py).

    * Mask: a prefix of ones (``attention_mask[:, 1:]`` of a right-padded generation).
    * Rewards (``compute_rewards``): -0.1 (logp_old - logp_ref) on every column; the
      score, clipped to [-5, 5], one slot after the last token (the last column for
      a full row), and the KL of that slot (the first pad token) is kept:
      ``kl_shaped_rewards(..., mask=mask_p1, score_clip=5)``.
    * GAE (``train_rlhf``, ``get_advantages_and_returns``): rewards and rollout values
      zeroed after the slot after, so the value there is kept: ``gae(..., mask=mask_p1)``.
    * No advantage whitening.
    * Policy loss (``actor_loss_fn``): token mean over the response tokens (not the
      slot after), no log-ratio clamp, eps 0.2.
    * Value loss (``critic_loss_fn``): 1/2 max(...), clip 0.2 around the rollout
      values (``torch.clamp(values, old_values - c, old_values + c)``:
      ``value_clip_form="clamp"``), token mean over the response tokens.
    * Statistics: the TensorBoard scalars of training/step3_rlhf_finetuning/main.py
      @ 2d1f3b38 (the version that imports dschat): ``actor_loss``, ``critic_loss``,
      ``reward`` (mean raw score, before the clip).
    * A step over ranks and micro-batches (a case's layout: ``per_device_training_batch_size``
      rows a micro-batch, ``gradient_accumulation_steps`` of them): ``actor_loss_fn`` and
      ``critic_loss_fn`` take each micro-batch's own token means, and DeepSpeed's engine
      scales each backward loss by 1 / gradient_accumulation_steps and averages the ranks
      (``normaliser="micro-batch-mean"``).
    """
    name = "deepspeed-chat"
    m = x.mask
    require_prefix(name, m, "DeepSpeed-Chat counts response tokens to find the end")
    m_p1 = slot_after(m)
    require_finite(name, {"logp_old": x.logp_old, "logp_ref": x.logp_ref,
                           "old_values": x.old_values}, m_p1 & ~m,
                    "DeepSpeed-Chat reads at the slot after the last token")
    rewards = masked_shaped_rewards(x.scores, x.logp_old, x.logp_ref, p["beta"], m_p1, "k1",
                                score_clip=p["score_clip"])
    raw_advantages, returns_p1 = masked_gae(rewards, x.old_values, p["gamma"], p["lam"], m_p1)
    advantages = where_valid(m, raw_advantages)
    returns = where_valid(m, returns_p1)
    policy_loss, st, dlogp, vloss, dvalues = losses(x, advantages, returns, p, mask=m)
    stats = {
        "actor_loss": policy_loss,
        "critic_loss": vloss,
        "reward": mean_rows(x.scores),
    }
    out = result(rewards, advantages, returns, policy_loss, vloss, dlogp, dvalues, stats)
    if step is not None:
        norm = normaliser_for(p["normaliser"], "token-mean", step=step, n_rows=m.shape[0])
        out.update(step_losses(step, x, advantages, returns, p, mask=m, normaliser=norm,
                               value_normaliser=norm)[0])
    return out


PRESET = Preset(
    name="deepspeed-chat",
    description="DeepSpeed-Chat's DeepSpeedPPOTrainer (dschat): score clipped to 5 one "
                "slot after the last token, no whitening, beta 0.1.",
    defaults={"gamma": 1.0, "lam": 0.95, "beta": 0.1, "score_clip": 5.0, "epsilon": 0.2,
              "value_clip": 0.2},
    conventions={"value_clip_form": "clamp", "normaliser": "micro-batch-mean"},
    sources=(
        f"{_DSCHAT}: {_DSCHAT_DIR}/dschat/rlhf/ppo_trainer.py (DeepSpeedPPOTrainer."
        "compute_rewards, train_rlhf, actor_loss_fn, critic_loss_fn, "
        "get_advantages_and_returns) @ 3b458596",
        f"{_DSCHAT}: {_DSCHAT_DIR}/training/step3_rlhf_finetuning/main.py (main: "
        "TensorBoard scalars) @ 2d1f3b38",
    ),
    pipeline=_deepspeed_chat,
    takes_layout=True,
)
