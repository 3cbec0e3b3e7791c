"""Toy prompt -> response tasks, each with a rule-based "reward model" (``docs/training.md``).

A task draws prompts, scores whole responses with a rule (the stand-in for a
learned reward model: one scalar per response, placed at the last token by
:func:`ppo_numpy.kl_shaped_rewards`), knows its optimal score, and describes a
*prior*: the distribution of responses the reference model is warmed up on
before PPO starts, so that pi_ref is a sensible language model and the KL
penalty has something to pull towards.

Token ids (``ppo_numpy.models.vocab``): PAD 0, BOS 1, EOS 2, content tokens
3 .. 3 + N - 1. Every prompt is BOS followed by ``prompt_tokens`` content tokens
(fixed length, no padding). A response is right-padded: ``mask`` is 1 for its
tokens, EOS included, and 0 after. A response that fills all ``max_new_tokens``
slots without EOS is *truncated*.

=========  ===============================================  =======  =================
task       the rule                                         optimum  prior (reference)
=========  ===============================================  =======  =================
target     say the prompt's token c in every slot           1        random content,
                                                                     stops early
length     prompt token c_i asks for i + 1 tokens, then EOS 1        random length
reverse    the prompt's content reversed, then EOS          1        noisy copy
sort       the prompt's content sorted ascending, then EOS  1        noisy copy
add        the digits of a + b, then EOS (exact match)      1        forgets carries
=========  ===============================================  =======  =================

``add`` (:class:`AddTask`) has its own vocabulary (digits, ``+``, ``=``; :data:`ADD_VOCAB`)
and a fixed held-out set of sums, disjoint from the training prompts.
:meth:`Task.heldout_accuracy` is the share of a task's fixed evaluation prompts whose
*greedy* response reaches the optimum (exact match for ``add``); for the other tasks
the evaluation prompts are all prompts (or a fixed sample of 512), not held out.

The *random policy* of every task picks, at each step, uniformly among the N
content tokens and EOS (it never emits PAD or BOS). :meth:`Task.random_score`
is its exact expected score, a Fraction; ``tests/test_tasks.py`` checks it by
enumerating every response of small tasks.
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np

from .._checks import as_mask, check_int
from ..models.base import check_rng
from ..models.vocab import BOS, EOS, FIRST_CONTENT, PAD, SPECIAL_NAMES, Vocab


def response_lengths(responses, mask):
    """Number of tokens before EOS and whether the response stopped, from a right-padded batch.

    Parameters
    ----------
    responses : int array (B, T)
    mask : array of 0/1 (B, T)
        1 for the response's tokens (EOS included), then 0: right padding only.

    Returns
    -------
    n : int array (B,)
        Tokens before the first EOS (all of them for a truncated response).
    stopped : bool array (B,)
        True when the response contains EOS. A sampler stops at EOS; tokens
        after an EOS (which it never produces) are ignored.

    Examples
    --------
    >>> n, stopped = response_lengths([[5, 2, 0], [5, 6, 7], [2, 0, 0]],
    ...                               [[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    >>> n.tolist(), stopped.tolist()
    ([1, 3, 0], [True, False, True])
    """
    y = np.asarray(responses)
    if y.ndim != 2 or y.dtype.kind not in "iu":
        raise ValueError(f"responses: expected an int array (B, T), got {y.dtype} {y.shape}")
    m = as_mask(mask, y, "responses")
    length = m.sum(axis=1)
    # right padding: the mask is 1 exactly on the first `length` positions
    if not np.array_equal(m, np.arange(y.shape[1])[None, :] < length[:, None]):
        raise ValueError("mask: responses must be right-padded (1s, then 0s in every row)")
    if np.any(length == 0):
        raise ValueError("mask: every response needs at least one token")
    is_eos = m & (y == EOS)
    stopped = is_eos.any(axis=1)
    return np.where(stopped, is_eos.argmax(axis=1), length), stopped


def _prefix(y, n):
    """The response tokens ``y`` (an array) before EOS, as a (B, T) array with -1 beyond them."""
    keep = np.arange(y.shape[1])[None, :] < n[:, None]
    return np.where(keep, y, -1)


class Task:
    """A prompt -> response task with a rule-based score (see the module docstring).

    Subclasses define ``_score``, and ``random_score`` and ``_prior`` unless the defaults
    suit them: the random score of a task paying 1 / T per right slot; a prior of uniform
    random content tokens, stopping after a uniform 1 .. T - 1.

    Attributes
    ----------
    name : str
    n_content : int
        N, the number of content tokens; ``vocab_size = 3 + N``.
    prompt_tokens : int
        Content tokens per prompt; ``prompt_length = 1 + prompt_tokens`` (BOS first).
    max_new_tokens : int
        T, the longest response.
    optimum : float
        The best achievable score.
    """

    name = ""
    summary = ""
    optimum = 1.0

    def __init__(self, n_content, prompt_tokens, max_new_tokens):
        self.n_content = check_int(n_content, "n_content", 2)
        self.prompt_tokens = check_int(prompt_tokens, "prompt_tokens", 1)
        self.max_new_tokens = check_int(max_new_tokens, "max_new_tokens", 1)

    @property
    def vocab_size(self):
        return FIRST_CONTENT + self.n_content

    @property
    def prompt_length(self):
        return 1 + self.prompt_tokens

    def __repr__(self):
        return (f"{type(self).__name__}(n_content={self.n_content}, "
                f"prompt_tokens={self.prompt_tokens}, max_new_tokens={self.max_new_tokens})")

    @property
    def vocab(self):
        """Names of the token ids (:class:`~ppo_numpy.models.vocab.Vocab`), for printing."""
        return Vocab(self.vocab_size)

    #: most prompts in :meth:`heldout_prompts`
    max_heldout = 512

    def heldout_prompts(self):
        """The fixed evaluation prompts of :meth:`heldout_accuracy`, int64 (n, P).

        Here every possible prompt when there are at most :attr:`max_heldout`, else that
        many drawn by a generator seeded with 0 (whatever the run's ``seed``). Training may
        draw these prompts too; :class:`AddTask` overrides this with a truly held-out set.
        """
        n_prompts = self.n_content**self.prompt_tokens
        if n_prompts <= self.max_heldout:
            contents = itertools.product(range(FIRST_CONTENT, self.vocab_size),
                                         repeat=self.prompt_tokens)
            return np.array([(BOS, *content) for content in contents], dtype=np.int64)
        return self.sample_prompts(np.random.default_rng(0), self.max_heldout)

    def heldout_accuracy(self, model):
        """Share of :meth:`heldout_prompts` whose *greedy* response reaches the optimum.

        Greedy decoding (:func:`greedy_responses`) uses no randomness, so logging this
        leaves a run's random stream untouched. A float in [0, 1].
        """
        x = self.heldout_prompts()
        y, m = greedy_responses(model, x, self.max_new_tokens)
        return float(np.mean(self.score(x, y, m) == self.optimum))

    def sample_prompts(self, rng, n):
        """``n`` prompts: BOS then ``prompt_tokens`` uniform content tokens; int64 (n, P)."""
        check_rng(rng)
        n = check_int(n, "n", 1)
        content = rng.integers(FIRST_CONTENT, self.vocab_size, size=(n, self.prompt_tokens))
        return np.concatenate([np.full((n, 1), BOS, dtype=np.int64), content], axis=1)

    def _check_prompts(self, prompts):
        x = np.asarray(prompts)
        if x.ndim != 2 or x.shape[1] != self.prompt_length or x.dtype.kind not in "iu":
            raise ValueError(f"prompts: expected an int array (B, {self.prompt_length}) for "
                             f"task {self.name!r}, got {x.dtype} {x.shape}")
        return x

    def score(self, prompts, responses, mask):
        """The rule-based score of each response: float64 (B,), in [0, optimum].

        Parameters
        ----------
        prompts : int array (B, P)
        responses : int array (B, T') with T' <= max_new_tokens
        mask : array of 0/1 (B, T'), right-padded
        """
        x = self._check_prompts(prompts)
        y = np.asarray(responses)
        n, stopped = response_lengths(y, mask)
        if y.shape[0] != x.shape[0]:
            raise ValueError(f"responses: {y.shape[0]} rows for {x.shape[0]} prompts")
        if y.shape[1] > self.max_new_tokens:
            raise ValueError(f"responses: at most {self.max_new_tokens} tokens for task "
                             f"{self.name!r}, got {y.shape[1]}")
        return self._score(x[:, 1:], y, n, stopped).astype(np.float64)

    def sample_prior(self, prompts, rng):
        """Responses of the prior the reference model is warmed up on: (responses, mask).

        ``responses`` int64 (B, T) right-padded with PAD, ``mask`` float64 (B, T).
        """
        check_rng(rng)
        x = self._check_prompts(prompts)
        content, n = self._prior(x[:, 1:], rng)
        return _assemble(content, n, self.max_new_tokens)

    def sample_random(self, prompts, rng):
        """Responses of the random policy (uniform over content tokens and EOS at each step)."""
        check_rng(rng)
        x = self._check_prompts(prompts)
        B, T = x.shape[0], self.max_new_tokens
        y = rng.integers(FIRST_CONTENT - 1, self.vocab_size, size=(B, T))
        # token FIRST_CONTENT - 1 is EOS: the response ends at the first one
        is_eos = y == EOS
        return _assemble(y, np.where(is_eos.any(axis=1), is_eos.argmax(axis=1), T), T)

    def _q(self):
        """Probability that one random-policy token is not EOS, and that it is a given token."""
        N = self.n_content
        return Fraction(N, N + 1), Fraction(1, N + 1)

    def random_score(self):
        """Exact expected score of the random policy (a Fraction).

        Here that of the tasks paying 1 / T for each of the T slots whose right token comes
        before any EOS (target; reverse and sort, whose (P + 1)-th slot wants EOS); the
        other tasks override it.
        """
        T = self.max_new_tokens
        q, p = self._q()
        # slot t holds the right token when the t tokens before it are not EOS and it is right
        return sum(q**t * p for t in range(T)) / T

    def _prior(self, content, rng):
        B, T = content.shape[0], self.max_new_tokens
        n = rng.integers(1, T, size=B)
        return rng.integers(FIRST_CONTENT, self.vocab_size, size=(B, T)), n


def _assemble(content, n, T):
    """Right-padded responses ``content[:, :n]`` + EOS (when n < T), and their mask; content
    (B, <= T)."""
    B = content.shape[0]
    pos = np.arange(T)[None, :]
    y = np.zeros((B, T), dtype=np.int64)
    y[:, : content.shape[1]] = content
    y = np.where(pos < n[:, None], y, 0)
    y = np.where(pos == n[:, None], EOS, y)
    mask = (pos <= n[:, None]).astype(np.float64)
    return y, mask


class TargetTask(Task):
    """Say the prompt's token c in every one of the T slots.

    score = (number of slots t < T holding c before EOS) / T. Optimum 1: c, T
    times, truncated (never stopping). The prior stops after a uniform 1 .. T - 1
    random content tokens, so the reference model has learned to end with EOS
    and to use c only 1/N of the time: reaching the optimum costs KL.
    """

    name = "target"
    summary = "say the prompt's token in every slot (the prior stops early)"

    def __init__(self, n_content=6, max_new_tokens=6):
        super().__init__(n_content, 1, max_new_tokens)
        if self.max_new_tokens < 2:
            raise ValueError("max_new_tokens: the target task needs at least 2")

    def _score(self, content, y, n, stopped):
        hits = _prefix(y, n) == content[:, :1]
        return hits.sum(axis=1) / self.max_new_tokens


class LengthTask(Task):
    """Stop at the right length: the prompt's token c_i (i = 0 .. N-1) asks for L = i + 1 tokens.

    With n tokens before EOS: score 1 if n = L, 1/2 if |n - L| = 1, else 0; a
    truncated response (no EOS in T = N + 1 slots) scores 0. Which content
    tokens are used does not matter. The prior ignores the prompt: a uniform
    length 1 .. N of random content tokens, then EOS.
    """

    name = "length"
    summary = "the prompt's token asks for a length; stop there with EOS"

    def __init__(self, n_content=6):
        super().__init__(n_content, 1, n_content + 1)

    def _score(self, content, y, n, stopped):
        L = content[:, 0] - FIRST_CONTENT + 1
        off = np.abs(n - L)
        s = np.where(off == 0, 1.0, np.where(off == 1, 0.5, 0.0))
        return np.where(stopped, s, 0.0)

    def random_score(self):
        N = self.n_content
        q, p = self._q()
        total = Fraction(0)
        for L in range(1, N + 1):
            # n tokens then EOS, n = 0 .. T - 1 = N, has probability q^n p
            for n in range(0, N + 1):
                s = 1 if n == L else Fraction(1, 2) if abs(n - L) == 1 else 0
                total += q**n * p * s
        return total / N


class _MatchTask(Task):
    """Score (matches with the wanted content before EOS + [EOS right after them]) / (P + 1)."""

    #: probability that a prior token copies the prompt (else a uniform content token)
    copy_prob = 0.5

    def __init__(self, n_content=6, prompt_tokens=4):
        super().__init__(n_content, prompt_tokens, prompt_tokens + 1)

    def _wanted(self, content):
        raise NotImplementedError

    def _score(self, content, y, n, stopped):
        P = self.prompt_tokens
        matches = (_prefix(y, n)[:, :P] == self._wanted(content)).sum(axis=1)
        eos_right = stopped & (n == P)
        return (matches + eos_right) / (P + 1)

    def _prior(self, content, rng):
        B, P = content.shape
        noise = rng.integers(FIRST_CONTENT, self.vocab_size, size=(B, P))
        copy = rng.random((B, P)) < self.copy_prob
        return np.where(copy, content, noise), np.full(B, P)


class ReverseTask(_MatchTask):
    """Reverse the prompt's P content tokens, then EOS.

    score = (number of i < P with y_i = x_{P-1-i}, among tokens before EOS,
    + 1 if EOS comes right after P tokens) / (P + 1); optimum 1. The prior is
    a noisy copy: each token is the prompt's token at the same position with
    probability 1/2, else uniform; then EOS.
    """

    name = "reverse"
    summary = "the prompt's content reversed, then EOS (the prior copies)"

    def _wanted(self, content):
        return content[:, ::-1]


class SortTask(_MatchTask):
    """Sort the prompt's P content tokens ascending (by id), then EOS.

    Scored like :class:`ReverseTask` against ``sorted(x)``; same noisy-copy prior.
    """

    name = "sort"
    summary = "the prompt's content sorted ascending, then EOS (the prior copies)"

    def _wanted(self, content):
        return np.sort(content, axis=1)


def greedy_responses(model, prompts, max_new_tokens):
    """Greedy decoding: y_t = argmax_k logits[P - 1 + t, k], stopping at EOS; (responses, mask).

    Step t runs the model over the prompt and the t tokens so far (a causal model needs
    nothing else) and takes the most likely next token; ties go to the smallest id.
    Right-padded with PAD after EOS. Uses no randomness.
    """
    x = model.check_tokens(prompts, "prompts")
    T = check_int(max_new_tokens, "max_new_tokens")
    B = x.shape[0]
    p = model.resolve_params(None)
    responses = np.full((B, T), PAD, dtype=np.int64)
    mask = np.zeros((B, T))
    done = np.zeros(B, dtype=bool)
    for t in range(T):
        # the rows still being written (a row's logits do not depend on the other rows)
        live = np.flatnonzero(~done)
        tokens = np.concatenate([x[live], responses[live, :t]], axis=1)  # (n, P + t)
        # the policy's logits alone, on tokens checked already (x) or chosen here
        logits, _, _ = model._forward(tokens, p, values=False)
        y = np.argmax(logits[:, -1], axis=-1)  # (n,)
        responses[live, t] = y
        mask[live, t] = 1.0
        done[live] = y == EOS
        if np.all(done):
            break
    return responses, mask


#: the add task's digits 0 .. 9 are ids 3 .. 12, then ``+`` 13 and ``=`` 14
DIGIT0 = FIRST_CONTENT
PLUS = FIRST_CONTENT + 10
EQUALS = FIRST_CONTENT + 11


#: the vocabulary of :class:`AddTask`, ``<pad> <bos> <eos> 0 1 .. 9 + =``:
#: ``ADD_VOCAB.decode([1, 3, 10, 13]) == '<bos> 0 7 +'``
ADD_VOCAB = Vocab(FIRST_CONTENT + 12)
ADD_VOCAB.names = SPECIAL_NAMES + tuple("0123456789") + ("+", "=")


def _digits_of(n, width):
    """Decimal digits of each entry of ``n`` (most significant first), (B, width) int."""
    n = np.asarray(n, dtype=np.int64)
    powers = 10 ** np.arange(width - 1, -1, -1)
    return (n[:, None] // powers[None, :]) % 10


class AddTask(Task):
    """Character-level addition: prompt ``BOS a + b =``, response the digits of a + b, EOS.

    a and b are uniform in 0 .. 10^n - 1 (n = ``digits``, default 2), written with n digits
    each (zero-padded: ``07 + 25 =``, so every prompt has 2n + 2 content tokens); the sum is
    written without leading zeros (``3 2``, ``1 0 4``, ``0``) and then EOS, at most n + 2
    tokens. Score 1 if the response is exactly that (EOS included), else 0.

    The held-out set is a fixed ``n_heldout`` of the 10^{2n} pairs (a, b), chosen by a
    generator seeded with 0 whatever the run's ``seed``; :meth:`sample_prompts` draws only
    the other pairs, so training never sees a held-out sum.

    Prior (the warm-up): a pupil who forgets to carry. With probability ``forget_prob``
    it writes the column sums without carrying, (a_i + b_i) mod 10 in every column but
    the leftmost, which is written in full (17 + 25 -> 32, 95 + 07 -> 92); otherwise it
    writes a + b. On sums without a carry both are a + b, so the warmed-up reference is
    right on those and, with forget_prob > 1/2, greedily wrong on the others (45% of
    the two-digit pairs carry from the units): PPO has to learn to carry, and the KL to
    the reference is the price.

    Parameters
    ----------
    digits : int in 1 .. 4
        n, digits per operand. Default 2. (With n = 1 there is no carry to forget.)
    forget_prob : float in [0, 1]
        How often the prior forgets its carries. Default 0.7.
    n_heldout : int, optional
        Size of the held-out set. Default min(200, 10^{2n} / 10).
    """

    name = "add"
    summary = "the digits of a + b, then EOS (the prior forgets to carry)"

    def __init__(self, digits=2, forget_prob=0.7, n_heldout=None):
        self.digits = check_int(digits, "digits")
        if self.digits > 4:
            raise ValueError(f"digits: at most 4 (10^(2 digits) pairs are enumerated), "
                             f"got {self.digits}")
        if not 0 <= forget_prob <= 1:
            raise ValueError(f"forget_prob: must be in [0, 1], got {forget_prob!r}")
        self.forget_prob = float(forget_prob)
        n = self.digits
        super().__init__(12, 2 * n + 2, n + 2)
        n_pairs = 10 ** (2 * n)
        # 200: the held-out accuracy is logged every iteration, at ~1/3 of its cost
        default = min(200, n_pairs // 10)
        self.n_heldout = default if n_heldout is None else check_int(n_heldout, "n_heldout")
        if self.n_heldout >= n_pairs:
            raise ValueError(f"n_heldout: must be < {n_pairs} (the number of pairs), "
                             f"got {self.n_heldout}")
        order = np.random.default_rng(0).permutation(n_pairs)
        #: pair index a * 10^n + b of the held-out and of the training sums, ascending
        self.heldout_pairs = np.sort(order[: self.n_heldout])
        self.train_pairs = np.sort(order[self.n_heldout :])

    def __repr__(self):
        return (f"AddTask(digits={self.digits}, forget_prob={self.forget_prob}, "
                f"n_heldout={self.n_heldout})")

    @property
    def vocab(self):
        return ADD_VOCAB

    def prompts_for(self, a, b):
        """The prompts of the sums a + b: int64 (B, 2n + 3), ``BOS a_1 .. a_n + b_1 .. b_n =``.

        >>> ADD_VOCAB.decode(AddTask().prompts_for([7], [25])[0])
        '<bos> 0 7 + 2 5 ='
        """
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        top = 10**self.digits
        if a.ndim != 1 or a.shape != b.shape or np.any((a < 0) | (a >= top) | (b < 0)
                                                          | (b >= top)):
            raise ValueError(f"a, b: expected two (B,) integer arrays in [0, {top})")
        B = a.shape[0]
        return np.concatenate([
            np.full((B, 1), BOS), DIGIT0 + _digits_of(a, self.digits), np.full((B, 1), PLUS),
            DIGIT0 + _digits_of(b, self.digits), np.full((B, 1), EQUALS)], axis=1)

    def operands(self, prompts):
        """(a, b), two int64 (B,) arrays, read back from prompts."""
        n = self.digits
        digits = self._check_prompts(prompts)[:, 1:] - DIGIT0  # a_1 .. a_n + b_1 .. b_n =
        powers = 10 ** np.arange(n - 1, -1, -1)
        return digits[:, :n] @ powers, digits[:, n + 1 : 2 * n + 1] @ powers

    def _pairs_prompts(self, pairs):
        return self.prompts_for(*np.divmod(pairs, 10**self.digits))

    def sample_prompts(self, rng, n):
        """``n`` prompts of sums drawn uniformly from the training pairs; int64 (n, 2n + 3)."""
        check_rng(rng)
        n = check_int(n, "n", 1)
        return self._pairs_prompts(self.train_pairs[rng.integers(0, len(self.train_pairs),
                                                                 size=n)])

    def heldout_prompts(self):
        """The fixed held-out prompts, int64 (n_heldout, 2n + 3): sums training never draws."""
        return self._pairs_prompts(self.heldout_pairs)

    def answer_tokens(self, total):
        """Responses ``digits of total, EOS`` right-padded to T, and their mask."""
        total = np.asarray(total, dtype=np.int64)
        width = self.digits + 1
        n = np.array([len(str(int(s))) for s in total])  # digits without leading zeros
        # shifted left past its leading zeros: total * 10^(width - n) has width digits, its own
        # n first (then zeros, which _assemble replaces by EOS and PAD)
        content = DIGIT0 + _digits_of(total * 10 ** (width - n), width)  # (B, width)
        return _assemble(content, n, self.max_new_tokens)

    def _score(self, content, y, n, stopped):
        x = np.concatenate([np.full((content.shape[0], 1), BOS), content], axis=1)
        a, b = self.operands(x)
        want, want_mask = self.answer_tokens(a + b)
        want_n = want_mask.sum(axis=1).astype(np.int64) - 1  # digits before EOS
        # compare the tokens before EOS and the place of EOS; what follows EOS is ignored
        same = np.all(_prefix(y, n) == _prefix(want[:, : y.shape[1]], want_n), axis=1)
        return (stopped & (n == want_n) & same).astype(np.float64)

    def forgot_carry(self, a, b):
        """The sum written without carries (the leftmost column in full): (B,) int64.

        >>> AddTask().forgot_carry(np.array([17, 95, 85]), np.array([25, 7, 43])).tolist()
        [32, 92, 128]
        """
        n = self.digits
        cols = _digits_of(a, n) + _digits_of(b, n)  # (B, n) column sums
        cols[:, 1:] %= 10
        return (cols * 10 ** np.arange(n - 1, -1, -1)).sum(axis=1)

    def sample_prior(self, prompts, rng):
        """The forgetful pupil's responses (class docstring): (responses, mask)."""
        check_rng(rng)
        a, b = self.operands(prompts)
        forget = rng.random(a.shape[0]) < self.forget_prob
        return self.answer_tokens(np.where(forget, self.forgot_carry(a, b), a + b))

    def random_score(self):
        """P(exact match) for the random policy: (1 / 13)^(digits of a + b, plus EOS),
        averaged over the training pairs."""
        a, b = np.divmod(self.train_pairs, 10**self.digits)
        lengths = np.char.str_len((a + b).astype(str))
        counts = np.bincount(lengths)
        p = Fraction(1, self.n_content + 1)
        return sum(int(c) * p ** (k + 1) for k, c in enumerate(counts) if c) / len(a)

    def prior_score(self):
        """Exact expected score of the prior on the training pairs: the share of sums without
        a carry, plus (1 - forget_prob) times the share with one (forget_prob as a Fraction
        of its decimal text)."""
        a, b = np.divmod(self.train_pairs, 10**self.digits)
        carry = int(np.sum(self.forgot_carry(a, b) != a + b))
        n = len(self.train_pairs)
        keep = 1 - Fraction(str(self.forget_prob))
        return Fraction(n - carry, n) + keep * Fraction(carry, n)



#: task name -> class; ``make_task(name)`` builds one with its default sizes
TASKS = {cls.name: cls for cls in (TargetTask, LengthTask, ReverseTask, SortTask, AddTask)}


def make_task(name, **sizes):
    """The task called ``name`` (one of :data:`TASKS`), with its default sizes unless given.

    >>> task = make_task("length")
    >>> task.vocab_size, task.prompt_length, task.max_new_tokens, task.random_score()
    (9, 2, 7, Fraction(1673983, 9882516))
    """
    if name not in TASKS:
        raise ValueError(f"task: unknown task {name!r}; valid ones are {', '.join(TASKS)}")
    return TASKS[name](**sizes)
