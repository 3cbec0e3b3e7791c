"""Timings of the core functions over a (B, T) grid, against the three baselines.

For each function and grid point, in one interleaved run (:func:`measure`):

* ``ours``: the ppo_numpy function, input checks included, as users call it; for GAE with
  the form the callers' size rule picks (:func:`gae_sized`: the presets and the training
  loop run it so, the blocked form from 32768 entries on);
* ``floor``: one streaming NumPy pass over the same arrays, ``rewards - values``;
* ``loop``: the scalar Python loop of :mod:`benchmarks.loops`, timed on the first
  ``loop_rows`` rows and scaled by B / loop_rows when the whole batch would be slow;
* ``torch``: :mod:`benchmarks.torch_impl` on CPU float64 tensors, when installed;
* for GAE also ``method_loop`` and ``method_blocked``: ``gae(..., method="loop")``, the
  readable reference (a reverse loop of NumPy calls over time), and the blocked form
  (``ppo_numpy/fast/gae_blocked.py``), each forced.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from benchmarks import loops, torch_impl
from benchmarks.data import make_batch
from benchmarks.timing import measure
from ppo_numpy import (
    clipped_surrogate,
    gae,
    kl_shaped_rewards,
    policy_loss_grad,
    ppo_policy_loss,
    td_errors,
    whiten,
)
from ppo_numpy.fast.gae_blocked import use_blocked


def gae_sized(rewards, values, gamma, lam, mask):
    """``gae`` with the form the callers' size rule picks (``ppo_numpy.fast.gae_blocked.
    use_blocked``: the blocked form from ``BLOCKED_FROM`` = 32768 float entries on, the
    recursion below), as the presets and the training loop choose it (before issue 35 the
    default call of ``gae`` applied this rule itself)."""
    method = "blocked" if use_blocked(np.asarray(values)) else "loop"
    return gae(rewards, values, gamma, lam, mask, method=method)


GRID = ((8, 128), (64, 256), (64, 1024), (256, 1024), (256, 4096))
QUICK_GRID = ((8, 128), (64, 256))
FUNCTIONS = ("td_errors", "gae", "kl_shaped_rewards", "whiten", "clipped_surrogate",
             "policy_loss+grad", "pipeline")
PARAMS = {"gamma": 1.0, "lam": 0.95, "beta": 0.05, "epsilon": 0.2}
# The scalar loops run on at most this many tokens; the rest is scaled.
LOOP_TOKENS = 16_384


@dataclass
class Row:
    function: str
    B: int
    T: int
    ours: float
    floor: float
    loop: float | None
    loop_rows: int
    torch: float | None
    method_loop: float | None = None
    method_blocked: float | None = None

    @property
    def tokens(self) -> int:
        return self.B * self.T


def reference_outputs(b) -> dict:
    """ppo_numpy's outputs on batch ``b``, under the names the baselines are checked by."""
    p = PARAMS
    A, R = gae_sized(b.rewards, b.values, p["gamma"], p["lam"], b.mask)
    loss, stats = ppo_policy_loss(b.logp, b.logp_old, b.advantages, b.mask, p["epsilon"])
    pipe_loss, pipe_dlogp, pipe_returns = ours_pipeline(b)
    return {
        "td_errors": td_errors(b.rewards, b.values, p["gamma"], b.mask),
        "gae advantages": A,
        "gae returns": R,
        "kl_shaped_rewards": kl_shaped_rewards(b.scores, b.logp, b.logp_ref, p["beta"], b.mask),
        "whiten": whiten(b.advantages, b.mask),
        "clipped_surrogate": clipped_surrogate(b.rho, b.advantages, p["epsilon"], mask=b.mask),
        "policy loss": loss,
        **{f"policy loss stat {key}": value for key, value in stats.items()},
        "policy loss gradient": policy_loss_grad(b.logp, b.logp_old, b.advantages, b.mask,
                                                 p["epsilon"]),
        "pipeline loss": pipe_loss,
        "pipeline gradient": pipe_dlogp,
        "pipeline returns": pipe_returns,
    }


def check_outputs(label: str, b, outputs: dict) -> None:
    """Raise AssertionError unless ``outputs`` has every output of ppo_numpy, each of its
    shape and equal to it (rtol 1e-9, atol 1e-12)."""
    want_all = reference_outputs(b)
    if set(outputs) != set(want_all):
        raise AssertionError(f"{label}: outputs {sorted(set(want_all) - set(outputs))} missing, "
                             f"{sorted(set(outputs) - set(want_all))} unknown")
    for name, got in outputs.items():
        got = np.asarray(got.detach().numpy() if hasattr(got, "detach") else got, dtype=float)
        want = np.asarray(want_all[name], dtype=float)
        # allclose broadcasts: a (B,) or scalar output would pass against a (B, T) one
        if got.shape != want.shape:
            raise AssertionError(f"{label} {name} has shape {got.shape}, ppo_numpy's "
                                 f"{want.shape}")
        if not np.allclose(got, want, rtol=1e-9, atol=1e-12):
            worst = tuple(int(i) for i in np.unravel_index(np.argmax(np.abs(got - want)),
                                                           want.shape))
            raise AssertionError(f"{label} {name} differs from ppo_numpy at {worst}: "
                                 f"{got[worst]} vs {want[worst]}")


def ours_pipeline(b):
    """Shaped rewards -> GAE -> whitening -> policy loss, its statistics and its gradient."""
    p = PARAMS
    rewards = kl_shaped_rewards(b.scores, b.logp_old, b.logp_ref, p["beta"], b.mask)
    advantages, returns = gae_sized(rewards, b.values, p["gamma"], p["lam"], b.mask)
    advantages = whiten(advantages, b.mask)
    loss, stats = ppo_policy_loss(b.logp, b.logp_old, advantages, b.mask, p["epsilon"])
    dlogp = policy_loss_grad(b.logp, b.logp_old, advantages, b.mask, p["epsilon"])
    return loss, dlogp, returns


def _ours(name, b):
    p = PARAMS
    return {
        "td_errors": lambda: td_errors(b.rewards, b.values, p["gamma"], b.mask),
        "gae": lambda: gae_sized(b.rewards, b.values, p["gamma"], p["lam"], b.mask),
        "kl_shaped_rewards": lambda: kl_shaped_rewards(b.scores, b.logp, b.logp_ref, p["beta"],
                                                       b.mask),
        "whiten": lambda: whiten(b.advantages, b.mask),
        "clipped_surrogate": lambda: clipped_surrogate(b.rho, b.advantages, p["epsilon"],
                                                       mask=b.mask),
        "policy_loss+grad": lambda: (
            ppo_policy_loss(b.logp, b.logp_old, b.advantages, b.mask, p["epsilon"]),
            policy_loss_grad(b.logp, b.logp_old, b.advantages, b.mask, p["epsilon"])),
        "pipeline": lambda: ours_pipeline(b),
    }[name]


def _loop(name, L):
    p = PARAMS
    return {
        "td_errors": lambda: loops.td_errors_loop(L["rewards"], L["values"], p["gamma"],
                                                  L["mask"]),
        "gae": lambda: loops.gae_loop(L["rewards"], L["values"], p["gamma"], p["lam"],
                                      L["mask"]),
        "kl_shaped_rewards": lambda: loops.kl_shaped_rewards_loop(
            L["scores"], L["logp"], L["logp_ref"], p["beta"], L["mask"]),
        "whiten": lambda: loops.whiten_loop(L["advantages"], L["mask"]),
        "clipped_surrogate": lambda: loops.clipped_surrogate_loop(
            L["rho"], L["advantages"], p["epsilon"], L["mask"]),
        "policy_loss+grad": lambda: loops.policy_loss_grad_loop(
            L["logp"], L["logp_old"], L["advantages"], L["mask"], p["epsilon"]),
        "pipeline": lambda: loops.pipeline_loop(
            L["scores"], L["logp"], L["logp_old"], L["logp_ref"], L["values"], L["mask"],
            p["beta"], p["gamma"], p["lam"], p["epsilon"]),
    }[name]


def _torch(name, t):
    p, ti = PARAMS, torch_impl
    return {
        "td_errors": lambda: ti.td_errors_torch(t["rewards"], t["values"], p["gamma"], t["mask"]),
        "gae": lambda: ti.gae_torch(t["rewards"], t["values"], p["gamma"], p["lam"], t["mask"]),
        "kl_shaped_rewards": lambda: ti.kl_shaped_rewards_torch(
            t["scores"], t["logp"], t["logp_ref"], p["beta"], t["mask"]),
        "whiten": lambda: ti.whiten_torch(t["advantages"], t["mask"]),
        "clipped_surrogate": lambda: ti.clipped_surrogate_torch(
            t["rho"], t["advantages"], p["epsilon"], t["mask"]),
        "policy_loss+grad": lambda: ti.policy_loss_grad_torch(
            t["logp"], t["logp_old"], t["advantages"], t["mask"], p["epsilon"]),
        "pipeline": lambda: ti.pipeline_torch(t, p["beta"], p["gamma"], p["lam"], p["epsilon"]),
    }[name]


def check_baselines(use_torch: bool) -> None:
    """Every baseline computes what ppo_numpy computes, on a small batch with padding."""
    batch = make_batch(6, 40, seed=1)
    loops.check_against_ppo_numpy(batch)
    if use_torch:
        torch_impl.check_against_ppo_numpy(batch)


def run_grid(grid=GRID, functions=FUNCTIONS, *, rounds=7, target=0.02, use_torch=None,
             progress=None) -> list[Row]:
    """Time every function at every grid point; returns one :class:`Row` each."""
    if use_torch is None:
        use_torch = torch_impl.available()
    check_baselines(use_torch)
    rows = []
    for B, T in grid:
        batch = make_batch(B, T)
        loop_rows = max(1, min(B, LOOP_TOKENS // T))
        L = loops.as_lists(batch, loop_rows)
        tensors = torch_impl.as_tensors(batch) if use_torch else None
        for name in functions:
            candidates = {
                "ours": _ours(name, batch),
                "method_loop": (lambda b=batch: gae(b.rewards, b.values, PARAMS["gamma"],
                                                    PARAMS["lam"], b.mask, method="loop"))
                if name == "gae" else None,
                "method_blocked": (lambda b=batch: gae(b.rewards, b.values, PARAMS["gamma"],
                                                       PARAMS["lam"], b.mask, method="blocked"))
                if name == "gae" else None,
                "floor": lambda b=batch: b.rewards - b.values,
                "loop": _loop(name, L),
                "torch": _torch(name, tensors) if use_torch else None,
            }
            times = measure(candidates, rounds=rounds, target=target)
            row = Row(function=name, B=B, T=T, ours=times["ours"], floor=times["floor"],
                      loop=times["loop"] * B / loop_rows, loop_rows=loop_rows,
                      torch=times.get("torch"), method_loop=times.get("method_loop"),
                      method_blocked=times.get("method_blocked"))
            rows.append(row)
            if progress is not None:
                progress(row)
    return rows
