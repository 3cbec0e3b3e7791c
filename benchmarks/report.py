"""Markdown for docs/benchmarks.md from the measured rows."""

from __future__ import annotations

import math

from benchmarks.core import FUNCTIONS, LOOP_TOKENS, PARAMS

LINEAR_FROM = 65_536  # tokens: the slope is fitted from here up
SLOPE_LINEAR = 1.2


def ms(seconds: float | None) -> str:
    if seconds is None:
        return "–"
    value = seconds * 1e3
    if value >= 100:
        return f"{value:.0f}"
    if value >= 10:
        return f"{value:.1f}"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.3f}"


def ratio(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.0f}x" if x >= 100 else f"{x:.1f}x"


def loglog_slope(rows, key="ours") -> float | None:
    """Least-squares slope of log(time) on log(B T) over the rows with >= LINEAR_FROM tokens
    (None with fewer than two sizes); 1.0 means time proportional to B T. ``key`` picks
    the time: ``"ours"`` or ``"floor"``."""
    pts = [r for r in rows if r.tokens >= LINEAR_FROM]
    if len({r.tokens for r in pts}) < 2:
        return None
    xs = [math.log(r.tokens) for r in pts]
    ys = [math.log(getattr(r, key)) for r in pts]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return (sum((x - mx) * (y - my) for x, y in zip(xs, ys))
            / sum((x - mx) ** 2 for x in xs))


def targets(rows, cold=None, demo=None) -> list[str]:
    """The issue's targets, each with the figure measured in this run."""
    by = {(r.function, r.B, r.T): r for r in rows}
    gae_rows = [r for r in rows if r.function == "gae"]
    lines = ["| target | measured in this run | met |", "|---|---|---|"]
    with_torch = [r for r in gae_rows if r.torch is not None]
    if with_torch:
        worst = min(with_torch, key=lambda r: r.torch / r.ours)
        each = ", ".join(f"({r.B}, {r.T}) {ratio(r.torch / r.ours)}" for r in with_torch)
        ok = "yes" if worst.torch / worst.ours >= 3 else "no"
        lines.append(f"| GAE >= 3x faster than the torch reverse loop at every grid point "
                     f"| {each} | {ok} |")
    else:
        lines.append("| GAE >= 3x faster than the torch reverse loop "
                     "| no torch column in this run | – |")
    g = by.get(("gae", 256, 1024))
    if g is not None:
        text = f"{ratio(g.ours / g.floor)} ({ms(g.ours)} ms vs {ms(g.floor)} ms)"
        if cold is not None:
            text += (f"; in a fresh process with a cold heap {ratio(cold['gae'] / cold['floor'])}"
                     f" ({ms(cold['gae'])} ms vs {ms(cold['floor'])} ms)")
        ok = "yes" if g.ours / g.floor <= 10 else "no"
        lines.append(f"| GAE within 10x of one streaming pass at (256, 1024) | {text} | {ok} |")
    p = by.get(("pipeline", 64, 256))
    if p is not None:
        ok = "yes" if p.ours < 5e-3 else "no"
        lines.append(f"| full pipeline at (64, 256) under 5 ms | {ms(p.ours)} ms | {ok} |")
    slopes = {f: loglog_slope([r for r in rows if r.function == f]) for f in FUNCTIONS}
    known = {f: s for f, s in slopes.items() if s is not None}
    if known:
        floor = loglog_slope([r for r in rows if r.function == FUNCTIONS[0]], "floor")
        text = ", ".join(f"{f} {s:.2f}" for f, s in known.items())
        text += f"; the floor itself {floor:.2f}"
        ok = "yes" if all(s <= SLOPE_LINEAR for s in known.values()) else "no"
        lines.append(f"| cost linear in B x T: log-log slope of time on B T over the sizes "
                     f">= {LINEAR_FROM} tokens (1 = proportional; met if <= {SLOPE_LINEAR}) "
                     f"| {text} | {ok} |")
    if demo is not None and demo["runs"]:
        wall, cpu = demo["median_wall_90"], demo["median_cpu_90"]
        n = len(demo["runs"])
        if wall is None:
            text, ok = f"no seed of {n} reached 90 %", "no"
        else:
            text = (f"median {wall:.1f} s wall ({cpu:.1f} s CPU) over {n} seeds, "
                    f"{demo['reached']} of {n} reached 90 %")
            ok = "yes" if wall < 30 and demo["reached"] == n else "no"
        lines.append(f"| make demo to 90 % of the optimal score in under 30 s on 2 cores "
                     f"| {text} | {ok} |")
    return lines


def function_table(rows, name) -> list[str]:
    lines = [
        "| B | T | B T | ppo_numpy ms | ns / token | floor ms | ppo_numpy / floor "
        "| scalar loop ms | loop / ppo_numpy | torch ms | torch / ppo_numpy |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r.function != name:
            continue
        scaled = f" ({r.loop_rows} rows x{r.B // r.loop_rows})" if r.loop_rows < r.B else ""
        loop = ms(r.loop) + scaled
        lines.append(
            f"| {r.B} | {r.T} | {r.tokens} | {ms(r.ours)} | {r.ours / r.tokens * 1e9:.1f} "
            f"| {ms(r.floor)} | {ratio(r.ours / r.floor)} | {loop} | {ratio(r.loop / r.ours)} "
            f"| {ms(r.torch)} | {ratio(None if r.torch is None else r.torch / r.ours)} |")
    return lines


def method_table(rows) -> list[str]:
    """GAE with ``method="loop"`` (the readable reference) beside ``method="blocked"``."""
    lines = [
        "The same calls with `method=\"loop\"`, the readable reference (a reverse loop of "
        "NumPy calls over time, `ppo_numpy/ppo/gae.py`), and with `method=\"blocked\"` "
        "(`ppo_numpy/fast/gae_blocked.py`); the call above runs the loop below "
        "32768 entries and the blocked form from there on (the callers' size rule). "
        "The two are tested equal to each "
        "other and to the sum definition in `tests/test_td_gae.py`:",
        "",
        "| B | T | blocked ms | loop ms | loop / blocked |",
        "|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        if r.function == "gae" and r.method_loop is not None and r.method_blocked is not None:
            lines.append(f"| {r.B} | {r.T} | {ms(r.method_blocked)} | {ms(r.method_loop)} "
                         f"| {ratio(r.method_loop / r.method_blocked)} |")
    return lines


CALLS = {
    "td_errors": "`td_errors(rewards, values, gamma, mask)`",
    "gae": "`gae(rewards, values, gamma, lam, mask)` (advantages and returns)",
    "kl_shaped_rewards": "`kl_shaped_rewards(scores, logp, logp_ref, beta, mask)` (k1)",
    "whiten": "`whiten(advantages, mask)`",
    "clipped_surrogate": "`clipped_surrogate(rho, advantages, epsilon, mask=mask)`",
    "policy_loss+grad": "`ppo_policy_loss(...)` (loss and its 9 statistics) then "
                        "`policy_loss_grad(...)` (d loss / d logp), token-mean",
    "pipeline": "`kl_shaped_rewards` -> `gae` -> `whiten` -> `ppo_policy_loss` + "
                "`policy_loss_grad`",
}


def render(rows, *, machine, command, rounds, target, elapsed, cold=None, training=None,
           demo=None, blas=None, date="") -> str:
    p = PARAMS
    out = [
        "# Benchmarks",
        "",
        "How fast ppo_numpy's core functions are, next to (a) the same formula as a scalar "
        "Python loop, (b) one streaming NumPy pass over the same arrays (`rewards - values`: "
        "the memory-bandwidth floor for anything that reads its inputs) and (c) PyTorch on "
        "CPU tensors, float64, written the way RLHF trainers write it. Every figure below "
        "was measured by the command that regenerates this page:",
        "",
        "```bash",
        command,
        "```",
        "",
        f"Generated {date}in {elapsed:.0f} s. The machine is shared with other jobs (see "
        "the load average below): absolute times move from run to run, ratios measured side "
        "by side in one run move less.",
        "",
        "## Machine",
        "",
        *[f"- {line}" for line in machine],
        "",
        "## Method",
        "",
        f"- Each time is the median of {rounds} rounds. In a round every candidate of one "
        "comparison (ppo_numpy, floor, scalar loop, torch) runs once, one after the other, "
        f"each sample long enough (about {target * 1e3:.0f} ms of calls) for the clock; "
        "garbage collection is "
        "off while timing (`benchmarks/timing.py`). No test asserts a time.",
        "- ppo_numpy is called as a user calls it: input checks, copies and masking included.",
        "- Data (`benchmarks/data.py`): float64, right-padded responses with lengths uniform "
        "in [T/2, T], bool mask; "
        f"gamma {p['gamma']}, lambda {p['lam']}, beta {p['beta']}, epsilon {p['epsilon']}.",
        f"- Scalar loops (`benchmarks/loops.py`) run on Python lists (converted before "
        f"timing). Where B T > {LOOP_TOKENS}, they run on the first rows only (as many as "
        "fit in that many tokens) and the time is scaled by B / rows: the table says so "
        "in the loop column, e.g. `(4 rows x64)`.",
        "- Torch (`benchmarks/torch_impl.py`): GAE is a reverse Python loop over time on "
        "(B,) columns, the form of TRL's and verl's GAE (sources in `docs/frameworks.md`); "
        "the other functions are vectorised tensor expressions, the policy-loss gradient is "
        "autograd's. Every scalar loop and torch version is checked equal to ppo_numpy "
        "(rtol 1e-9) before timing. Torch gets one intra-op thread unless `--torch-threads` "
        "says otherwise (see Machine): NumPy's elementwise operations run on one core, so "
        "the ratios compare the algorithms, not the number of cores.",
        "- Before timing, the harness allocates and frees one 30 MiB block "
        "(`warm_heap`): this raises glibc's dynamic mmap and trim thresholds, as in any "
        "process that has once held a large array. In a fresh process that never has, "
        "functions whose temporaries grow the heap pay page faults on every call; the cold "
        "figure for GAE is given with the targets.",
        "",
        "## Targets of issue #7",
        "",
        *targets(rows, cold, demo),
        "",
    ]
    for name in FUNCTIONS:
        if not any(r.function == name for r in rows):
            continue
        out += [f"## {name}", "", CALLS[name], "", *function_table(rows, name), ""]
        if name == "gae":
            out += [*method_table(rows), ""]
        if name == "gae" and blas:
            out += [*blas, ""]
    out += ["## Training loop", ""]
    out += training if training else ["Not measured in this run (`--quick` or `--no-training`)."]
    out.append("")
    return "\n".join(out)
