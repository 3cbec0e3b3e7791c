"""The fast form of GRPO and RLOO for regular group layouts (``ppo_numpy/fast/group_layouts.py``)
against the reference (``ppo_numpy/family/advantages.py``): the same bits.

The fast form runs the reference's operations in the same order, one group per column of a
reshape; exact equality is what it claims, so the tests compare bit for bit (each sum adds the
same numbers in the same order, on every CPU kind alike). Hand values pin both."""

import numpy as np
import pytest

from ppo_numpy.family.advantages import SCALES, grpo_advantages, rloo_advantages
from ppo_numpy.fast import group_layouts as fast
from tests._helpers import assert_close, assert_same


def _relabelled(g):
    """The same grouping under ids that are not 0..G-1 (no regular layout)."""
    return 7 + 3 * np.asarray(g)


def _score_sets(rng, B):
    """Scores with no ties, with ties (binary rewards: equal groups), and rounded to 0.1."""
    return [rng.normal(size=B), rng.integers(0, 2, size=B).astype(float),
            np.round(rng.normal(size=B), 1)]


@pytest.mark.parametrize("n", [2, 3, 7, 8, 9, 16, 33])
@pytest.mark.parametrize("G", [1, 2, 3, 8, 32])
def test_regular_layouts_give_the_bits_of_the_reference(n, G):
    rng = np.random.default_rng(100 * n + G)
    B = n * G
    layouts = {"blocks": np.arange(B) // n, "strided": np.arange(B) % G}
    for kind, g in layouts.items():
        if G == 1 and kind == "strided":
            continue  # one group: the same ids as blocks
        assert fast.regular_layout(g).kind == kind, (kind, g)
        assert fast.regular_layout(_relabelled(g)) is None
        for s in _score_sets(rng, B):
            inputs = dict(layout=kind, n=n, G=G, scores=s)
            assert_same(fast.rloo_advantages(s, g), rloo_advantages(s, g), **inputs)
            for scale in SCALES:
                for ddof in (0, 1):
                    for dtype in (np.float64, np.float32):
                        if scale == "batch" and B - ddof < 1:
                            continue
                        kw = dict(scale=scale, ddof=ddof, dtype=dtype, std_eps=1e-4)
                        assert_same(fast.grpo_advantages(s, g, **kw),
                                    grpo_advantages(s, g, **kw), **inputs, **kw)


@pytest.mark.parametrize("ids", [
    [0, 0, 1, 1, 2],            # B not a multiple of G
    [0, 0, 1, 2, 2, 1],         # blocks out of order
    [0, 1, 0, 2, 1, 2],         # not strided either
    [1, 1, 0, 0],               # blocks with decreasing ids
    [0, 1, 2, 3],               # groups of one
    [0, 0, 0, 1, 1, 1, 1, 1],   # unequal sizes
    [-1, -1, 0, 0],             # negative ids
])
def test_irregular_ids_take_the_reference(ids):
    assert fast.regular_layout(np.array(ids)) is None
    # int64 ids are compared as bytes, others element by element: both say no
    assert fast.regular_layout(np.array(ids, dtype=np.int32)) is None
    s = np.linspace(-1.0, 2.0, len(ids))
    kw = dict(singleton="zero")
    assert_same(fast.grpo_advantages(s, ids, **kw), grpo_advantages(s, ids, **kw), ids=ids)
    assert_same(fast.rloo_advantages(s, ids, **kw), rloo_advantages(s, ids, **kw), ids=ids)


@pytest.mark.parametrize("kind", ["blocks", "strided"])
def test_layout_found_alike_in_every_integer_form(kind):
    B, G = 12, 3
    ids = np.arange(B) // (B // G) if kind == "blocks" else np.arange(B) % G
    forms = [ids, ids.astype(np.int32), ids.astype(np.uint8),
             np.repeat(ids, 2)[::2]]  # (a non-contiguous view)
    assert not forms[-1].flags.c_contiguous
    assert [fast.regular_layout(g).kind for g in forms] == [kind] * len(forms)
    # one id moved: no form takes it for the layout
    bad = ids.copy()
    bad[[1, 5]] = bad[[5, 1]]
    assert bad.tolist() != ids.tolist()
    assert [fast.regular_layout(g) for g in (bad, bad.astype(np.int32))] == [None, None]
    # a list of ids is checked as the reference checks it, then found alike
    s = np.arange(B, dtype=float) ** 2
    assert_same(fast.grpo_advantages(s, ids.tolist()), grpo_advantages(s, ids.tolist()))


def test_regular_layout_equal_scores_and_hand_values():
    # blocks of 3: group 0 = [1, 2, 3] (mean 2, ddof-1 std 1), group 1 all 0.1 (A exactly 0)
    s = np.array([1.0, 2.0, 3.0, 0.1, 0.1, 0.1])
    A = fast.grpo_advantages(s, np.arange(6) // 3, std_eps=0.5)
    assert_close(A[:3], [-1 / 1.5, 0.0, 1 / 1.5], rtol=1e-15, atol=0, scores=s)
    assert_same(A[3:], np.zeros(3))
    # strided, 2 groups of 3: group 0 = rows 0, 2, 4 = [1, 3, 5], baselines 4, 3, 2
    s = np.array([1.0, 0.1, 3.0, 0.1, 5.0, 0.1])
    A = fast.rloo_advantages(s, np.arange(6) % 2)
    assert_same(A, np.array([1.0 - 4.0, 0.0, 3.0 - 3.0, 0.0, 5.0 - 2.0, 0.0]))


def test_the_checks_are_the_reference_checks():
    g = np.arange(4) // 2
    with pytest.raises(ValueError, match="^scale: unknown"):
        fast.grpo_advantages(np.ones(4), g, scale="rows")
    with pytest.raises(TypeError, match="^groups: expected integer prompt ids"):
        fast.rloo_advantages(np.ones(4), g.astype(float))
    with pytest.raises(ValueError, match="^scores: non-finite value nan at row 1"):
        fast.grpo_advantages([0.0, np.nan, 1.0, 2.0], g)
    with pytest.raises(ValueError, match=r"^groups: expected shape \(4,\)"):
        fast.grpo_advantages(np.ones(4), np.arange(3))
    # equal scores, std_eps 0: the reference's message names the prompt id
    with pytest.raises(ValueError, match="group of prompt id 0 has equal scores"):
        fast.grpo_advantages(np.ones(4), g, std_eps=0)
