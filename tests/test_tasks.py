"""The toy tasks: hand-scored responses, optima, exact random-policy baselines, priors."""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from ppo_numpy.training.tasks import (
    TASKS,
    AddTask,
    LengthTask,
    ReverseTask,
    SortTask,
    TargetTask,
    make_task,
    response_lengths,
)

EOS, BOS = 2, 1


def pad(rows, T):
    """Right-pad token lists with PAD; mask 1 on the given tokens."""
    y = np.zeros((len(rows), T), dtype=np.int64)
    m = np.zeros((len(rows), T))
    for i, r in enumerate(rows):
        y[i, : len(r)] = r
        m[i, : len(r)] = 1
    return y, m


def score_rows(task, prompt, rows):
    y, m = pad(rows, task.max_new_tokens)
    x = np.array([prompt] * len(rows))
    return task.score(x, y, m).tolist()


# ---------------------------------------------------------------- hand-scored responses


def test_target_hand_scores():
    task = TargetTask(n_content=6, max_new_tokens=6)
    # prompt token 5; T = 6 slots
    rows = [
        [5, 5, 3, 5, EOS],  # 3 hits among 4 tokens before EOS: 3/6
        [5, 5, 5, 5, 5, 5],  # truncated, all hits: 6/6
        [EOS],  # stops at once: 0
        [5, 5, 5, 5, 5, EOS],  # 5 hits, EOS takes the last slot: 5/6
    ]
    assert score_rows(task, [BOS, 5], rows) == [0.5, 1.0, 0.0, 5 / 6]


def test_length_hand_scores():
    task = LengthTask(n_content=6)
    # prompt token 5 = content token number 2 (0-based) asks for L = 3 tokens
    rows = [
        [7, 7, 7, EOS],  # n = 3: 1
        [4, 9, EOS],  # n = 2: 1/2
        [7, EOS],  # n = 1: 0
        [7, 7, 7, 7, EOS],  # n = 4: 1/2
        [7, 7, 7, 7, 7, 7, 7],  # truncated (T = 7, no EOS): 0
        [EOS],  # n = 0: 0
    ]
    assert score_rows(task, [BOS, 5], rows) == [1.0, 0.5, 0.0, 0.5, 0.0, 0.0]
    # the smallest and largest requests: token 3 asks for 1, token 8 for 6
    assert score_rows(task, [BOS, 3], [[4, EOS]]) == [1.0]
    assert score_rows(task, [BOS, 8], [[4] * 6 + [EOS]]) == [1.0]


def test_reverse_hand_scores():
    task = ReverseTask(n_content=6, prompt_tokens=4)
    # prompt 3 4 5 6 -> wanted 6 5 4 3, EOS
    rows = [
        [6, 5, 4, 3, EOS],  # 4 + 1: 1
        [6, 5, 8, 3, EOS],  # 3 + 1: 4/5
        [6, 5, EOS],  # 2 matches, EOS at the wrong place: 2/5
        [6, 5, 4, 3, 7],  # truncated: 4/5
        [3, 4, 5, 6, EOS],  # the copy: only EOS: 1/5
    ]
    assert score_rows(task, [BOS, 3, 4, 5, 6], rows) == [1.0, 0.8, 0.4, 0.8, 0.2]


def test_sort_hand_scores():
    task = SortTask(n_content=6, prompt_tokens=4)
    # prompt 6 3 6 4 -> wanted 3 4 6 6, EOS
    rows = [
        [3, 4, 6, 6, EOS],  # 1
        [6, 3, 6, 4, EOS],  # the copy: position 2 (6 = 6) + EOS: 2/5
        [3, 4, EOS],  # 2/5
    ]
    assert score_rows(task, [BOS, 6, 3, 6, 4], rows) == [1.0, 0.4, 0.4]


def test_response_lengths_doc_example():
    n, stopped = response_lengths([[5, 2, 0], [5, 6, 7], [2, 0, 0]],
                                  [[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    assert n.tolist() == [1, 3, 0] and stopped.tolist() == [True, False, True]


# ---------------------------------------------------------------- the rule, written independently


def add_answer(content):
    """The add task's wanted response, from its docstring: the prompt read as text."""
    text = "".join("0123456789+="[t - 3] for t in content)
    a, b = text.rstrip("=").split("+")
    return [3 + int(ch) for ch in str(int(a) + int(b))] + [EOS]


def rule(task, content, tokens):
    """Each task's rule in plain Python, from its docstring (tokens: the response, EOS included)."""
    if isinstance(task, AddTask):
        want = add_answer(content)
        return float(list(tokens[: len(want)]) == want)
    before = []
    stopped = False
    for tok in tokens:
        if tok == EOS:
            stopped = True
            break
        before.append(tok)
    if isinstance(task, TargetTask):
        return sum(t == content[0] for t in before) / task.max_new_tokens
    if isinstance(task, LengthTask):
        L = content[0] - 3 + 1
        if not stopped:
            return 0.0
        return {0: 1.0, 1: 0.5}.get(abs(len(before) - L), 0.0)
    wanted = list(reversed(content)) if isinstance(task, ReverseTask) else sorted(content)
    P = len(content)
    matches = sum(a == b for a, b in zip(before[:P], wanted))
    return (matches + (stopped and len(before) == P)) / (P + 1)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_score_matches_the_rule_on_random_responses(name):
    task = make_task(name)
    rng = np.random.default_rng(3)
    x = task.sample_prompts(rng, 400)
    # random policy responses plus responses that may contain any token (PAD, BOS too)
    y1, m1 = task.sample_random(x, rng)
    y2 = rng.integers(0, task.vocab_size, size=y1.shape)
    L2 = rng.integers(1, task.max_new_tokens + 1, size=len(x))
    m2 = (np.arange(y1.shape[1])[None, :] < L2[:, None]).astype(float)
    y2 = np.where(m2 == 1, y2, 0)
    for y, m in ((y1, m1), (y2, m2)):
        got = task.score(x, y, m)
        want = [rule(task, list(x[i, 1:]), list(y[i, : int(m[i].sum())]))
                for i in range(len(x))]
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
        assert np.all((got >= 0) & (got <= task.optimum))


# ---------------------------------------------------------------- optimum


def optimal_response(task, content):
    if isinstance(task, AddTask):
        return add_answer(content)
    if isinstance(task, TargetTask):
        return [content[0]] * task.max_new_tokens
    if isinstance(task, LengthTask):
        return [3] * (content[0] - 3 + 1) + [EOS]
    if isinstance(task, ReverseTask):
        return list(reversed(content)) + [EOS]
    return sorted(content) + [EOS]


@pytest.mark.parametrize("name", sorted(TASKS))
def test_optimal_responses_reach_the_optimum(name):
    task = make_task(name)
    x = task.sample_prompts(np.random.default_rng(0), 50)
    rows = [optimal_response(task, list(c)) for c in x[:, 1:]]
    y, m = pad(rows, task.max_new_tokens)
    assert task.optimum == 1.0
    assert task.score(x, y, m).tolist() == [1.0] * 50


# ---------------------------------------------------------------- random-policy baseline


def test_random_scores_by_hand():
    # target, N = 6, T = 6: slot t holds c with probability (6/7)^t / 7, so
    # E[score] = (1/6) sum_{t<6} (6/7)^t / 7 = (1 - (6/7)^6) / 6 = 70993 / 705894
    assert TargetTask().random_score() == Fraction(70993, 705894)
    # reverse/sort, N = 6, P = 4: (sum_{i<4} (6/7)^i / 7 + (6/7)^4 / 7) / 5
    #   = ((1 - (6/7)^4) + (6/7)^4 / 7) / 5 = (1105/2401 + 1296/16807) / 5 = 9031/84035
    assert ReverseTask().random_score() == Fraction(9031, 84035)
    assert SortTask().random_score() == Fraction(9031, 84035)
    # length, N = 2: T = 3, P(n then EOS) = (2/3)^n / 3 for n = 0, 1, 2.
    # L = 1: n=1 -> 1, n=0,2 -> 1/2: 2/9 + 1/2 (1/3 + 4/27) = 2/9 + 13/54 = 25/54
    # L = 2: n=2 -> 1, n=1 -> 1/2: 4/27 + 1/2 * 2/9 = 7/27;  mean (25/54 + 14/54) / 2
    assert LengthTask(n_content=2).random_score() == Fraction(39, 108)


def enumerate_random_policy(task):
    """Every response of the random policy with its exact probability."""
    N, T = task.n_content, task.max_new_tokens
    tokens = [EOS] + list(range(3, 3 + N))
    p = Fraction(1, N + 1)
    out = []
    for length in range(1, T + 1):
        for seq in itertools.product(tokens, repeat=length):
            if EOS in seq[:-1] or (length < T and seq[-1] != EOS):
                continue
            out.append((list(seq), p**length))
    assert sum(pr for _, pr in out) == 1
    return out


@pytest.mark.parametrize("task", [TargetTask(n_content=2, max_new_tokens=3),
                                  LengthTask(n_content=3),
                                  ReverseTask(n_content=2, prompt_tokens=2),
                                  SortTask(n_content=3, prompt_tokens=2)],
                         ids=repr)
def test_random_score_equals_exhaustive_enumeration(task):
    responses = enumerate_random_policy(task)
    prompts = [[BOS, *c] for c in itertools.product(range(3, task.vocab_size),
                                                    repeat=task.prompt_tokens)]
    expected = Fraction(0)
    y, m = pad([r for r, _ in responses], task.max_new_tokens)
    for prompt in prompts:
        scores = task.score(np.array([prompt] * len(responses)), y, m)
        # scores are multiples of 1/T or 1/2 or 1/(P+1): exact as Fractions of small floats
        expected += sum(Fraction(s).limit_denominator(100) * pr
                        for s, (_, pr) in zip(scores.tolist(), responses))
    expected /= len(prompts)
    assert task.random_score() == expected


@pytest.mark.parametrize("name", sorted(TASKS))
def test_random_sampler_agrees_with_random_score(name):
    task = make_task(name)
    rng = np.random.default_rng(7)
    x = task.sample_prompts(rng, 40000)
    y, m = task.sample_random(x, rng)
    n, _ = response_lengths(y, m)
    # no PAD or BOS inside a response, EOS only at the end
    assert np.all(np.isin(y[m == 1], np.arange(2, task.vocab_size)))
    s = task.score(x, y, m)
    mu, se = float(np.mean(s)), float(np.std(s)) / np.sqrt(len(s))
    assert abs(mu - float(task.random_score())) < 4 * se, (mu, float(task.random_score()), se)


@pytest.mark.parametrize("name", sorted(TASKS))
def test_random_policy_is_far_below_the_optimum(name):
    assert make_task(name).random_score() < 0.25


# ---------------------------------------------------------------- priors


@pytest.mark.parametrize("name", sorted(TASKS))
def test_prior_responses_are_well_formed(name):
    task = make_task(name)
    rng = np.random.default_rng(1)
    x = task.sample_prompts(rng, 3000)
    y, m = task.sample_prior(x, rng)
    n, stopped = response_lengths(y, m)
    assert y.shape == (3000, task.max_new_tokens) and y.dtype == np.int64
    assert np.all(y[m == 0] == 0)
    assert np.all(stopped)  # every prior response ends with EOS
    before = np.arange(y.shape[1])[None, :] < n[:, None]
    assert np.all((y[before] >= 3) & (y[before] < task.vocab_size))
    if name == "target":
        assert set(n.tolist()) == set(range(1, task.max_new_tokens))
    elif name == "length":
        assert set(n.tolist()) == set(range(1, task.n_content + 1))
    elif name == "add":
        # digits only, as many as the sum or its carry-less version has
        assert np.all(y[before] <= 12) and set(n.tolist()) == {1, 2, 3}
    else:
        assert np.all(n == task.prompt_tokens)
        # noisy copy: each token equals the prompt's with probability 1/2 + 1/2 * 1/N
        same = float(np.mean(y[:, : task.prompt_tokens] == x[:, 1:]))
        assert abs(same - (0.5 + 0.5 / task.n_content)) < 0.02


@pytest.mark.parametrize("name", sorted(TASKS))
def test_prior_scores_below_the_optimum(name):
    task = make_task(name)
    rng = np.random.default_rng(2)
    x = task.sample_prompts(rng, 4000)
    y, m = task.sample_prior(x, rng)
    mean = float(np.mean(task.score(x, y, m)))
    if name == "add":
        # right on every sum without a carry: higher, but still well below the optimum
        prior = float(task.prior_score())
        assert abs(mean - prior) < 4 * np.sqrt(prior * (1 - prior) / len(x)) and prior < 0.75
    else:
        assert mean < 0.5


# ---------------------------------------------------------------- prompts, determinism, errors


def test_prompts_start_with_bos_and_are_deterministic():
    task = make_task("sort")
    a = task.sample_prompts(np.random.default_rng(5), 8)
    b = task.sample_prompts(np.random.default_rng(5), 8)
    assert np.array_equal(a, b) and a.shape == (8, 5) and a.dtype == np.int64
    assert np.all(a[:, 0] == BOS) and np.all((a[:, 1:] >= 3) & (a[:, 1:] < 9))


def test_inputs_are_not_modified():
    task = make_task("reverse")
    rng = np.random.default_rng(0)
    x = task.sample_prompts(rng, 5)
    y, m = task.sample_random(x, rng)
    copies = x.copy(), y.copy(), m.copy()
    task.score(x, y, m)
    for a, b in zip((x, y, m), copies):
        assert np.array_equal(a, b)


def test_bad_inputs_raise_clear_errors():
    task = make_task("length")
    x = np.array([[BOS, 4]])
    with pytest.raises(ValueError, match="task: unknown task 'nope'"):
        make_task("nope")
    with pytest.raises(ValueError, match="right-padded"):
        task.score(x, np.array([[4, 0, 2, 0, 0, 0, 0]]), np.array([[1, 0, 1, 0, 0, 0, 0]]))
    with pytest.raises(ValueError, match="prompts: expected an int array"):
        task.score(np.array([[BOS, 4, 4]]), np.array([[2]]), np.array([[1]]))
    with pytest.raises(ValueError, match="responses: at most 7 tokens"):
        task.score(x, np.full((1, 8), 4), np.ones((1, 8)))
    with pytest.raises(ValueError, match="at least one token"):
        task.score(x, np.array([[0]]), np.array([[0]]))
    with pytest.raises(TypeError, match="rng: expected a numpy.random.Generator"):
        task.sample_prompts(0, 3)
    with pytest.raises(ValueError, match="n_content: must be an integer >= 2"):
        LengthTask(n_content=1)
