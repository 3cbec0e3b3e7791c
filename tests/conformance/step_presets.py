"""The presets' step in a real ``torch.distributed`` run (issue 37, item 4): verl-grpo, trl-grpo
(both of TRL's rules), verl and openrlhf (PPO, with their value losses) and openrlhf-grpo on
uneven layouts.

For each job a preset runs on a case with a ``layout`` (:mod:`ppo_numpy.oracle.presets._step`);
its advantages (and returns) are the framework's inputs, as the trainer has them before its
update. Each of the :data:`step_distributed.WORLD` ranks runs its micro-batches of the layout
through the framework's released trainer code, with the global counts obtained by real
collectives as the trainer obtains them:

* verl 0.9.1: ``verl/workers/utils/losses.py`` ``ppo_loss`` and ``value_loss`` themselves,
  with a real ``ActorConfig`` from verl's own trainer file (``verl_runner.verl_configs``) and
  the data the FSDP engine gives them: ``dp_size`` the world size, ``batch_num_tokens`` the
  all-reduce (sum) of the rank's response mask (``workers/engine/fsdp/transformer_impl.py``
  ``forward_backward_batch``), ``global_batch_size`` the step's rows; each loss's backward;
  the metrics each returns reduced as ``workers/engine_workers.py`` reduces them
  (``Metric.aggregate_dp`` over the ranks' lists, gathered by ``all_gather_object``);
* TRL 1.16.0: ``GRPOTrainer._compute_loss`` on a stand-in trainer (``GRPOConfig``'s
  defaults read from the class) whose accelerator's ``gather`` and ``reduce`` are real
  collectives, ``current_gradient_accumulation_steps`` the rank's micro-batches,
  ``num_items_in_batch`` the token count of the micro-batch's generation batch gathered over
  the ranks; the logged statistics the mean of each ``_metrics`` list, as ``GRPOTrainer.log``;
* OpenRLHF 0.11.2: ``PolicyLoss`` built from OpenRLHF's parsed arguments
  (``openrlhf_runner.policy_loss_of``, as ``trainer/ray/ppo_actor.py``), with
  ``--algo.kl.use_loss`` plus ``kl_ctl`` times the KL loss as ``training_step`` adds it
  (``openrlhf_runner.actor_kl_loss``: ``compute_approx_kl`` and ``aggregate_loss`` with the
  step's counts); its global counts from ``openrlhf/utils/loss_utils.py``
  ``iter_grad_accum_global_norm`` itself over the rank's micro-batches (gas = K; real
  all-reduces of the step's tokens and non-empty rows), each loss times 1 / gas as
  DeepSpeed's backward scales it; the statistics reduced as ``ppo_actor.py`` ``ppo_train``
  reduces them (each micro-batch's value times its tokens, summed over the ranks and the
  micro-batches, over the step's tokens). For ``openrlhf`` the critic too
  (``trainer/ray/ppo_critic.py``): ``ValueLoss(args.critic.value_clip)`` with its own
  ``iter_grad_accum_global_norm`` counts, 1 / gas, its ``critic_loss`` and ``values`` the
  mean over the micro-batches of the ranks' means (``strategy.all_reduce``). OpenRLHF's KL
  loss is float32 (:func:`float32_slack`).

Then the gradients of the leaves (log-probs, values) are all-reduced and divided by the
world size (DDP / FSDP). Compared with the preset's ``step/losses``, ``step/dlogp``,
``step/value_losses``, ``step/dvalues`` and its ``step/stat/...``; a difference names the
preset and its options, the layout, the micro-batch (rank and index) or token, and the
output. :data:`PLANTS`: one preset compared with a wrong normaliser, to show the failure.
"""

from __future__ import annotations

import numpy as np

#: relative tolerance against the largest magnitude of an output (both sides float64, the
#: same inputs; the sums and divisions in another order: a few units of 2^-52); the
#: statistics that verl and TRL take as float32 means of .float() flags get 2^-24 more
RTOL = 1e-12
STAT_RTOL = 2.0**-24 * 4
#: u, the unit roundoff of float32
U32 = 2.0**-24


def float32_slack(job) -> dict:
    """What OpenRLHF 0.11.2's float32 KL loss adds to a job's differences beyond
    :data:`RTOL` (absolute: ``"losses"``, ``"dlogp"``, ``"stat/kl"``); empty for a job
    without it.

    ``compute_approx_kl`` casts both log-probs to float32 (``openrlhf/models/utils.py`` line
    93), ``aggregate_loss`` sums the float32 KL and divides by the float32 ``batch_num_tokens``
    N / K, and ``kl_loss * kl_ctl`` stays float32 (``trainer/ray/ppo_actor.py`` lines 331,
    338); the preset computes it in float64. With S the sum over a micro-batch's n tokens of
    |logp| + |logp_ref|, each token's KL is off by at most 2u (|logp| + |logp_ref|), the sum
    adds (n - 1) u S, the division, P, beta and the product 5u more: the step loss (after
    1 / K) by u beta P / N (n + 6) S; the KL loss logged as ``kl`` (K times it, without beta)
    by u K P / N (n + 6) S. The k1 gradient is 1 through the casts; its chain (1 / K cast to
    float32, times beta, P, / (N / K)) rounds at most 6 times: u 6 beta / N per token of the
    averaged gradient. (On the job: loss slack 7.8e-8 on losses of order 0.3, gradient
    slack 5.0e-10 on entries up to 0.066; one token more or less in N moves the KL part beta
    kl of a loss by 1 / N ~ 3e-2 of itself, ~1e-4.) Derived for k1
    without ``kl_unbiased_gradient`` (ValueError for another job)."""
    from ppo_numpy.oracle.presets import get_preset

    name, params = job[0], step_case(job)["params"]
    p = {**get_preset(name).defaults, **params}
    if not (name in ("openrlhf", "openrlhf-grpo") and p["use_kl_loss"]):
        return {}
    if p["kl_estimator"] != "k1" or p["kl_unbiased_gradient"]:
        raise ValueError(f"{label(job)}: the float32 slack is derived for the k1 KL without "
                         "kl_unbiased_gradient")
    beta = p["beta"] if name == "openrlhf" else p["init_kl_coef"]
    case = step_case(job)
    x, layout = case["inputs"], case["layout"]
    m = np.asarray(x["mask"]) == 1
    size = np.where(m, np.abs(x["logp"]) + np.abs(x["logp_ref"]), 0.0)
    P, N = len(layout), int(m.sum())
    worst = max((int(m[rows].sum()) + 6) * float(size[rows].sum())
                for rank in layout for rows in rank)
    K = max(len(rank) for rank in layout)
    return {"losses": U32 * beta * P / N * worst, "dlogp": 6 * U32 * beta / N,
            "stat/kl": U32 * K * P / N * worst}


def uneven(B: int) -> list:
    """Two ranks of two micro-batches of 3 and 1, then 1 and B - 5 rows."""
    return [[[0, 1, 2], [3]], [[4], list(range(5, B))]]


def interleaved(B: int) -> list:
    """Two ranks of two micro-batches, the rows dealt round-robin (:func:`step_layout`)."""
    from ppo_numpy import step_layout

    return step_layout(B, 2, 2, "round-robin")


LAYOUTS = {"uneven": uneven, "interleaved": interleaved}

#: (preset, parameters, layout, steps_per_generation): the jobs compared
JOBS = [
    ("verl-grpo", {}, "uneven", None),
    ("verl-grpo", {"loss_agg_mode": "seq-mean-token-mean"}, "interleaved", None),
    ("verl-grpo", {"loss_agg_mode": "seq-mean-token-sum", "use_kl_loss": True,
                   "kl_loss_coef": 0.1}, "uneven", None),
    ("trl-grpo", {}, "uneven", None),
    ("trl-grpo", {}, "interleaved", 1),
    ("trl-grpo", {"loss_type": "grpo"}, "uneven", None),
    ("trl-grpo", {"loss_type": "bnpo", "beta": 0.04}, "interleaved", None),
    ("trl-grpo", {"loss_type": "dr_grpo"}, "uneven", None),
    ("verl", {}, "uneven", None),
    ("verl", {"loss_agg_mode": "seq-mean-token-mean", "use_kl_loss": True, "beta": 0.1},
     "interleaved", None),
    ("openrlhf-grpo", {}, "uneven", None),
    ("openrlhf-grpo", {"policy_loss_type": "gspo"}, "interleaved", None),
    ("openrlhf", {}, "uneven", None),
    ("openrlhf", {"use_kl_loss": True, "beta": 0.05, "loss_agg_mode": "seq-mean-token-mean"},
     "interleaved", None),
]

#: --plant: a preset whose jobs are compared with this wrong normaliser
PLANTS = {"verl-grpo": "micro-batch-mean", "trl-grpo": "micro-batch-mean",
          "verl": "micro-batch-mean", "openrlhf-grpo": "micro-batch-mean",
          "openrlhf": "micro-batch-mean"}


def label(job) -> str:
    preset, params, layout, S = job
    opts = ", ".join(f"{k}={v!r}" for k, v in params.items()) or "defaults"
    return f"{preset} ({opts}), {layout}" + (f", steps_per_generation={S}" if S else "")


def base_case(preset: str) -> dict:
    """The case a job steps through: the first group case (10 rows of uneven lengths) for the
    critic-free presets, the first random case (6 rows) for verl."""
    from ppo_numpy.oracle.group_cases import cases_for
    from ppo_numpy.oracle.presets import get_preset

    return cases_for(get_preset(preset), 0)[0]


def step_case(job) -> dict:
    preset, params, layout, S = job
    case = base_case(preset)
    B = case["inputs"]["mask"].shape[0]
    out = {**case, "params": {**case.get("params", {}), **params},
           "layout": LAYOUTS[layout](B)}
    if S is not None:
        out["steps_per_generation"] = S
    return out


def expected(job, plant: str | None = None) -> dict:
    """The preset's outputs on the job's case (with a wrong normaliser for ``plant``)."""
    from ppo_numpy.oracle.presets import get_preset

    preset = get_preset(job[0])
    wrong = {"normaliser": PLANTS[job[0]]} if plant == job[0] else {}
    return preset(step_case(job), **wrong)


def rank_inputs(job) -> dict:
    """What every rank needs: the case's arrays, the preset's advantages (and returns), the
    layout, the framework's options."""
    preset, params, layout, S = job
    case = step_case(job)
    out = expected(job)
    x = {k: np.asarray(v, dtype=np.float64) for k, v in case["inputs"].items()}
    m = x["mask"] == 1
    job_in = {"preset": preset, "params": case["params"], "layout": case["layout"], "S": S,
              "x": x, "advantages": out["advantages"],
              # TRL's (B,) advantages: each row's value (the same at every token)
              "A_row": out["advantages"][np.arange(m.shape[0]), np.argmax(m, axis=-1)]}
    if "returns" in out:
        job_in["returns"] = out["returns"]
    return job_in


# ---------------------------------------------------------------------------------------
# On each rank


def run_job(rank: int, job: dict, dist, torch) -> dict:
    """One job on this rank: its micro-batches, backward; the averaged gradients and the
    gathered losses and statistics (on every rank)."""
    if job["preset"] == "trl-grpo":
        losses, leaves, stats = _trl_job(rank, job, dist, torch)
        value_losses = None
    elif job["preset"] in ("openrlhf", "openrlhf-grpo"):
        losses, value_losses, leaves, stats = _openrlhf_job(rank, job, dist, torch)
    else:
        losses, value_losses, leaves, stats = _verl_job(rank, job, dist, torch)
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, (losses, value_losses))
    grads = {}
    for name, leaf in leaves.items():
        g = leaf.grad.clone() if leaf.grad is not None else torch.zeros_like(leaf)
        # DDP / FSDP: the ranks' accumulated gradients summed, then / world size
        dist.all_reduce(g, op=dist.ReduceOp.SUM)
        grads[name] = (g / dist.get_world_size()).numpy()
    out = {"step/losses": [v for r in every for v in r[0]], "step/dlogp": grads["logp"],
           "stats": stats}
    if value_losses is not None:
        out["step/value_losses"] = [v for r in every for v in r[1]]
        out["step/dvalues"] = grads["values"]
    return out


def _verl_job(rank, job, dist, torch):
    import dataclasses
    from unittest import mock

    from verl.utils.metric import Metric, reduce_metrics
    from verl.utils.py_functional import rename_dict
    from verl.workers.utils import losses as verl_losses

    from .harness import tensor
    from .verl_runner import TensorDictStandIn, _padded, response_mask, verl_configs

    x, layout = job["x"], job["layout"]
    actor, _, _, critic = verl_configs(job["preset"], {"params": job["params"]})
    # (this trainer's own global_batch_info, which ppo_loss fills)
    actor = dataclasses.replace(actor, global_batch_info={})
    mask_t = response_mask(x["mask"])
    mine = [int(i) for mb in layout[rank] for i in mb]
    # batch_num_tokens: the rank's loss mask summed, all-reduced over the data-parallel ranks
    n_tokens = mask_t[mine].sum()
    dist.all_reduce(n_tokens, op=dist.ReduceOp.SUM)
    counts = {"dp_size": dist.get_world_size(), "batch_num_tokens": int(n_tokens.item()),
              "global_batch_size": int(mask_t.shape[0])}
    critic_too = "returns" in job  # (the PPO preset: a value head)
    logp = tensor(x["logp"], grad=True)
    leaves = {"logp": logp}
    A = tensor(job["advantages"])
    if critic_too:
        leaves["values"] = values = tensor(x["values"], grad=True)
        R = tensor(job["returns"])
    losses, value_losses, metrics = [], [], []
    with mock.patch.object(verl_losses, "no_padding_2_padding", _padded):
        for rows in layout[rank]:
            data = TensorDictStandIn(response_mask=mask_t[rows], advantages=A[rows],
                                     old_log_probs=tensor(x["logp_old"][rows]),
                                     ref_log_prob=tensor(x["logp_ref"][rows]), **counts)
            total, pm = verl_losses.ppo_loss(actor, {"log_probs": logp[rows]}, data)
            total.backward()
            losses.append(total.item())
            # ray_trainer.py _update_actor: the actor's metrics prefixed "actor/"
            metrics.append(rename_dict(pm, "actor/"))
            if critic_too:
                vdata = TensorDictStandIn(values=tensor(x["old_values"][rows]),
                                          returns=R[rows], response_mask=mask_t[rows],
                                          **counts)
                vf_loss, vm = verl_losses.value_loss(critic, {"values": values[rows]}, vdata)
                vf_loss.backward()
                value_losses.append(vf_loss.item())
                metrics[-1].update(vm)
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, metrics)
    # workers/engine_workers.py: per key, the ranks' lists of micro-batch values; a Metric
    # by Metric.aggregate_dp, plain floats flattened, then reduce_metrics (np.mean)
    stats = {}
    for key in metrics[0]:
        per_rank = [[mb[key] for mb in ms] for ms in every]
        if isinstance(per_rank[0][0], Metric):
            lists = []
            for ms in per_rank:
                joined = Metric(ms[0].aggregation)
                for m in ms:
                    joined.extend(m)
                lists.append(joined)
            stats[key] = float(Metric.aggregate_dp(lists))
        else:
            stats[key] = float(reduce_metrics({key: [v for r in per_rank for v in r]})[key])
    return losses, value_losses if critic_too else None, leaves, stats


class _Accelerator:
    """What ``_compute_loss`` reads of TRL's accelerator, with real collectives: ``gather``
    (all-gather, concatenated; tensors of different lengths per rank through
    ``all_gather_object``), ``reduce`` (all-reduce)."""

    process_index = 0
    sync_gradients = True

    def __init__(self, dist, torch):
        self.dist, self.torch = dist, torch
        self.num_processes = dist.get_world_size()

    def gather(self, x):
        parts = [None] * self.num_processes
        self.dist.all_gather_object(parts, x.detach().reshape(-1))
        return self.torch.cat(parts)

    gather_for_metrics = gather

    def reduce(self, x, reduction="sum"):
        y = x.detach().clone()
        self.dist.all_reduce(y, op=self.dist.ReduceOp.SUM)
        return y if reduction == "sum" else y / self.num_processes


def _trl_job(rank, job, dist, torch):
    from .step_distributed import num_items_in_batch, trl_trainer

    x, layout, params = job["x"], job["layout"], job["params"]
    K = len(layout[rank])
    S = K if job["S"] is None else job["S"]
    current = {}
    # (the trainer's loss_type and beta: the job's, else GRPOConfig's defaults)
    t, defaults = trl_trainer(params.get("loss_type"), K, S, current, torch,
                              _Accelerator(dist, torch), beta=params.get("beta"))
    t.loss_type = params.get("loss_type", defaults["loss_type"])
    mask = torch.tensor(x["mask"], dtype=torch.int64)
    logp = torch.tensor(x["logp"], requires_grad=True)
    losses = []
    for k, rows in enumerate(layout[rank]):
        b = len(rows)
        current["logp"] = logp[rows]
        inputs = {"prompt_ids": torch.zeros((b, 1), dtype=torch.int64),
                  "prompt_mask": torch.ones((b, 1), dtype=torch.int64),
                  "completion_ids": torch.zeros_like(mask[rows]),
                  "completion_mask": mask[rows],
                  "advantages": torch.tensor(job["A_row"][rows]),
                  "old_per_token_logps": torch.tensor(x["logp_old"][rows]),
                  "ref_per_token_logps": torch.tensor(x["logp_ref"][rows]),
                  "num_items_in_batch": num_items_in_batch(layout, rank, k, S, mask, dist, torch)}
        loss = t._compute_loss(None, inputs)
        loss.backward()
        losses.append(loss.item())
    # GRPOTrainer.log: each metric the mean of its list (one value per micro-batch)
    stats = {k: sum(v) / len(v) for k, v in t._metrics["train"].items() if v}
    return losses, {"logp": logp}, stats


def _openrlhf_job(rank, job, dist, torch):
    """OpenRLHF 0.11.2's actor (``ppo_actor.py`` ``ppo_train`` and ``training_step``: the
    policy loss, and with ``--algo.kl.use_loss`` its KL loss) and, for the PPO preset, its
    critic (``ppo_critic.py``: ``ValueLoss``), each micro-batch with the step's counts from
    ``iter_grad_accum_global_norm`` (each trainer calls it on its own)."""
    from types import SimpleNamespace

    from openrlhf.models import ValueLoss
    from openrlhf.models.utils import masked_mean
    from openrlhf.utils.loss_utils import iter_grad_accum_global_norm

    from .harness import tensor
    from .openrlhf_runner import actor_kl_loss, parsed_args, policy_loss_of

    x, layout = job["x"], job["layout"]
    composition = {}
    if job["preset"] == "openrlhf-grpo":
        _, counts = np.unique(x["groups"], return_counts=True)
        composition["--rollout.n_samples_per_prompt"] = int(counts[0])
    args = parsed_args(job["preset"], {"inputs": x, "params": job["params"]}, None,
                       **composition)
    loss_fn = policy_loss_of(args)
    mask = tensor(x["mask"], dtype=torch.bool)
    logp = tensor(x["logp"], grad=True)
    old, ref, A = tensor(x["logp_old"]), tensor(x["logp_ref"]), tensor(job["advantages"])
    K = len(layout[rank])
    losses, mine = [], []
    # ppo_actor.py ppo_train: the micro-batches of the rank's step, each with the step's
    # counts (all-reduced over the ranks, / gas)
    for rows, info in iter_grad_accum_global_norm(iter(layout[rank]), SimpleNamespace(), K,
                                                  lambda rows: mask[rows]):
        pl, clip_ratio, ppo_kl, _, _ = loss_fn(logp[rows], old[rows], A[rows],
                                               action_mask=mask[rows], **info)
        n = int(mask[rows].sum())
        # training_step's metrics; ppo_train: value.float().mean().item() * n_tokens
        metrics = {"policy_loss": pl.detach().float().item() * n,
                   "ppo_clip_ratio": clip_ratio.float().item() * n,
                   "ppo_kl": ppo_kl.float().item() * n, "_n": n}
        total = pl
        if args.algo.kl.use_loss:
            # training_step: + kl_ctl times the KL loss, aggregated with the step's counts
            # (kl_ctl: ppo_trainer.py FixedKLController(args.algo.kl.init_coef), its value)
            kl_loss = actor_kl_loss(args, logp[rows], ref[rows], old[rows], mask[rows], **info)
            total = pl + kl_loss * args.algo.kl.init_coef
            metrics["kl"] = kl_loss.detach().float().item() * n
        # DeepSpeed's backward scales the loss by 1 / gas
        loss = total / K
        loss.backward()
        losses.append(loss.item())
        mine.append(metrics)
    every = [None] * dist.get_world_size()
    dist.all_gather_object(every, mine)
    flat = [mb for r in every for mb in r]
    total_n = sum(mb["_n"] for mb in flat)
    # (strategy.all_reduce of each micro-batch index's sums over the ranks, / its tokens, then
    # the step's list weighted by tokens: the sum over every micro-batch, / the step's tokens)
    stats = {k: sum(mb[k] for mb in flat) / total_n for k in mine[0] if k != "_n"}
    leaves = {"logp": logp}
    if "returns" not in job:
        return losses, None, leaves, stats
    # ppo_critic.py: ValueLoss(args.critic.value_clip), its own ppo_train over the same layout
    critic_fn = ValueLoss(args.critic.value_clip)
    leaves["values"] = values = tensor(x["values"], grad=True)
    old_values, R = tensor(x["old_values"]), tensor(job["returns"])
    value_losses, status = [], []
    for rows, info in iter_grad_accum_global_norm(iter(layout[rank]), SimpleNamespace(), K,
                                                  lambda rows: mask[rows]):
        vl = critic_fn(values[rows], old_values[rows], R[rows], action_mask=mask[rows], **info)
        (vl / K).backward()
        value_losses.append((vl / K).item())
        # training_step's status, then strategy.all_reduce (the mean over the ranks)
        status.append({"critic_loss": vl.detach().item(),
                       "values": masked_mean(values[rows], mask[rows]).detach().item()})
    dist.all_gather_object(every, status)
    # ppo_train: the mean over the micro-batches of the ranks' means (the same K on each)
    for key in ("critic_loss", "values"):
        stats[key] = float(np.mean([np.mean([r[k][key] for r in every]) for k in range(K)]))
    return losses, value_losses, leaves, stats


# ---------------------------------------------------------------------------------------
# Compared in the parent


#: the statistics the presets name otherwise than the frameworks' logs: none; a statistic
#: on one side only is not compared (verl's critic/vpred_mean, TRL's entropy of a stand-in)
def differences(job, got: dict, want: dict) -> list[str]:
    """What differs between the framework's step and the preset's, each line naming the
    preset and its options, the layout, the micro-batch or token, and the output."""
    out = []
    layout = step_case(job)["layout"]
    slack = float32_slack(job)
    where = [(r, k) for r, rank in enumerate(layout) for k in range(len(rank))]
    for name in ("step/losses", "step/value_losses"):
        if name not in want:
            continue
        if name not in got:
            out.append(f"{label(job)}: {name}: not returned by the framework")
            continue
        g, w = np.asarray(got[name]), np.asarray(want[name])
        if g.shape != w.shape:
            out.append(f"{label(job)}: {name}: {g.shape[0]} micro-batches (framework) vs "
                       f"{w.shape[0]} (preset)")
            continue
        scale = max(float(np.abs(w).max()), 1e-300)
        tol = RTOL * scale + (slack.get("losses", 0.0) if name == "step/losses" else 0.0)
        for (r, k), a, b in zip(where, g, w):
            if not abs(a - b) <= tol:
                out.append(f"{label(job)}: rank {r} micro-batch {k}: {name} {float(a)!r} "
                           f"(framework) vs {float(b)!r} (preset)")
    m = step_case(job)["inputs"]["mask"] == 1
    for name in ("step/dlogp", "step/dvalues"):
        if name not in want:
            continue
        g, w = np.where(m, got[name], 0.0), np.where(m, want[name], 0.0)
        err = np.abs(g - w)
        worst = np.unravel_index(np.argmax(err), err.shape)
        if err[worst] > RTOL * max(float(np.abs(w).max()), 1e-300) + slack.get(name[5:], 0.0):
            row = int(worst[0])
            r, k = next((r, k) for r, rank in enumerate(layout) for k, mb in enumerate(rank)
                        if row in mb)
            out.append(f"{label(job)}: rank {r} micro-batch {k}, token "
                       f"{tuple(map(int, worst))}: {name} {float(g[worst])!r} (framework) vs "
                       f"{float(w[worst])!r} (preset)")
    for name, value in sorted(got["stats"].items()):
        key = f"step/stat/{name}"
        if key not in want:
            continue
        b = want[key]
        if not abs(value - b) <= STAT_RTOL * max(abs(b), 1.0) + slack.get(f"stat/{name}", 0.0):
            out.append(f"{label(job)}: {key} {value!r} (framework) vs {b!r} (preset)")
    return out


def compared_stats(job, got: dict, want: dict) -> list[str]:
    """The statistics compared: those both sides have."""
    return sorted(k for k in got["stats"] if f"step/stat/{k}" in want)


def errors(job, got: dict, want: dict) -> tuple:
    """(worst relative error of the losses, of the gradients) against the preset's."""
    m = step_case(job)["inputs"]["mask"] == 1

    def rel(a, b):
        return float(np.abs(np.asarray(a) - np.asarray(b)).max()
                     / max(float(np.abs(np.asarray(b)).max()), 1e-300))

    loss = max(rel(got[k], want[k]) for k in ("step/losses", "step/value_losses") if k in want)
    grad = max(rel(np.where(m, got[k], 0.0), np.where(m, want[k], 0.0))
               for k in ("step/dlogp", "step/dvalues") if k in want)
    return loss, grad
