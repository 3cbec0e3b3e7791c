"""One optimizer step in a real ``torch.distributed`` run against ``ppo_numpy.policy_step``
(issue 37, item 4).

Two processes on this machine, the gloo backend on the loopback address and a free port,
started and joined here (:func:`run_step_conformance`; nothing is left running: a process
still alive at the time limit is terminated). Each rank holds the whole batch's
log-probabilities as one leaf tensor (the parameters of this toy "model": d loss / d logp is
what its gradient would be propagated from) and runs, for each case, its micro-batches of the
layout through the framework's released loss code:

* verl 0.9.1: ``core_algos.get_policy_loss_fn("vanilla")``, whose ``agg_loss`` reads
  ``config.global_batch_info``, filled as ``verl/workers/utils/losses.py`` ``ppo_loss`` fills
  it: ``dp_size`` the world size, ``batch_num_tokens`` the all-reduce (sum) of the rank's loss
  mask over the ranks (``verl/workers/engine/fsdp/transformer_impl.py``
  ``forward_backward_batch``), ``global_batch_size`` the step's rows (``ppo_mini_batch_size *
  rollout.n``), ``loss_scale_factor`` the config's;
* TRL 1.16.0: ``GRPOTrainer._compute_loss`` on a stand-in trainer, with
  ``current_gradient_accumulation_steps`` the rank's micro-batches, ``num_processes`` the world
  size, ``steps_per_generation`` the case's, and ``num_items_in_batch`` the token count of the
  micro-batch's generation batch gathered over the ranks and summed (``accelerator.gather(
  loss_mask.sum()).sum()`` in ``_generate_and_score_completions``).

Each micro-batch's loss is backpropagated into the leaf (the gradients of a rank's
micro-batches add), then the leaf's gradient is all-reduced (sum) and divided by the world
size, as DDP and FSDP average gradients. The losses (rank-major, then micro-batch order) and
the averaged gradient are compared with ``policy_step``'s ``step/losses`` and ``step/dlogp``
for the case's :class:`ppo_numpy.Normaliser`; a difference names the convention, the
micro-batch (rank and index) or the token, and the output.

``python -m tests.conformance.step_distributed`` runs it alone (exit 1 on a difference);
``--plant NAME`` compares one convention with a wrong normaliser, to show the failure.
Runs in ``.venv-conformance``; the conformance run can call :func:`run_step_conformance`.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

#: the world size: two processes
WORLD = 2
#: relative tolerance of a loss or a gradient entry against ppo_numpy's, both float64: the
#: frameworks divide in another order (verl sum / N * P, ppo_numpy sum / (N / P)) and sum the
#: tokens in another order, a few units of 2^-52 of the largest term of each sum; 1e-12 of
#: the output's largest magnitude still catches any weight off by more than that (a wrong
#: count moves a weight by 1 / N at least, 1e-3 here)
RTOL = 1e-12


def batch(seed=37, B=8, T=9):
    """The step's batch: lengths 9, 1, 4, 0, 7, 2, 9, 3 (one response without a token),
    log-ratios in [-0.35, 0.35], one advantage per response (TRL's (B,) advantages)."""
    rng = np.random.default_rng(seed)
    lengths = np.array([9, 1, 4, 0, 7, 2, 9, 3])[:B]
    m = (np.arange(T)[None, :] < lengths[:, None]).astype(np.float64)
    logp_old = np.where(m == 1, rng.uniform(-2.5, -0.2, (B, T)), 0.0)
    logp = np.where(m == 1, logp_old + rng.uniform(-0.35, 0.35, (B, T)), 0.0)
    A_row = rng.normal(0.0, 1.0, B)
    return {"logp": logp, "logp_old": logp_old, "mask": m, "A_row": A_row,
            "advantages": m * A_row[:, None]}


#: uneven layouts of the 8 rows over the 2 ranks, 2 micro-batches each (verl runs the same
#: number on every rank, ``same_micro_num_in_dp``; TRL too)
LAYOUTS = {
    "uneven rows": [[[0, 1, 2], [3]], [[4], [5, 6, 7]]],
    "interleaved": [[[0, 2], [4, 6]], [[1, 3], [5, 7]]],
}

#: the cases: (framework, mode, layout name, steps_per_generation for TRL's num-items rule)
CASES = ([("verl", mode, layout, None)
          for mode in ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                       "seq-mean-token-sum-norm", "token-sum") for layout in LAYOUTS]
         + [("trl", loss_type, layout, None)
            for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo") for layout in LAYOUTS]
         + [("trl", "dapo", layout, 1) for layout in LAYOUTS])


def label(case) -> str:
    framework, mode, layout, S = case
    return f"{framework} {mode}, {layout}" + (f", steps_per_generation={S}" if S else "")


# ---------------------------------------------------------------------------------------
# The ranks


def _verl_losses(rank, x, layout, mode, dist, torch):
    from verl.trainer.ppo import core_algos
    from verl.workers.config import ActorConfig, PolicyLossConfig

    cfg = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1,
                      loss_agg_mode=mode, policy_loss=PolicyLossConfig(loss_mode="vanilla"))
    mask = torch.tensor(x["mask"])
    mine = [int(i) for mb in layout[rank] for i in mb]
    # batch_num_tokens: the rank's loss mask summed, all-reduced over the ranks
    n_tokens = mask[mine].sum()
    dist.all_reduce(n_tokens, op=dist.ReduceOp.SUM)
    cfg.global_batch_info.update(dp_size=dist.get_world_size(),
                                 batch_num_tokens=n_tokens.item(),
                                 global_batch_size=int(mask.shape[0]),
                                 loss_scale_factor=cfg.loss_scale_factor)
    fn = core_algos.get_policy_loss_fn(cfg.policy_loss.loss_mode)
    logp = torch.tensor(x["logp"], requires_grad=True)
    losses = []
    for rows in layout[rank]:
        pg_loss, _ = fn(old_log_prob=torch.tensor(x["logp_old"][rows]), log_prob=logp[rows],
                        advantages=torch.tensor(x["advantages"][rows]),
                        response_mask=mask[rows].bool(), loss_agg_mode=mode, config=cfg)
        pg_loss.backward()
        losses.append(pg_loss.item())
    options = {"epsilon": cfg.clip_ratio_low if cfg.clip_ratio_low is not None
               else cfg.clip_ratio,
               "epsilon_high": cfg.clip_ratio_high if cfg.clip_ratio_high is not None
               else cfg.clip_ratio,
               "dual_clip": cfg.clip_ratio_c, "log_ratio_clamp": 20.0}
    return losses, logp, options, {"norm": cfg.loss_scale_factor}


class _Accelerator:
    """What ``_compute_loss`` reads of TRL's accelerator: the world size; its metrics are
    gathered locally (they are not compared)."""

    process_index = 0
    sync_gradients = True

    def __init__(self, num_processes):
        self.num_processes = num_processes

    def gather(self, x):
        return x

    def gather_for_metrics(self, x):
        return x

    def reduce(self, x, reduction="sum"):
        return x


def num_items_in_batch(layout, rank, k, S, mask, dist, torch):
    """TRL's ``num_items_in_batch`` for micro-batch ``k`` of ``rank``: the tokens of its
    generation batch (this rank's micro-batches g S ... g S + S - 1, g = k // S), gathered
    over the ranks by a real all-gather and summed."""
    g = k // S
    gen_rows = [int(i) for mb in layout[rank][g * S:(g + 1) * S] for i in mb]
    local = mask[gen_rows].sum().to(torch.float64).reshape(1)
    gathered = [torch.zeros(1, dtype=torch.float64) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, local)
    return torch.cat(gathered).sum()


def trl_trainer(loss_type, K, S, current, torch, accelerator, beta=None):
    """A stand-in GRPOTrainer with GRPOConfig's defaults (read from the class's fields), the
    step's K (``current_gradient_accumulation_steps``), S (``steps_per_generation``), the
    accelerator given and ``beta`` (None: GRPOConfig's); its model's log-probs are
    ``current["logp"]`` when ``_compute_loss`` asks (the caller sets them per micro-batch).
    ``(trainer, defaults)``."""
    import dataclasses
    from collections import defaultdict
    from types import SimpleNamespace

    from trl.trainer.grpo_config import GRPOConfig
    from trl.trainer.grpo_trainer import GRPOTrainer

    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)
                if f.default is not dataclasses.MISSING}

    class Trainer:
        _compute_loss = GRPOTrainer._compute_loss
        get_gamma_weights = GRPOTrainer.__dict__["get_gamma_weights"]
        get_off_policy_mask = staticmethod(GRPOTrainer.get_off_policy_mask)

        def _get_per_token_logps_and_entropies(self, *args, **kwargs):
            return current["logp"], torch.zeros_like(current["logp"]), None

    t = Trainer()
    t.args = SimpleNamespace(**{**defaults, "steps_per_generation": S})
    eps = defaults["epsilon"]
    t.loss_type, t.beta = loss_type, defaults["beta"] if beta is None else beta
    t.epsilon_low = eps
    t.epsilon_high = eps if defaults["epsilon_high"] is None else defaults["epsilon_high"]
    t.importance_sampling_level = defaults["importance_sampling_level"]
    t.max_completion_length = defaults["max_completion_length"]
    t.top_entropy_quantile = defaults["top_entropy_quantile"]
    t.off_policy_mask_threshold = defaults["off_policy_mask_threshold"]
    t.use_vllm = False
    t.vllm_importance_sampling_correction = False
    t.aux_loss_enabled, t._entropy_bonus_enabled = False, False
    t.current_gradient_accumulation_steps = K
    t.model = SimpleNamespace(training=True)
    t.accelerator = accelerator
    t._metrics = {"train": defaultdict(list), "eval": defaultdict(list)}
    return t, defaults


def _trl_losses(rank, x, layout, loss_type, S, dist, torch):
    K = len(layout[rank])
    S = K if S is None else S
    mask = torch.tensor(x["mask"], dtype=torch.int64)
    logp = torch.tensor(x["logp"], requires_grad=True)
    losses = []
    for k, rows in enumerate(layout[rank]):
        trainer, defaults = trl_trainer(loss_type, K, S, {"logp": logp[rows]}, torch,
                                        _Accelerator(dist.get_world_size()))
        b = len(rows)
        inputs = {"prompt_ids": torch.zeros((b, 1), dtype=torch.int64),
                  "prompt_mask": torch.ones((b, 1), dtype=torch.int64),
                  "completion_ids": torch.zeros_like(mask[rows]),
                  "completion_mask": mask[rows],
                  "advantages": torch.tensor(x["A_row"][rows]),
                  "old_per_token_logps": torch.tensor(x["logp_old"][rows]),
                  "num_items_in_batch": num_items_in_batch(layout, rank, k, S, mask, dist, torch)}
        loss = trainer._compute_loss(None, inputs)
        loss.backward()
        losses.append(loss.item())
    eps_high = defaults["epsilon"] if defaults["epsilon_high"] is None else defaults[
        "epsilon_high"]
    options = {"epsilon": defaults["epsilon"], "epsilon_high": eps_high}
    normaliser = {"norm": defaults["max_completion_length"]} if loss_type == "dr_grpo" else {}
    if S is not None and loss_type in ("dapo", "cispo", "vespo"):
        normaliser["steps_per_generation"] = S
    return losses, logp, options, normaliser


def _rank(rank, port, out_dir, cases, jobs=()):
    """One process: every case's micro-batches, backward, the gradient all-reduced; then
    every preset job (:mod:`step_presets`)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    import logging
    import warnings

    from tests.conformance import stubs

    # (the frameworks' import-time warnings about the stubbed packages, as run.py)
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    stubs.install()
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=WORLD)
    try:
        x = batch()
        results = {}
        for i, (framework, mode, layout_name, S) in enumerate(cases):
            layout = LAYOUTS[layout_name]
            if framework == "verl":
                losses, logp, options, normaliser = _verl_losses(rank, x, layout, mode, dist,
                                                                 torch)
            else:
                losses, logp, options, normaliser = _trl_losses(rank, x, layout, mode, S, dist,
                                                                torch)
            # DDP / FSDP: the ranks' accumulated gradients summed, then / world size
            grad = logp.grad.clone()
            dist.all_reduce(grad, op=dist.ReduceOp.SUM)
            grad /= dist.get_world_size()
            every = [None] * dist.get_world_size()
            dist.all_gather_object(every, losses)
            results[i] = {"losses": [v for r in every for v in r], "dlogp": grad.numpy(),
                          "options": options, "normaliser": normaliser}
        from tests.conformance import step_presets

        jobs_out = [step_presets.run_job(rank, job, dist, torch) for job in jobs]
        if rank == 0:
            import pickle

            (Path(out_dir) / "results.pkl").write_bytes(pickle.dumps(
                {"cases": results, "jobs": jobs_out}))
        # why: rank 0 holds the TCP store; a rank that tears its group down while the other
        # is still in it aborted gloo's threads ("terminate called without an active
        # exception", SIGABRT, 1 run in 4): both leave together
        dist.barrier()
    finally:
        dist.destroy_process_group()


# ---------------------------------------------------------------------------------------
# Started, joined and compared here


def free_port() -> int:
    """A TCP port free on the loopback address now (the OS's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(cases, timeout=300.0, jobs=()) -> dict:
    """Start :data:`WORLD` processes (spawned), wait for them, return rank 0's results
    (``{"cases": {i: ...}, "jobs": [...]}``); a process alive at ``timeout`` seconds is
    terminated (RuntimeError)."""
    import pickle

    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as out_dir:
        ctx = mp.start_processes(_rank, args=(free_port(), out_dir, cases, list(jobs)),
                                 nprocs=WORLD, join=False, start_method="spawn")
        deadline = time.monotonic() + timeout
        try:
            while not ctx.join(timeout=1.0):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the {WORLD} ranks did not finish in {timeout:g} s")
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.terminate()
                p.join()
        return pickle.loads((Path(out_dir) / "results.pkl").read_bytes())


def expected(case, options, normaliser):
    """ppo_numpy's step for the case: ``policy_step`` with the framework's loss options and
    the case's normaliser."""
    from ppo_numpy import Normaliser, policy_step

    framework, mode, layout_name, _ = case
    x = batch()
    if framework == "verl":
        # the trainer's global_batch_size: every row of the step
        given = {"global_batch_size": x["mask"].shape[0]} if mode.startswith("seq-") else {}
        if normaliser.get("norm") is not None and mode == "seq-mean-token-sum-norm":
            given["norm"] = normaliser["norm"]
        norm = Normaliser("verl", mode, **given)
    else:
        norm = Normaliser(framework, mode, **normaliser)
    return policy_step(x["logp"], x["logp_old"], x["advantages"], x["mask"],
                       LAYOUTS[layout_name], norm, **options)


def differences(case, got, want) -> list[str]:
    """What differs between the framework's step and ppo_numpy's, each naming the
    convention, the micro-batch or token, and the output."""
    out = []
    layout = LAYOUTS[case[2]]
    where = [(r, k) for r, rank in enumerate(layout) for k in range(len(rank))]
    g_loss, w_loss = np.asarray(got["losses"]), want["step/losses"]
    scale = max(np.abs(w_loss).max(), 1e-300)
    for (r, k), a, b in zip(where, g_loss, w_loss):
        if not abs(a - b) <= RTOL * scale:
            out.append(f"{label(case)}: rank {r} micro-batch {k}: step/losses {float(a)!r} "
                       f"(framework) vs {float(b)!r} (ppo_numpy)")
    g, w = got["dlogp"], want["step/dlogp"]
    err = np.abs(g - w)
    worst = np.unravel_index(np.argmax(err), err.shape)
    if err[worst] > RTOL * max(np.abs(w).max(), 1e-300):
        row = int(worst[0])
        r, k = next((r, k) for r, rank in enumerate(layout) for k, mb in enumerate(rank)
                    if row in mb)
        out.append(f"{label(case)}: rank {r} micro-batch {k}, token {tuple(map(int, worst))}: "
                   f"step/dlogp {float(g[worst])!r} (framework) vs {float(w[worst])!r} "
                   "(ppo_numpy)")
    return out


#: --plant: a convention compared with a wrong normaliser (the failure it shows); a preset's
#: name: its jobs compared with the preset run with a wrong normaliser (step_presets.PLANTS)
PLANTS = {"trl-bnpo-as-dapo": (("trl", "bnpo", "uneven rows", None), ("trl", "dapo")),
          "verl-seq-mean-as-global": (("verl", "seq-mean-token-mean", "uneven rows", None),
                                      ("global", "seq-mean-token-mean"))}


def plants() -> tuple:
    from tests.conformance import step_presets

    return tuple(PLANTS) + tuple(step_presets.PLANTS)


def run_step_conformance(cases=CASES, plant=None, timeout=300.0, jobs=None) -> dict:
    """The 2-process run of ``cases`` (the normalisers against ``policy_step``) and of the
    presets' ``jobs`` (default :data:`step_presets.JOBS`), and their comparison:
    ``{"failures": [...], "rows": [(label, worst relative loss error, worst relative dlogp
    error, keeps the full-batch gradient)], "preset_rows": [(label, loss error, gradient
    error, the statistics compared)], "seconds": ...}``. ``plant``: a key of :data:`PLANTS`
    (that case compared with the wrong normaliser) or a preset of
    :data:`step_presets.PLANTS` (its jobs compared with the preset under a wrong one)."""
    from tests.conformance import step_presets

    jobs = step_presets.JOBS if jobs is None else jobs
    start = time.monotonic()
    inputs = [step_presets.rank_inputs(job) for job in jobs]
    results = run_ranks(list(cases), timeout, inputs)
    failures, rows, preset_rows = [], [], []
    for i, case in enumerate(cases):
        got = results["cases"][i]
        want = expected(case, got["options"], got["normaliser"])
        if plant is not None and plant in PLANTS and PLANTS[plant][0] == case:
            from ppo_numpy import Normaliser, policy_step

            x, (name, mode) = batch(), PLANTS[plant][1]
            want = policy_step(x["logp"], x["logp_old"], x["advantages"], x["mask"],
                               LAYOUTS[case[2]], Normaliser(name, mode), **got["options"])
        failures += differences(case, got, want)
        loss_err = np.abs(np.asarray(got["losses"]) - want["step/losses"]).max() / max(
            np.abs(want["step/losses"]).max(), 1e-300)
        grad_err = np.abs(got["dlogp"] - want["step/dlogp"]).max() / max(
            np.abs(want["step/dlogp"]).max(), 1e-300)
        rows.append((label(case), float(loss_err), float(grad_err), want["step/full_batch"]))
    for job, got in zip(jobs, results["jobs"]):
        want = step_presets.expected(job, plant)
        failures += step_presets.differences(job, got, want)
        loss_err, grad_err = step_presets.errors(job, got, want)
        preset_rows.append((step_presets.label(job), loss_err, grad_err,
                            step_presets.compared_stats(job, got, want)))
    return {"failures": failures, "rows": rows, "preset_rows": preset_rows,
            "seconds": time.monotonic() - start}


def table_lines(out: dict) -> list:
    """The two tables of a run (docs/conformance.md prints them)."""
    lines = ["| convention, layout | losses: worst rel. error | dlogp: worst rel. error | "
             "keeps the full-batch gradient |", "|---|---:|---:|---|"]
    for name, loss_err, grad_err, full in out["rows"]:
        lines.append(f"| {name} | {loss_err:.1e} | {grad_err:.1e} | "
                     f"{'yes' if full else 'no'} |")
    lines += ["", "| preset (options), layout | step/losses, step/value_losses: worst rel. "
              "error | step/dlogp, step/dvalues: worst rel. error | statistics compared |",
              "|---|---:|---:|---|"]
    for name, loss_err, grad_err, stats in out["preset_rows"]:
        lines.append(f"| {name} | {loss_err:.1e} | {grad_err:.1e} | "
                     f"{', '.join(f'`{s}`' for s in stats) or '-'} |")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.conformance.step_distributed",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--plant", choices=plants(),
                        help="compare one convention, or one preset's jobs, with a wrong "
                             "normaliser")
    args = parser.parse_args(argv)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    out = run_step_conformance(plant=args.plant)
    print("\n".join(table_lines(out)))
    print(f"{len(out['rows'])} cases and {len(out['preset_rows'])} preset steps on {WORLD} "
          f"gloo ranks, {out['seconds']:.1f} s")
    for failure in out["failures"]:
        print(f"step conformance: FAILED: {failure}")
    return 1 if out["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
