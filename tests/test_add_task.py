"""The add task: prompts and answers by hand, exact-match scores, the held-out set, the exact
random-policy score, the forgetful prior, greedy decoding and held-out accuracy."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from ppo_numpy.models.base import ToyPolicy
from ppo_numpy.models.vocab import BOS, EOS, PAD
from ppo_numpy.training.tasks import ADD_VOCAB, AddTask, greedy_responses, make_task


def ids(text):
    return ADD_VOCAB.encode(text)


def test_vocabulary_and_prompts_by_hand():
    task = make_task("add")
    assert task.vocab is ADD_VOCAB and task.vocab_size == 15 == len(ADD_VOCAB)
    assert ADD_VOCAB.names[3:] == tuple("0123456789") + ("+", "=")
    x = task.prompts_for([7, 99, 0], [25, 1, 0])
    assert x.dtype == np.int64 and x.shape == (3, 7) == (3, task.prompt_length)
    assert ADD_VOCAB.decode(x[0]) == "<bos> 0 7 + 2 5 ="
    assert x[1].tolist() == [BOS] + ids("9 9 + 0 1 =")
    a, b = task.operands(x)
    assert a.tolist() == [7, 99, 0] and b.tolist() == [25, 1, 0]
    assert task.max_new_tokens == 4  # 99 + 99 = 198: three digits and EOS


def test_answers_have_no_leading_zeros():
    task = AddTask()
    y, m = task.answer_tokens(np.array([0, 7, 32, 104, 198]))
    assert [ADD_VOCAB.decode(row) for row in y] == [
        "0 <eos>", "7 <eos>", "3 2 <eos>", "1 0 4 <eos>", "1 9 8 <eos>"]
    assert m.sum(axis=1).tolist() == [2, 2, 3, 4, 4] and np.all(y[m == 0] == PAD)


def score(task, a, b, text, T=None):
    y = ids(text)
    T = task.max_new_tokens if T is None else T
    n = len(y)
    resp = np.array([y + [PAD] * (T - n)])
    mask = np.array([[1.0] * n + [0.0] * (T - n)])
    return float(task.score(task.prompts_for([a], [b]), resp, mask)[0])


def test_exact_match_scores_by_hand():
    task = AddTask()
    assert score(task, 17, 25, "4 2 <eos>") == 1.0
    assert score(task, 17, 25, "3 2 <eos>") == 0.0  # the forgotten carry
    assert score(task, 17, 25, "4 2 0 <eos>") == 0.0  # too long
    assert score(task, 17, 25, "4 <eos>") == 0.0  # too short
    assert score(task, 17, 25, "4 2 2 2") == 0.0  # no EOS: truncated
    assert score(task, 17, 25, "0 4 2 <eos>") == 0.0  # a leading zero
    assert score(task, 0, 0, "0 <eos>") == 1.0
    assert score(task, 99, 99, "1 9 8 <eos>") == 1.0
    assert score(task, 50, 50, "1 0 0 <eos>") == 1.0
    assert score(task, 3, 4, "7 <eos>", T=2) == 1.0  # a shorter response array is fine
    # EOS, then tokens a sampler never produces: ignored
    resp, mask = np.array([ids("4 2 <eos> 5")]), np.ones((1, 4))
    assert task.score(task.prompts_for([17], [25]), resp, mask).tolist() == [1.0]


def test_one_digit_version():
    task = AddTask(digits=1)
    assert task.prompt_length == 5 and task.max_new_tokens == 3 and task.n_heldout == 10
    assert score(task, 9, 8, "1 7 <eos>") == 1.0
    # one column, written in full: the prior never errs
    assert task.prior_score() == 1


def test_held_out_set_is_fixed_and_never_drawn_for_training():
    task, again = AddTask(), AddTask()
    np.testing.assert_array_equal(task.heldout_prompts(), again.heldout_prompts())
    assert task.heldout_prompts().shape == (200, 7)
    held = set(task.heldout_pairs.tolist())
    assert len(held) == 200 and held.isdisjoint(task.train_pairs.tolist())
    assert len(held) + len(task.train_pairs) == 10_000
    a, b = task.operands(task.sample_prompts(np.random.default_rng(0), 20_000))
    drawn = set((a * 100 + b).tolist())
    # 20000 uniform draws from 9800 pairs cover 9800 (1 - e^(-20000/9800)) ~ 8530 of them
    assert drawn.isdisjoint(held) and len(drawn) > 8000
    # prompts depend on the run's generator only through the training pairs
    x1 = task.sample_prompts(np.random.default_rng(5), 8)
    np.testing.assert_array_equal(x1, task.sample_prompts(np.random.default_rng(5), 8))


def test_random_score_by_counting_sums():
    task = AddTask()
    # the random policy picks among 12 content tokens and EOS: an answer of n digits
    # and EOS has probability 13^-(n + 1); count training sums by their number of digits
    counts = {1: 0, 2: 0, 3: 0}
    for pair in task.train_pairs.tolist():
        counts[len(str(pair // 100 + pair % 100))] += 1
    want = sum(Fraction(c, 13 ** (n + 1)) for n, c in counts.items()) / len(task.train_pairs)
    assert task.random_score() == want
    assert isinstance(task.random_score(), Fraction) and task.random_score() < Fraction(1, 100)
    # one digit, one held-out pair: of the 100 pairs, 55 have a sum below 10 and 45 do not;
    # the held-out pair is removed from its group
    one = AddTask(digits=1, n_heldout=1)
    a, b = divmod(int(one.heldout_pairs[0]), 10)
    n1, n2 = 55 - (a + b < 10), 45 - (a + b >= 10)
    assert one.random_score() == (Fraction(n1, 13**2) + Fraction(n2, 13**3)) / 99


def test_forgetful_prior_by_hand():
    task = AddTask(forget_prob=0.7)
    assert task.forgot_carry(np.array([17, 95, 85, 99, 11]),
                             np.array([25, 7, 43, 99, 22])).tolist() == [32, 92, 128, 188, 33]
    x = task.prompts_for(np.array([17] * 4000 + [11] * 4000), np.array([25] * 4000 + [22] * 4000))
    y, m = task.sample_prior(x, np.random.default_rng(0))
    s = task.score(x, y, m)
    # 17 + 25 carries: right 30% of the time, else "3 2"; 11 + 22 does not: always right
    assert abs(s[:4000].mean() - 0.3) < 0.03 and np.all(s[4000:] == 1)
    wrong = y[:4000][s[:4000] == 0]
    assert np.all(wrong[:, :3] == ids("3 2 <eos>"))
    # exact expected score: no-carry share + 0.3 x carry share, over the training pairs
    carry = sum((p // 100) % 10 + (p % 100) % 10 >= 10 for p in task.train_pairs.tolist())
    n = len(task.train_pairs)
    assert task.prior_score() == Fraction(n - carry, n) + Fraction(3, 10) * Fraction(carry, n)


class Oracle(ToyPolicy):
    """Scores +5 on the right next token (or, forgetful, the carry-less one), 0 elsewhere."""

    def __init__(self, task, forgetful=False):
        super().__init__(task.vocab_size)
        self.task, self.forgetful = task, forgetful
        self.params = {"w": np.zeros(1)}

    def forward(self, tokens, params=None):
        tokens = self.check_tokens(tokens)
        B, L = tokens.shape
        P = self.task.prompt_length
        a, b = self.task.operands(tokens[:, :P])
        total = self.task.forgot_carry(a, b) if self.forgetful else a + b
        want, _ = self.task.answer_tokens(total)
        logits = np.zeros((B, L, self.vocab_size)) + self.logit_bias
        for j in range(P - 1, L):
            logits[np.arange(B), j, want[:, j - P + 1]] += 5.0
        return logits, np.zeros((B, L)), {"tokens": tokens}


def test_greedy_decoding_and_held_out_accuracy():
    task = AddTask()
    assert task.heldout_accuracy(Oracle(task)) == 1.0
    # the forgetful oracle is right exactly on the held-out sums without a carry
    a, b = task.heldout_pairs // 100, task.heldout_pairs % 100
    no_carry = float(np.mean(a % 10 + b % 10 < 10))
    assert task.heldout_accuracy(Oracle(task, forgetful=True)) == no_carry
    y, m = greedy_responses(Oracle(task), task.prompts_for([50, 3], [50, 4]), 4)
    assert [ADD_VOCAB.decode(r) for r in y] == ["1 0 0 <eos>", "7 <eos>"]
    assert m.tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]] and y[1, 2:].tolist() == [PAD, PAD]
    assert EOS in y[0]


def test_other_tasks_have_a_fixed_evaluation_set():
    for name, n in (("target", 6), ("length", 6), ("reverse", 512), ("sort", 512)):
        task = make_task(name)
        x = task.heldout_prompts()
        assert x.shape == (n, task.prompt_length) and np.all(x[:, 0] == BOS)
        np.testing.assert_array_equal(x, make_task(name).heldout_prompts())
    # target and length: every prompt once
    assert sorted(make_task("length").heldout_prompts()[:, 1].tolist()) == list(range(3, 9))


def test_bad_arguments_name_themselves():
    with pytest.raises(ValueError, match="digits"):
        AddTask(digits=0)
    with pytest.raises(ValueError, match="digits"):
        AddTask(digits=5)
    with pytest.raises(ValueError, match="forget_prob"):
        AddTask(forget_prob=1.5)
    with pytest.raises(ValueError, match="n_heldout"):
        AddTask(digits=1, n_heldout=100)
    with pytest.raises(ValueError, match="a, b"):
        AddTask().prompts_for([100], [1])
    with pytest.raises(ValueError, match="prompts"):
        AddTask().score(np.array([[BOS, 3]]), np.array([[2]]), np.array([[1]]))


def test_the_dashboard_draws_the_held_out_accuracy_on_the_score_panel():
    from ppo_numpy.plotting.training import plot_training
    from ppo_numpy.training.metrics import COLUMNS

    acc = [0.55, 0.7, 0.91]
    history = [{c: float(k + 1) for c in COLUMNS} | {"heldout_accuracy": acc[k]}
               for k in range(3)]
    lines = plot_training(history).axes[0].lines
    assert [list(line.get_ydata()) for line in lines].count(acc) == 1


# a GRPO run on add small enough for the unit tests: 2 prompts x G = 4 per iteration
TINY_GRPO = dict(task="add", algo="grpo", model="transformer", d_model=8, n_heads=2,
                 n_layers=1, iterations=3, warmup_steps=5, batch_size=8, group_size=4,
                 minibatches=2, epochs=1)


def test_a_short_grpo_run_on_add_is_deterministic_resumes_and_logs_heldout_accuracy(tmp_path):
    from ppo_numpy.training.config import PPOConfig
    from ppo_numpy.training.metrics import read_metrics
    from ppo_numpy.training.run import load_state, resume, train

    config = PPOConfig(**TINY_GRPO)
    full = train(config, tmp_path / "full", plot=False)
    assert train(config) == full  # same seed, same history
    assert train(config.replace(seed=1)) != full
    csv = read_metrics(tmp_path / "full/metrics.csv")
    np.testing.assert_array_equal(csv["heldout_accuracy"],
                                  [row["heldout_accuracy"] for row in full])
    # the logged accuracy is the task's greedy exact match of the saved final policy,
    # recomputed here from the held-out prompts
    state = load_state(tmp_path / "full/checkpoint.npz")
    task = AddTask()
    x = task.heldout_prompts()
    y, m = greedy_responses(state.policy, x, task.max_new_tokens)
    a, b = task.operands(x)
    want = [ADD_VOCAB.decode(r) for r in task.answer_tokens(a + b)[0]]
    got = [ADD_VOCAB.decode(r) for r in y]
    assert full[-1]["heldout_accuracy"] == np.mean([g == w for g, w in zip(got, want)])
    for row in full:  # critic-free: no value loss; the ratio check passed
        assert np.isnan(row["value_loss"]) and row["ratio_first_min"] == 1.0
    # checkpoint and resume: the same bytes and parameters as the uninterrupted run (the
    # histories hold NaN, which no == holds for once read back, hence the bytes)
    train(config.replace(iterations=1), tmp_path / "part", plot=False)
    resume(tmp_path / "part", {"iterations": 3}, plot=False)
    assert (tmp_path / "part/metrics.csv").read_bytes() == \
        (tmp_path / "full/metrics.csv").read_bytes()
    resumed = load_state(tmp_path / "part/checkpoint.npz")
    for name, value in state.policy.params.items():
        np.testing.assert_array_equal(resumed.policy.params[name], value, err_msg=name)


def test_the_command_line_runs_grpo_on_add(capsys, tmp_path):
    from ppo_numpy.programs import train as cli
    from ppo_numpy.training.config import PPOConfig

    # no --group-size: the add task's GRPO default, G = 4
    argv = ["--task", "add", "--policy", "transformer", "--algo", "grpo",
            "--d-model", "8", "--n-heads", "2", "--n-layers", "1", "--iterations", "2",
            "--warmup-steps", "3", "--batch-size", "8", "--minibatches", "2", "--epochs", "1",
            "--no-plot", "--out", str(tmp_path / "r")]
    assert cli.main(argv) == 0
    assert "greedy acc" in capsys.readouterr().out
    saved = PPOConfig.from_json((tmp_path / "r/config.json").read_text())
    assert (saved.algo, saved.group_size, saved.model) == ("grpo", 4, "transformer")


def test_grpo_on_add_has_its_own_group_size_under_the_options():
    from ppo_numpy.training.config import DEFAULT_GROUP_SIZE, PPOConfig, config_for_task

    assert config_for_task(task="add", algo="grpo").group_size == 4
    assert config_for_task(task="add", algo="grpo", group_size=8).group_size == 8
    # PPO on add, and GRPO on the other tasks, keep G = None (1 for ppo, 8 for grpo)
    assert config_for_task(task="add").group_size is None
    assert config_for_task(task="add", algo="rloo").group_size is None
    assert config_for_task(task="length", algo="grpo") == PPOConfig(task="length", algo="grpo")
    assert DEFAULT_GROUP_SIZE["grpo"] == 8
    # the rest of the add task's defaults apply to GRPO too
    grpo = config_for_task(task="add", algo="grpo")
    assert (grpo.model, grpo.lr, grpo.warmup_steps, grpo.iterations) == (
        "transformer", 3e-4, 1500, 150)


def test_the_add_benchmark_passes_algo_and_fields_to_train():
    from pathlib import Path

    from benchmarks.add_training import command

    argv = command(2, Path("out"), "grpo", ["kl_loss_coef=0.04", "group_size=8"])
    assert argv[1:] == ["-m", "ppo_numpy", "train", "--task", "add", "--seed", "2", "--algo",
                        "grpo", "--kl-loss-coef", "0.04", "--group-size", "8", "--out", "out",
                        "--no-plot"]
    assert "--algo" not in command(0, Path("out"))
