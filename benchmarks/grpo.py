"""Group advantages and the GRPO loss + gradient against PyTorch in the forms of TRL and verl.

    python -m benchmarks.grpo [--quick] [--rounds N] [--output docs/benchmarks.md | -]

Over the grid of :mod:`benchmarks.core`, with groups of G = 8 responses per prompt, in one
interleaved run (:func:`benchmarks.timing.measure`), each function against two PyTorch
baselines written here for this comparison from the frameworks' formulas
(the docstrings of ``ppo_numpy/family/advantages.py`` and ``docs/conventions.md``,
section "Group baselines", give the sources and commits read):

* ``grpo_advantages``: TRL's form, vectorised over ``view(-1, G)`` blocks of consecutive
  rows (group mean and ``torch.std``, ``repeat_interleave`` back, eps 1e-4); verl's form
  (``compute_grpo_outcome_advantage``), a Python loop over the rows collecting each uid's
  scores in a list, ``torch.mean`` / ``torch.std`` per group, a second loop writing each
  row's advantage, then the (B, T) tensor ``scores[:, None] * mask`` (eps 1e-6);
* ``rloo_advantages``: TRL's legacy RLOO form, ``reshape(k, -1)`` (row j P + p answers
  prompt p) and (sum - s) / (k - 1); verl's ``compute_rloo_outcome_advantage`` form, the
  same loops as its GRPO with s n / (n - 1) - mean n / (n - 1);
* ``grpo loss+grad`` and ``gspo loss+grad``: ``ppo_policy_loss`` then
  ``policy_loss_grad`` with ``agg="grpo"`` (token ratios; ``importance_level="sequence"``
  for GSPO) against TRL's ``_compute_loss`` form (token or sequence log-weight,
  ``-min(coef_1 A, coef_2 A)``, the mean over each sequence's tokens then over sequences,
  its three clip fractions; gradient by autograd) and verl's ``compute_policy_loss_vanilla``
  (log-ratio clamped to +-20, ``max`` of the negated branches, dual clip c = 3) or
  ``compute_policy_loss_gspo`` (``logp - logp.detach() + sequence mean``, clamped at 10),
  aggregated by ``seq-mean-token-mean``, with the statistics each logs.

ppo_numpy's group baselines are timed in their fast form for regular layouts
(``ppo_numpy/fast/group_layouts.py``, the reference's bits; chosen explicitly, as a trainer
whose groups are blocks would). Every baseline is checked equal to ppo_numpy (rtol 1e-9)
before timing (:func:`check_against_ppo_numpy`). On this data verl's dual clip and log-ratio
clamps are never active (every ratio is within exp(+-1)), so one ppo_numpy call reproduces
both.
Tensors are CPU float64 (TRL and verl compute rewards in float32; float64 lets the
outputs be compared to rounding). Every candidate gets the same inputs: the (B,) scores, and
for the losses the advantages (B,) for TRL (broadcast by ``unsqueeze``) and (B, T) for
ppo_numpy and verl, whose losses take them per token.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass

import numpy as np

from benchmarks import torch_impl
from benchmarks.core import GRID, QUICK_GRID
from benchmarks.data import make_batch
from benchmarks.report import ms, ratio
from benchmarks.timing import measure, warm_heap
from ppo_numpy import grpo_advantages, policy_loss_grad, ppo_policy_loss
from ppo_numpy.fast import group_layouts

G = 8  # responses per prompt
EPS_TRL, EPS_VERL = 1e-4, 1e-6  # added to the group std (TRL, verl)
EPSILON = 0.2  # clip width
DUAL_CLIP_VERL = 3.0  # verl's clip_ratio_c, always on in compute_policy_loss_vanilla
FUNCTIONS = ("grpo_advantages", "rloo_advantages", "grpo loss+grad", "gspo loss+grad")
SECTION = "## Group advantages and the GRPO loss (issue 13)"


@dataclass
class Row:
    function: str
    B: int
    T: int
    ours: float
    trl: float | None
    verl: float | None


@dataclass(frozen=True)
class Inputs:
    """One grid point's inputs. ``block``: prompt id of each row in blocks of G consecutive
    rows (TRL's GRPO layout); ``strided``: row j P + p answers prompt p (TRL's RLOO layout);
    ``A`` the GRPO advantages (B,), ``A_tok`` the same on every response token (B, T)."""

    batch: object
    block: np.ndarray
    strided: np.ndarray
    A: np.ndarray
    A_tok: np.ndarray


def make_inputs(B: int, T: int, seed: int = 0) -> Inputs:
    if B % G:
        raise ValueError(f"B: groups of {G} need B divisible by {G}, got {B}")
    b = make_batch(B, T, seed=seed)
    block = np.arange(B) // G
    strided = np.arange(B) % (B // G)
    A = grpo_advantages(b.scores, block, std_eps=EPS_VERL)
    return Inputs(b, block, strided, A, np.where(b.mask, A[:, None], 0.0))


# --- ppo_numpy ------------------------------------------------------------------------------


def ours(name: str, x: Inputs):
    """The zero-argument call of ppo_numpy timed for ``name``."""
    b = x.batch
    # the group baselines by their fast form for regular layouts, chosen explicitly
    if name == "grpo_advantages":
        return lambda: group_layouts.grpo_advantages(b.scores, x.block, std_eps=EPS_VERL)
    if name == "rloo_advantages":
        return lambda: group_layouts.rloo_advantages(b.scores, x.strided)
    level = "sequence" if name.startswith("gspo") else "token"

    def loss_and_grad():
        args = (b.logp, b.logp_old, x.A_tok, b.mask, EPSILON)
        return (ppo_policy_loss(*args, agg="grpo", importance_level=level),
                policy_loss_grad(*args, agg="grpo", importance_level=level))

    return loss_and_grad


# --- TRL's form -----------------------------------------------------------------------------


def grpo_advantages_trl(rewards, num_generations, eps=EPS_TRL):
    """(r - mean) / (std + eps) over blocks of ``num_generations`` consecutive rows."""
    grouped = rewards.view(-1, num_generations)
    mean = grouped.mean(dim=1).repeat_interleave(num_generations, dim=0)
    std = grouped.std(dim=1).repeat_interleave(num_generations, dim=0)
    return (rewards - mean) / (std + eps)


def rloo_advantages_trl(rewards, k):
    """Row j P + p answers prompt p: baseline (sum over the k answers - r) / (k - 1)."""
    r = rewards.reshape(k, -1)
    baseline = (r.sum(0) - r) / (k - 1)
    return (r - baseline).flatten()


def policy_loss_trl(logp, logp_old, advantages, mask, epsilon=EPSILON, level="token"):
    """TRL's loss_type "grpo": loss, its three clip fractions, d loss / d logp (autograd)."""
    import torch

    logp = logp.detach().requires_grad_(True)
    log_ratio = logp - logp_old
    if level == "token":
        log_w = log_ratio
    else:
        log_w = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef_1 = torch.exp(log_w)
    coef_2 = torch.clamp(coef_1, 1 - epsilon, 1 + epsilon)
    A = advantages.unsqueeze(1)
    per_token_loss = -torch.min(coef_1 * A, coef_2 * A)
    loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    loss.backward()
    with torch.no_grad():
        low = ((coef_1 < 1 - epsilon) & (A < 0)).double()
        high = ((coef_1 > 1 + epsilon) & (A > 0)).double()
        if level == "token":
            n = mask.sum()
            stats = {"low": (low * mask).sum() / n, "high": (high * mask).sum() / n,
                     "region": (torch.maximum(low, high) * mask).sum() / n}
        else:  # one ratio per sequence: means over the sequences
            stats = {"low": low.mean(), "high": high.mean(),
                     "region": torch.maximum(low, high).mean()}
    return float(loss.detach()), {k: float(v) for k, v in stats.items()}, logp.grad


# --- verl's form ----------------------------------------------------------------------------


def _group_lists(scores, index):
    """uid -> the list of its rows' scores, by a Python loop over the rows."""
    id2score = {}
    for i in range(scores.shape[0]):
        id2score.setdefault(index[i], []).append(scores[i])
    return id2score


def grpo_advantages_verl(scores, mask, index, eps=EPS_VERL):
    """Per-uid lists, torch.mean / torch.std per group, then a loop writing each row."""
    import torch

    with torch.no_grad():
        scores = scores.clone()
        id2mean, id2std = {}, {}
        for idx, values in _group_lists(scores, index).items():
            if len(values) == 1:
                id2mean[idx], id2std[idx] = torch.tensor(0.0), torch.tensor(1.0)
            else:
                stacked = torch.stack(values)
                id2mean[idx], id2std[idx] = torch.mean(stacked), torch.std(stacked)
        for i in range(scores.shape[0]):
            scores[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + eps)
        return scores.unsqueeze(-1) * mask


def rloo_advantages_verl(scores, mask, index):
    """Per-uid lists and means, then s n / (n - 1) - mean n / (n - 1) row by row."""
    import torch

    with torch.no_grad():
        scores = scores.clone()
        lists = _group_lists(scores, index)
        id2mean = {idx: torch.mean(torch.stack(v)) if len(v) > 1 else torch.tensor(0.0)
                   for idx, v in lists.items()}
        for i in range(scores.shape[0]):
            n = len(lists[index[i]])
            if n > 1:
                scores[i] = scores[i] * n / (n - 1) - id2mean[index[i]] * n / (n - 1)
        return scores.unsqueeze(-1) * mask


def _seq_mean_token_mean(loss_mat, mask):
    return ((loss_mat * mask).sum(-1) / mask.sum(-1)).mean()


def _masked_mean(x, mask):
    return (x * mask).sum() / mask.sum()


def policy_loss_verl(logp, logp_old, advantages, mask, epsilon=EPSILON, level="token"):
    """compute_policy_loss_vanilla (token) or _gspo (sequence), seq-mean-token-mean:
    loss, its statistics, d loss / d logp (autograd). ``advantages`` (B, T)."""
    import torch

    logp = logp.detach().requires_grad_(True)
    A = advantages
    if level == "token":
        negative_approx_kl = torch.clamp(logp - logp_old, min=-20.0, max=20.0)
        ratio = torch.exp(negative_approx_kl)
    else:
        negative_approx_kl = logp - logp_old
        seq_kl = (negative_approx_kl * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        log_s = logp - logp.detach() + seq_kl.detach().unsqueeze(-1)
        ratio = torch.exp(torch.clamp(log_s, max=10.0))
    pg_losses1 = -A * ratio
    pg_losses2 = -A * torch.clamp(ratio, 1 - epsilon, 1 + epsilon)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    stats = {"pg_clipfrac": _masked_mean(torch.gt(pg_losses2, pg_losses1).double(), mask),
             "ppo_kl": _masked_mean(-negative_approx_kl, mask)}
    if level == "token":
        pg_losses3 = -A * DUAL_CLIP_VERL
        clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
        stats["pg_clipfrac_lower"] = _masked_mean(
            (torch.gt(clip_pg_losses1, pg_losses3) & (A < 0)).double(), mask)
        pg_losses = torch.where(A < 0, clip_pg_losses2, clip_pg_losses1)
    else:
        pg_losses = clip_pg_losses1
    loss = _seq_mean_token_mean(pg_losses, mask)
    loss.backward()
    return float(loss.detach()), {k: float(v.detach()) for k, v in stats.items()}, logp.grad


# --- the tensors each form takes ------------------------------------------------------------


def as_tensors(x: Inputs) -> dict:
    import torch

    t = torch_impl.as_tensors(x.batch)
    t["A"] = torch.from_numpy(x.A)
    t["A_tok"] = torch.from_numpy(x.A_tok)
    t["uid_block"] = np.array([f"uid-{g}" for g in x.block], dtype=object)
    t["uid_strided"] = np.array([f"uid-{g}" for g in x.strided], dtype=object)
    return t


def baselines(name: str, t: dict) -> dict:
    """{"trl": call, "verl": call} for ``name`` on the tensors ``t``."""
    B = t["scores"].shape[0]
    if name == "grpo_advantages":
        return {"trl": lambda: grpo_advantages_trl(t["scores"], G),
                "verl": lambda: grpo_advantages_verl(t["scores"], t["mask"], t["uid_block"])}
    if name == "rloo_advantages":
        return {"trl": lambda: rloo_advantages_trl(t["scores"], B // (B // G)),
                "verl": lambda: rloo_advantages_verl(t["scores"], t["mask"], t["uid_strided"])}
    level = "sequence" if name.startswith("gspo") else "token"
    return {"trl": lambda: policy_loss_trl(t["logp"], t["logp_old"], t["A"], t["mask"],
                                           level=level),
            "verl": lambda: policy_loss_verl(t["logp"], t["logp_old"], t["A_tok"], t["mask"],
                                             level=level)}


# --- checks ---------------------------------------------------------------------------------


def _same(label: str, got, want) -> None:
    got = np.asarray(got.detach().numpy() if hasattr(got, "detach") else got, dtype=float)
    want = np.asarray(want, dtype=float)
    if got.shape != want.shape:
        raise AssertionError(f"{label} has shape {got.shape}, ppo_numpy's {want.shape}")
    if not np.allclose(got, want, rtol=1e-9, atol=1e-12):
        worst = np.unravel_index(np.argmax(np.abs(got - want)), want.shape)
        raise AssertionError(f"{label} differs from ppo_numpy at {tuple(map(int, worst))}: "
                             f"{got[worst]} vs {want[worst]}")


def check_against_ppo_numpy(B: int = 16, T: int = 12, seed: int = 1) -> None:
    """Raise AssertionError unless every TRL- and verl-form baseline equals ppo_numpy."""
    x = make_inputs(B, T, seed=seed)
    b, t = x.batch, as_tensors(x)
    mask = b.mask.astype(float)
    _same("trl grpo_advantages", grpo_advantages_trl(t["scores"], G),
          grpo_advantages(b.scores, x.block, std_eps=EPS_TRL))
    _same("verl grpo_advantages", grpo_advantages_verl(t["scores"], t["mask"], t["uid_block"]),
          ours("grpo_advantages", x)()[:, None] * mask)
    want = ours("rloo_advantages", x)()
    _same("trl rloo_advantages", rloo_advantages_trl(t["scores"], G), want)
    _same("verl rloo_advantages", rloo_advantages_verl(t["scores"], t["mask"],
                                                       t["uid_strided"]), want[:, None] * mask)
    for name in ("grpo loss+grad", "gspo loss+grad"):
        (loss, stats), dlogp = ours(name, x)()
        calls = baselines(name, t)
        got_loss, got_stats, got_grad = calls["trl"]()
        _same(f"trl {name} loss", got_loss, loss)
        _same(f"trl {name} gradient", got_grad, dlogp)
        if name.startswith("grpo"):  # TRL's sequence-level clip fractions are per sequence
            _same(f"trl {name} clip region", got_stats["region"], stats["clipfrac_active"])
        got_loss, got_stats, got_grad = calls["verl"]()
        _same(f"verl {name} loss", got_loss, loss)
        _same(f"verl {name} gradient", got_grad, dlogp)
        _same(f"verl {name} pg_clipfrac", got_stats["pg_clipfrac"], stats["clipfrac_active"])
        _same(f"verl {name} ppo_kl", got_stats["ppo_kl"], stats["approx_kl_k1"])
        if "pg_clipfrac_lower" in got_stats:
            _same(f"verl {name} pg_clipfrac_lower", got_stats["pg_clipfrac_lower"],
                  stats["dual_clipfrac"])


# --- timing and the report ------------------------------------------------------------------


def run_grid(grid=GRID, functions=FUNCTIONS, *, rounds=7, target=0.02, use_torch=None,
             progress=None) -> list[Row]:
    """Time every function at every grid point against the baselines; one Row each."""
    if use_torch is None:
        use_torch = torch_impl.available()
    if use_torch:
        check_against_ppo_numpy()
    rows = []
    for B, T in grid:
        x = make_inputs(B, T)
        t = as_tensors(x) if use_torch else None
        for name in functions:
            candidates = {"ours": ours(name, x)}
            if use_torch:
                candidates.update(baselines(name, t))
            times = measure(candidates, rounds=rounds, target=target)
            row = Row(name, B, T, times["ours"], times.get("trl"), times.get("verl"))
            rows.append(row)
            if progress is not None:
                progress(row)
    return rows


CALLS = {
    "grpo_advantages": "`grpo_advantages(scores, groups, std_eps=1e-6)` (B,); TRL's form with "
                       "eps 1e-4, verl's with 1e-6 and its (B, T) output",
    "rloo_advantages": "`rloo_advantages(scores, groups)` (B,), groups strided as TRL's RLOO "
                       "lays them out; verl's form writes (B, T)",
    "grpo loss+grad": "`ppo_policy_loss(logp, logp_old, A, mask, 0.2, agg=\"grpo\")` (loss and "
                      "9 statistics) then `policy_loss_grad(...)` with the same arguments",
    "gspo loss+grad": "the same with `importance_level=\"sequence\"` (GSPO's sequence ratio)",
}


def markdown(rows, *, command: str, rounds: int, target: float, load: str = "") -> list[str]:
    """The section of docs/benchmarks.md, as lines (``load``: a sentence on the machine's load)."""
    out = [
        SECTION,
        "",
        f"ppo_numpy's group baselines and GRPO loss against PyTorch written the way TRL and "
        f"verl write them, with groups of G = {G} responses, over the grid above, measured "
        "side by side in one run of",
        "",
        "```bash",
        command,
        "```",
        "",
        f"Medians of {rounds} interleaved rounds, each sample about {target * 1e3:.0f} ms of "
        "calls (`benchmarks/timing.py`), torch with one intra-op thread, CPU float64. "
        "`benchmarks/grpo.py` says how each baseline is written (TRL's GRPO advantages "
        "vectorised over `view(-1, G)`; verl's a Python loop over the rows building one list "
        "per uid, then `torch.mean` / `torch.std` per group; the losses' gradients by "
        "autograd) and checks every one equal to ppo_numpy (rtol 1e-9) before timing. A "
        "ratio above 1 means ppo_numpy is faster. No test asserts a time." + (
            f" {load}" if load else ""),
        "",
        "Reading the tables: the advantages are a (B,) computation, so their times hardly "
        "grow with T (verl's form also writes the (B, T) tensor); verl's form pays Python "
        "per row and per group, TRL's a few tensor calls. ppo_numpy's loss and gradient are "
        "two calls, each running the (B, T) case analysis and the former its 9 statistics; "
        "under `importance_level=\"sequence\"` it does so at every token with the sequence "
        "ratio, where TRL's form clips one (B, 1) ratio per sequence and broadcasts.",
        "",
    ]
    for name in FUNCTIONS:
        mine = [r for r in rows if r.function == name]
        if not mine:
            continue
        out += [f"### {name}", "", CALLS[name], "",
                "| B | T | prompts | ppo_numpy ms | TRL-form torch ms | TRL / ppo_numpy "
                "| verl-form torch ms | verl / ppo_numpy |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in mine:
            trl = None if r.trl is None else r.trl / r.ours
            verl = None if r.verl is None else r.verl / r.ours
            out.append(f"| {r.B} | {r.T} | {r.B // G} | {ms(r.ours)} | {ms(r.trl)} "
                       f"| {ratio(trl)} | {ms(r.verl)} | {ratio(verl)} |")
        out.append("")
    return out


def write_section(path: str, lines: list[str]) -> None:
    """Put the section at the end of ``path``, replacing an earlier one (nothing else moves),
    but before the sections ``python -m benchmarks`` keeps (``benchmarks.__main__.KEPT``)."""
    from benchmarks.__main__ import _kept

    kept = _kept(path)
    with open(path) as f:
        text = f.read()
    text = text[:len(text) - len(kept)]
    head = text.split("\n" + SECTION + "\n", 1)[0].rstrip("\n")
    with open(path, "w") as f:
        f.write(head + "\n\n" + "\n".join(lines).rstrip("\n") + "\n" + kept)


def _load() -> str:
    try:
        return f"{os.getloadavg()[0]:.1f}"
    except OSError:
        return "unknown"


def _parser():
    p = argparse.ArgumentParser(prog="python -m benchmarks.grpo",
                                description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="two small grid points, few rounds")
    p.add_argument("--rounds", type=int, default=None, help="rounds per median (default 7)")
    p.add_argument("--no-torch", action="store_true", help="time ppo_numpy only")
    p.add_argument("--output", default="-",
                   help="'-' (default) prints the section; a path puts it at the end of "
                        "that Markdown file (docs/benchmarks.md), replacing an earlier one")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    use_torch = torch_impl.available() and not args.no_torch
    if use_torch:
        import torch

        torch.set_num_threads(1)
    rounds = args.rounds or (3 if args.quick else 7)
    target = 0.002 if args.quick else 0.02
    warm_heap()

    def progress(r):
        print(f"{r.function:>16} ({r.B:>3}, {r.T:>4}): ppo_numpy {ms(r.ours):>7} ms"
              + (f"  TRL/ppo_numpy {r.trl / r.ours:6.1f}  verl/ppo_numpy {r.verl / r.ours:6.1f}"
                 if r.trl else ""), file=sys.stderr, flush=True)

    load_start = _load()
    rows = run_grid(QUICK_GRID if args.quick else GRID, rounds=rounds, target=target,
                    use_torch=use_torch, progress=progress)
    load = (f"Load average (1 min) on the machine's {os.cpu_count()} cores: {load_start} at "
            f"the start of this run, {_load()} at the end.")
    parts = [".venv/bin/python -m benchmarks.grpo"]
    parts += ["--quick"] if args.quick else []
    parts += [f"--rounds {args.rounds}"] if args.rounds is not None else []
    parts += ["--no-torch"] if args.no_torch else []
    parts += [f"--output {args.output}"] if args.output != "-" else []
    lines = markdown(rows, command=" ".join(parts), rounds=rounds, target=target, load=load)
    if args.output == "-":
        sys.stdout.write("\n".join(lines) + "\n")
    else:
        write_section(args.output, lines)
        print(f"wrote the section to {os.path.relpath(args.output)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
