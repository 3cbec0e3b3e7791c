"""Test cases for the oracle: seeded random batches and named edge cases (``docs/oracle.md``).

A case is a plain dict::

    {"name": "left-padding",
     "description": "one sentence",
     "inputs": {"logp": (B, T), "logp_old": (B, T), "logp_ref": (B, T),
                "values": (B, T), "old_values": (B, T), "scores": (B,), "mask": (B, T)},
     "params": {"gamma": 1.0, "lam": 0.0}}     # overrides of the preset's defaults

All arrays are float64; ``mask`` holds 0.0 and 1.0 (1 = response token).
``values`` is the value head being trained, ``old_values`` the values
recorded at rollout time. The cases without padding (``random-2``,
``random-6``, the extreme, all-equal and gamma/lambda cases) serve presets
that take no mask (``lm-human-preferences``); a preset rejects with
ValueError the layouts its framework cannot express (left padding, holes,
NaN where it reads). Every case stays inside the core's input checks:
each row has at least one response token, gamma and lambda lie in [0, 1],
and NaN or inf appear only where mask is 0.

The edge cases (:data:`EDGE_CASES`):

========================  ======================================================
name                      what it exercises
========================  ======================================================
length-1                  every response is one token long
left-padding              padding before the response (score at the last column)
right-padding             padding after the response (the usual layout)
multi-turn-holes          masks with holes: V(s_{t+1}) skips masked turns
garbage-in-padding        NaN, +-inf and +-1e30 at every padding position
extreme-log-ratios        logp - logp_old = +-50 and +-20 (rho = e^50 ~ 5e21)
extreme-kl                logp - logp_ref and logp_old - logp_ref = +-50
all-equal-rewards         equal scores, no KL, zero values, gamma = lam = 1:
                          every advantage is 1 and whitening divides 0 by sqrt(eps)
gamma0-lam0 ...           gamma and lambda at 0 and 1 (four cases)
one-valid-token           one response token in the whole batch (whitening
                          needs two: the presets that whiten reject it)
dual-clip                 rho in [3.3, 7.4] everywhere, advantages of both signs
                          in each row: the dual clip bound decides most A < 0
                          terms, the upper clip bound the A > 0 ones
tiny-advantage-variance   advantages of size 1e-4 (variance ~1e-8 ~ eps): the
                          whitening's eps and its mode change them by O(1)
values-on-clip-bounds     values one ulp inside the bounds V_old +- 0.2 and
                          +- 0.5, returns close to them: the two forms of
                          the value clip count different tokens as clipped
one-sided-log-ratios      logp - logp_old = +25 on two columns (not balanced):
                          a log-ratio clamp at 20 shows in the logged KL
holes-discounted          holes in the mask with gamma 0.9, lam 0.8: skipping a
                          hole and running through it differ
========================  ======================================================

The cases of one preset (``PRESET_CASES``: in the default set of the presets they name,
``generate_cases(seed, preset=name)``, with that preset's parameters; log-ratios of std 0.4
and two tokens beyond the KL term's bounds, k3 > 10 with rho = 20 and 12.2):

========================  ======================================================
kl-in-loss                the KL term in the loss, coefficient 0.05 (verl and
                          OpenRLHF ``use_kl_loss``)
kl-gradient-form          the same in the framework's other gradient form (verl
                          ``kl_loss_type="low_var_kl+"``, OpenRLHF
                          ``kl_unbiased_gradient=True``)
========================  ======================================================

By name only (``ROLLOUT_CASES``, not in the default set):

========================  ======================================================
rollout-mismatch          ``logp_rollout`` (the inference engine's log-probs, the
                          rollout correction's input) 1e-3 to 1.5 from logp_old
                          row by row: inside and beyond every threshold
========================  ======================================================

Every convention switch of :mod:`ppo_numpy.oracle.switches` changes some output
on some case, by more than the tolerance (``tests/test_diagnose.py`` plants each
one and checks that the diagnosis names it).

Extreme log-ratios: frameworks that clamp the log-ratio before ``exp`` (a
preset's ``log_ratio_clamp``) or the KL estimate (``kl_clamp``) give other
numbers there than those that do not, so a candidate must be compared
against the preset of its own framework on these cases.

Every case draws from its own generator, seeded by ``(seed, crc32(name))``:
the same seed and name give bit-identical arrays, whatever other cases are
generated with it.
"""

from __future__ import annotations

import zlib

import numpy as np

from .presets._common import INPUT_NAMES, OPTIONAL_INPUT_NAMES, PER_RESPONSE_NAMES

N_RANDOM = 8
"""Number of random cases :func:`generate_cases` makes by default."""

GARBAGE = (np.nan, np.inf, -np.inf, 1e30, -1e30)
"""Values written into the padding of ``garbage-in-padding``, in turn."""


def case_rng(seed: int, name: str) -> np.random.Generator:
    """The generator of case ``name``: seeded by ``(seed, crc32(name))``."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"seed: must be a non-negative integer, got {seed!r}")
    return np.random.default_rng([int(seed), zlib.crc32(name.encode())])


def mask_from_lengths(lengths, T: int, *, padding: str = "right") -> np.ndarray:
    """A (B, T) float mask with ``lengths[i]`` response tokens per row.

    ``padding="right"`` puts the response first, ``"left"`` last.

    >>> mask_from_lengths([3, 1], 4).tolist()
    [[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]]
    >>> mask_from_lengths([3, 1], 4, padding="left").tolist()
    [[0.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 1.0]]
    """
    if padding not in ("right", "left"):
        raise ValueError(f"padding: expected 'right' or 'left', got {padding!r}")
    lengths = np.asarray(lengths)
    if np.any(lengths < 1) or np.any(lengths > T):
        raise ValueError(f"lengths: each must be in [1, {T}], got {lengths.tolist()}")
    t = np.arange(T)[None, :]
    if padding == "right":
        return (t < lengths[:, None]).astype(np.float64)
    return (t >= T - lengths[:, None]).astype(np.float64)


def sample_inputs(rng: np.random.Generator, mask, *, log_ratio_std: float = 0.15,
                  ref_std: float = 0.3, value_std: float = 0.25) -> dict:
    """Draw the seven inputs for a given (B, T) mask; padding positions hold 0.

    Log-probabilities are negative (a Gamma(2, 0.5) draw, mean -1);
    ``logp - logp_old`` has standard deviation ``log_ratio_std`` (0.15: about
    a fifth of the tokens fall outside rho in [0.8, 1.2]); ``values`` differ
    from ``old_values`` by ``value_std`` (0.25: value clipping at 0.2 is active
    on about 40% of them). Scores are N(0, 1.5^2).
    """
    m = np.asarray(mask, dtype=np.float64)
    inputs = sample_log_probs(rng, m, log_ratio_std=log_ratio_std, ref_std=ref_std)
    old_values = rng.normal(0.0, 1.0, size=m.shape)
    values = old_values + rng.normal(0.0, value_std, size=m.shape)
    valid = m == 1
    inputs.update(values=np.where(valid, values, 0.0), old_values=np.where(valid, old_values, 0.0),
                  scores=rng.normal(0.0, 1.5, size=m.shape[0]), mask=m.copy())
    return inputs


def sample_log_probs(rng: np.random.Generator, mask, *, log_ratio_std: float = 0.15,
                     ref_std: float = 0.3) -> dict:
    """``logp``, ``logp_old`` and ``logp_ref`` for a (B, T) mask, 0 at padding (see
    :func:`sample_inputs`): logp_old = -Gamma(2, 0.5), the other two within ``log_ratio_std``
    and ``ref_std`` of it, all at most -1e-4."""
    logp_old = -rng.gamma(2.0, 0.5, size=np.shape(mask))
    logp = _near(rng, logp_old, log_ratio_std)
    logp_ref = _near(rng, logp_old, ref_std)
    valid = np.asarray(mask) == 1
    return {n: np.where(valid, x, 0.0)
            for n, x in (("logp", logp), ("logp_old", logp_old), ("logp_ref", logp_ref))}


def _near(rng: np.random.Generator, logp_old, std: float):
    """Log-probs within N(0, std^2) of ``logp_old``, at most -1e-4 (a log-prob is negative)."""
    return np.minimum(logp_old + rng.normal(0.0, std, size=np.shape(logp_old)), -1e-4)


#: inputs a case may carry, shaped like the log-probs: the inference engine's log-probs (the
#: rollout correction)
OPTIONAL_INPUTS = ("logp_rollout",)


def rollout_log_probs(rng: np.random.Generator, logp_old, mask, scale: float):
    """logp_rollout: within N(0, scale^2) of ``logp_old`` at the response tokens (at most
    -1e-4), 0 at padding: an inference engine's log-probs of the same tokens."""
    valid = np.asarray(mask) == 1
    return np.where(valid, _near(rng, np.asarray(logp_old), scale), 0.0)


def make_case(name: str, description: str, inputs: dict, params: dict | None = None, *,
              input_names=INPUT_NAMES) -> dict:
    """Assemble a case dict after checking that ``inputs`` has every one of ``input_names``,
    well shaped: (B,) for the inputs with one value per response (``scores``, ``groups``,
    ``baseline_scores``), (B, T) for the others."""
    missing = [n for n in input_names if n not in inputs]
    if missing:
        raise ValueError(f"inputs: missing {', '.join(missing)}")
    # the optional inputs a case may carry besides (logp_rollout: the rollout correction's)
    names = tuple(input_names) + tuple(n for n in OPTIONAL_INPUTS if inputs.get(n) is not None)
    arrays = {n: np.array(inputs[n], dtype=np.float64) for n in names}
    shape = arrays["mask"].shape
    if len(shape) != 2:
        raise ValueError(f"mask: expected shape (B, T), got {shape}")
    for n in names:
        want = shape[:1] if n in PER_RESPONSE_NAMES else shape
        if arrays[n].shape != want:
            raise ValueError(f"{n}: expected shape {want}, got {arrays[n].shape}")
    for n in OPTIONAL_INPUT_NAMES:  # (B, K), kept when given
        if inputs.get(n) is not None:
            arrays[n] = np.array(inputs[n], dtype=np.float64)
            if arrays[n].ndim != 2 or arrays[n].shape[0] != shape[0]:
                raise ValueError(f"{n}: expected shape ({shape[0]}, K), got "
                                 f"{arrays[n].shape}")
    return {"name": name, "description": description, "inputs": arrays,
            "params": dict(params or {})}


def random_case(rng: np.random.Generator, *, name: str = "random", params=None,
                padded: bool = True) -> dict:
    """A random batch: B in [2, 6], T in [3, 16]; right padding with row lengths in [1, T],
    or (``padded=False``) every row T tokens long."""
    B = int(rng.integers(2, 7))
    T = int(rng.integers(3, 17))
    lengths = rng.integers(1, T + 1, size=B) if padded else np.full(B, T)
    layout = f"right padding, row lengths {lengths.tolist()}" if padded else "no padding"
    return make_case(name, f"random batch B={B}, T={T}, {layout}",
                     sample_inputs(rng, mask_from_lengths(lengths, T)), params)


def random_params(rng: np.random.Generator) -> dict:
    """gamma in [0.9, 1] and lam in [0.8, 1], rounded to 3 decimals (printable)."""
    return {"gamma": round(float(rng.uniform(0.9, 1.0)), 3),
            "lam": round(float(rng.uniform(0.8, 1.0)), 3)}


def _layout(description: str, mask, params=None):
    """The builder of an edge case that is a layout of the mask (and parameters): the inputs
    of :func:`sample_inputs` on ``mask``."""
    def build(rng):
        return description, sample_inputs(rng, mask), dict(params or {})
    return build


#: the mask of ``multi-turn-holes`` and ``holes-discounted``: every row starts with a
#: response token, then turns separated by holes
HOLES_MASK = np.array([[1, 1, 1, 0, 0, 1, 1, 0, 1, 1, 1, 0],
                       [1, 1, 0, 0, 0, 1, 1, 0, 1, 1, 1, 1],
                       [1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0, 0]], dtype=np.float64)


def _garbage_in_padding(rng):
    mask = mask_from_lengths([6, 4, 2, 1], 7)
    inputs = sample_inputs(rng, mask)
    pad = mask == 0
    garbage = np.resize(np.array(GARBAGE), int(pad.sum()))
    # (the arrays of sample_inputs are new ones: they are changed in place, here and below)
    for k, name in enumerate(("logp", "logp_old", "logp_ref", "values", "old_values")):
        inputs[name][pad] = np.roll(garbage, k)
    return ("NaN, +-inf and +-1e30 at every padding position of every (B, T) input",
            inputs, {})


def _extreme_log_ratios(rng):
    inputs = sample_inputs(rng, np.ones((3, 6)))
    # logp - logp_old per row: the first four columns; log-probs stay <= 0
    shifts = np.array([[50.0, -50.0, 20.0, -20.0],
                       [-50.0, 50.0, -5.0, 5.0],
                       [50.0, 0.0, -50.0, 0.0]])
    logp, logp_old, logp_ref = inputs["logp"], inputs["logp_old"], inputs["logp_ref"]
    up = shifts > 0
    logp[:, :4] = np.where(up, -0.05, logp_old[:, :4] - np.abs(shifts))
    logp_old[:, :4] = np.where(up, -0.05 - shifts, logp_old[:, :4])
    logp_ref[:, :4] = _near(rng, logp_old[:, :4], 0.3)
    return ("logp - logp_old = +-50, +-20, +-5 (rho up to e^50 ~ 5e21); presets that clamp "
            "the log-ratio differ here", inputs, {})


def _extreme_kl(rng):
    inputs = sample_inputs(rng, np.ones((3, 5)))
    # log-ratio to the reference per row, first three columns
    shifts = np.array([[50.0, -50.0, 20.0],
                       [-50.0, 50.0, -20.0],
                       [50.0, -50.0, 0.0]])
    logp, logp_old, logp_ref = (inputs[n][:, :3].copy() for n in ("logp", "logp_old", "logp_ref"))
    log_rho = logp - logp_old
    # shift > 0: logp_ref far below both policies; shift < 0: both policies far below logp_ref
    new_ref = np.where(shifts > 0, np.minimum(logp, logp_old) - shifts, logp_ref)
    new_old = np.where(shifts < 0, logp_ref + shifts - np.maximum(log_rho, 0.0), logp_old)
    new_logp = np.where(shifts < 0, new_old + log_rho, logp)
    for name, block in (("logp", new_logp), ("logp_old", new_old), ("logp_ref", new_ref)):
        inputs[name][:, :3] = block
    return ("log-ratios to the reference of +-50 and +-20 (k3 = e^50 there); presets that "
            "clamp the KL estimate differ here", inputs, {})


def _without_kl_and_values(inputs, scores):
    """``inputs`` with logp_old = logp_ref = logp (ratio 1, no KL), zero values and
    ``scores``."""
    zero = np.zeros_like(inputs["mask"])
    inputs.update(logp_old=inputs["logp"].copy(), logp_ref=inputs["logp"].copy(),
                  values=zero.copy(), old_values=zero.copy(), scores=scores)
    return inputs


def _all_equal_rewards(rng):
    inputs = _without_kl_and_values(sample_inputs(rng, np.ones((4, 5))), np.ones(4))
    return ("every score 1, no KL (logp = logp_old = logp_ref), zero values, gamma = lam = 1: "
            "every advantage is exactly 1, so its variance is 0", inputs,
            {"gamma": 1.0, "lam": 1.0})


def _gamma_lam(gamma, lam):
    return _layout(f"gamma = {gamma:g}, lam = {lam:g}", np.ones((3, 6)),
                   {"gamma": gamma, "lam": lam})


def _dual_clip(rng):
    # rho = exp(logp - logp_old) in [e^1.2, e^2] = [3.3, 7.4] on every token, beyond the
    # dual-clip bound 3 (verl's clip_ratio_c); scores near 0 and values N(0, 1), so
    # A = R - V changes sign inside each row: most rows have tokens with A < 0 where the
    # dual clip bounds the term (and A > 0 ones where the upper clip bound decides)
    mask = mask_from_lengths([6, 5, 6, 4], 6)
    inputs = sample_inputs(rng, mask)
    valid = mask == 1
    logp_old = np.where(valid, inputs["logp"] - rng.uniform(1.2, 2.0, size=mask.shape), 0.0)
    logp_ref = np.where(valid, _near(rng, logp_old, 0.3), 0.0)
    inputs.update(logp_old=logp_old, logp_ref=logp_ref,
                  scores=rng.normal(0.0, 0.3, size=mask.shape[0]))
    return ("rho in [3.3, 7.4] on every token and advantages of both signs in each row: the "
            "dual clip (bound 3) and the upper clip bound decide most terms", inputs, {})


def _tiny_advantage_variance(rng):
    # scores ~ N(0, 1e-4^2), no KL, zero values, gamma = lam = 1: each token's advantage is
    # its row's score, so their variance (~1e-8) is of the order of the whitening's eps:
    # eps's value, and whether it is added to the variance or floors it, change the
    # whitened advantages by O(1)
    inputs = sample_inputs(rng, mask_from_lengths([5, 5, 4, 3], 5))
    inputs = _without_kl_and_values(inputs, rng.normal(0.0, 1e-4, size=4))
    return ("scores of size 1e-4, no KL, zero values, gamma = lam = 1: the advantages' "
            "variance (~1e-8) is of the order of the whitening's eps", inputs,
            {"gamma": 1.0, "lam": 1.0})


VALUE_CLIP_BOUND_COLUMNS = ((0.2, -1), (-0.2, 1), (0.5, -1), (-0.5, 1))
"""``values-on-clip-bounds``: per column (cycled), the offset d and ulps k of
``V = fl(V_old + d)`` moved k ulps towards V_old: one ulp inside the bound. (Exactly on
the bound, the offset form's V_clip can equal V with V - V_old rounded beyond c: a tie of
the max where PyTorch splits the gradient in half and ppo_numpy, like TensorFlow, gives
it to the unclipped branch; ``tests/test_value_loss.py`` places values exactly there.)"""


def _values_on_clip_bounds(rng):
    # V one ulp inside the value-clip bounds fl(V_old +- c), c = 0.2 (TRL, TRL 0.11,
    # DeepSpeed-Chat, lm-human-preferences) and 0.5 (verl, OpenRLHF): there
    # V_old + clip(V - V_old, -c, c) need not round back to V (|V_old| <= 0.3 makes it
    # likely), so the offset form moves V_clip one ulp off V where the clamp form keeps V.
    # The max of the two squared errors resolves that ulp only when R is close to V: with
    # gamma = 1, lam = 0 and no KL, R_t = V_old,t+1, so V_old walks by the column's d plus
    # a step of 1e-3 (|R - V| ~ 1e-3) and the two forms count different tokens as clipped
    B, T = 6, 12
    inputs = sample_inputs(rng, np.ones((B, T)))
    old = np.empty((B, T))
    values = np.empty((B, T))
    old[:, 0] = rng.uniform(-0.3, 0.3, size=B)
    for t in range(T):
        d, k = VALUE_CLIP_BOUND_COLUMNS[t % len(VALUE_CLIP_BOUND_COLUMNS)]
        v = old[:, t] + d
        for _ in range(abs(k)):
            v = np.nextafter(v, np.sign(k) * np.inf)
        values[:, t] = v
        if t + 1 < T:
            old[:, t + 1] = old[:, t] + d + rng.uniform(-1e-3, 1e-3, size=B)
    inputs.update(old_values=old, values=values, logp_ref=inputs["logp_old"].copy())
    return ("values one ulp inside the value-clip bounds V_old +- 0.2 and +- 0.5, "
            "returns within 1e-3 of them (no KL, gamma = 1, lam = 0): the offset "
            "and clamp forms of the clip count different tokens as clipped", inputs,
            {"gamma": 1.0, "lam": 0.0})


def _one_sided_log_ratios(rng):
    # logp - logp_old = +25 on columns 0 and 3 of every row: beyond the clamp 20 of verl
    # and OpenRLHF, and not balanced by a -25 (as in extreme-log-ratios), so the clamp
    # changes the mean log-ratio the frameworks log even where the dual clip hides it
    # from the loss
    inputs = sample_inputs(rng, np.ones((3, 6)))
    inputs["logp"][:, (0, 3)] = -0.05
    inputs["logp_old"][:, (0, 3)] = -25.05
    inputs["logp_ref"][:, (0, 3)] = _near(rng, inputs["logp_old"][:, (0, 3)], 0.3)
    return ("logp - logp_old = +25 on two columns of every row (rho = e^25), not balanced "
            "by negative ones: a log-ratio clamp at 20 shows in the logged mean log-ratio",
            inputs, {})


def _rollout_mismatch(rng):
    mask = mask_from_lengths([7, 5, 3, 1, 6, 2], 7)
    inputs = sample_inputs(rng, mask)
    # each row its own scale of |logp_rollout - logp_old|: a bf16 engine's to far beyond
    # every threshold (token ratios 2, 3, 5; sequence sums; log-ratio bound 20)
    scale = np.array([1e-3, 1e-2, 0.1, 0.5, 1.5, 0.05])[:, None]
    noise = rng.normal(0.0, 1.0, mask.shape) * scale
    inputs["logp_rollout"] = np.where(mask == 1,
                                      np.minimum(inputs["logp_old"] + noise, -1e-4), 0.0)
    return ("logp_rollout 1e-3 to 1.5 from logp_old, one scale per row", inputs, {})


def kl_beyond_bounds(inputs: dict, at) -> dict:
    """Two tokens of ``inputs`` (``at``: their (row, column)) where the KL term's gradient
    forms part most, written in place: logp - logp_ref = -12 with logp - logp_old = +3
    (rho = e^3 = 20, beyond OpenRLHF's weight bound 10; k3 = e^12 - 13, beyond the estimate's
    clamp at 10, where the plain gradient is 0 and the straight-through and importance ones
    are not), and logp - logp_ref = +12 with logp - logp_old = +2.5 (rho = 12.2; k3 = 11 +
    e^-12, clamped). Every log-prob stays negative."""
    (i, j), (k, l) = at
    for name, first, second in (("logp", -12.5, -0.5), ("logp_ref", -0.5, -12.5),
                                ("logp_old", -15.5, -3.0)):
        inputs[name][i, j], inputs[name][k, l] = first, second
    return inputs


def _kl_in_loss(rng):
    inputs = sample_inputs(rng, mask_from_lengths([6, 4, 5], 6), log_ratio_std=0.4)
    return ("log-ratios of std 0.4, and two tokens beyond the KL term's bounds (k3 > 10, "
            "rho = 20 and 12 > OpenRLHF's weight bound 10)",
            kl_beyond_bounds(inputs, ((0, 1), (2, 0))), {})


EDGE_CASES = {
    "length-1": _layout("every response is one token long", mask_from_lengths([1, 1, 1, 1], 5)),
    "left-padding": _layout("left padding: responses end at the last column, the score goes "
                            "there", mask_from_lengths([8, 5, 3, 1], 8, padding="left")),
    "right-padding": _layout("right padding: responses start at column 0",
                             mask_from_lengths([8, 5, 3, 1], 8)),
    # every row starts with a response token, as a rollout's response part does: only the
    # holes differ from right padding (verl, whose GAE skips holes, takes the case)
    "multi-turn-holes": _layout("masks with holes (multi-turn): V(s_{t+1}) is the value at "
                                "the next response token", HOLES_MASK),
    "garbage-in-padding": _garbage_in_padding,
    "extreme-log-ratios": _extreme_log_ratios,
    "extreme-kl": _extreme_kl,
    "all-equal-rewards": _all_equal_rewards,
    "gamma0-lam0": _gamma_lam(0.0, 0.0),
    "gamma0-lam1": _gamma_lam(0.0, 1.0),
    "gamma1-lam0": _gamma_lam(1.0, 0.0),
    "gamma1-lam1": _gamma_lam(1.0, 1.0),
    "one-valid-token": _layout("a single response token in the whole batch (whitening needs "
                               "two)", np.array([[0.0, 0.0, 1.0, 0.0, 0.0, 0.0]])),
    "dual-clip": _dual_clip,
    "tiny-advantage-variance": _tiny_advantage_variance,
    "values-on-clip-bounds": _values_on_clip_bounds,
    "one-sided-log-ratios": _one_sided_log_ratios,
    # the layout of multi-turn-holes with gamma 0.9 and lam 0.8: with gamma = lam = 1 a
    # hole run through as a zero state changes nothing (A_t = sum of later rewards - V_t)
    "holes-discounted": _layout("masks with holes, gamma 0.9, lam 0.8: skipping a hole and "
                                "running through it as a state of value 0 differ", HOLES_MASK,
                                {"gamma": 0.9, "lam": 0.8}),
}
"""The named edge cases' builders, ``builder(rng) -> (description, inputs, params)``."""

#: the KL term in the loss (a PPO preset's own option names): plain, and in the framework's
#: other gradient form (verl's kl_loss_type "+", OpenRLHF's unbiased gradient)
_KL_IN_LOSS = {"verl": {"use_kl_loss": True, "beta": 0.05},
               "openrlhf": {"use_kl_loss": True, "beta": 0.05}}
PRESET_CASES = {
    "kl-in-loss": (_kl_in_loss, _KL_IN_LOSS),
    "kl-gradient-form": (_kl_in_loss, {
        "verl": {**_KL_IN_LOSS["verl"], "kl_loss_type": "low_var_kl+"},
        "openrlhf": {**_KL_IN_LOSS["openrlhf"], "kl_unbiased_gradient": True}}),
}
"""Cases for one PPO preset: each name maps to its builder and the presets it is for, each
with its parameters (their names differ between frameworks), so that the switches that change
nothing at the defaults are exercised by the default cases of those presets
(``cases_for(preset)``; ``generate_cases(seed, preset=name)``)."""

ROLLOUT_CASES = {"rollout-mismatch": _rollout_mismatch}
"""Cases with ``logp_rollout`` (the rollout correction's input), made by name only (not in
the default set, whose counts the notebooks quote): ``generate_cases(seed, ["rollout-mismatch"])``;
``make conformance`` adds them to the oracle's cases of the PPO presets."""


def edge_case(name: str, seed: int = 0) -> dict:
    """The named edge case ``name`` (a key of :data:`EDGE_CASES`) for ``seed``."""
    builders = {**EDGE_CASES, **ROLLOUT_CASES}
    if name not in builders:
        raise ValueError(f"name: unknown edge case {name!r}; valid ones are "
                         f"{', '.join(builders)}")
    description, inputs, params = builders[name](case_rng(seed, name))
    return make_case(name, description, inputs, params)


def case_names(n_random: int = N_RANDOM, preset: str | None = None) -> list:
    """Names :func:`generate_cases` makes: ``random-0`` ... then every edge case, then those
    of :data:`PRESET_CASES` for ``preset``."""
    own = [n for n, (_, by_preset) in PRESET_CASES.items() if preset in by_preset]
    return [f"random-{k}" for k in range(n_random)] + list(EDGE_CASES) + own


def check_names(names, default) -> list:
    """``names``, a list of case names (``default`` for ``None``); TypeError for one string."""
    if isinstance(names, str):
        raise TypeError("names: expected a list of case names, got a single string")
    return default if names is None else names


def generate_cases(seed: int = 0, names=None, *, n_random: int = N_RANDOM,
                   preset: str | None = None) -> list:
    """Random cases ``random-0`` ... ``random-{n_random - 1}``, then the edge cases, then the
    cases of :data:`PRESET_CASES` for ``preset``.

    Parameters
    ----------
    seed : int >= 0
        Same seed, same arrays (bit for bit).
    names : list of str, optional
        Only these cases, in this order: edge case names, ``"random-K"``
        (any K >= 0), or ``"random"`` for all ``n_random`` random cases,
        ``"edge"`` for all edge cases, ``"rollout"`` for those of :data:`ROLLOUT_CASES`,
        ``"preset"`` for those of :data:`PRESET_CASES` for ``preset``. ``None``: the
        random, edge and ``preset``'s cases.
    n_random : int >= 0
        Number of random cases. The odd-numbered ones override gamma and lam
        (:func:`random_params`), the even ones use the preset's defaults;
        ``random-2``, ``random-6``, ... have no padding, the others are right-padded.
    preset : str, optional
        A preset's name: its cases of :data:`PRESET_CASES` follow (by default, or by name
        in ``names``), carrying its parameters. ``None``: none of them.

    Returns
    -------
    list of case dicts (see the module docstring).

    Examples
    --------
    >>> cases = generate_cases(0, ["random-1", "length-1"])
    >>> [c["name"] for c in cases], cases[1]["inputs"]["mask"].sum(axis=1).tolist()
    (['random-1', 'length-1'], [1.0, 1.0, 1.0, 1.0])
    """
    if isinstance(n_random, bool) or not isinstance(n_random, int) or n_random < 0:
        raise ValueError(f"n_random: must be a non-negative integer, got {n_random!r}")
    names = check_names(names, case_names(n_random, preset))
    aliases = {"random": [f"random-{k}" for k in range(n_random)], "edge": list(EDGE_CASES),
               "rollout": list(ROLLOUT_CASES),
               "preset": [n for n, (_, by) in PRESET_CASES.items() if preset in by]}
    expanded = []
    for name in names:
        expanded += aliases.get(name, [name])
    cases = []
    for name in expanded:
        if name.startswith("random-") and name[7:].isdigit():
            k = int(name[7:])
            rng = case_rng(seed, name)
            params = random_params(rng) if k % 2 == 1 else {}
            cases.append(random_case(rng, name=name, params=params, padded=k % 4 != 2))
        elif name in EDGE_CASES or name in ROLLOUT_CASES:
            cases.append(edge_case(name, seed))
        elif name in PRESET_CASES:
            build, by_preset = PRESET_CASES[name]
            description, inputs, params = build(case_rng(seed, name))
            cases.append(make_case(name, description, inputs,
                                   {**params, **by_preset.get(preset, {})}))
        else:
            raise ValueError(f"names: unknown case {name!r}; valid ones are 'random', 'edge', "
                             f"'rollout', 'preset', 'random-K' and "
                             f"{', '.join([*EDGE_CASES, *ROLLOUT_CASES, *PRESET_CASES])}")
    return cases

