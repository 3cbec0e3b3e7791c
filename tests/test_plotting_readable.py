"""Every figure of ``ppo_numpy.plotting`` is drawn at a readable size (issue 15, items 4-5).

Each public plotting function of every module is drawn on small inputs (the cases of
``tests/test_plotting_concepts.py`` and the ones below) and checked against
``ppo_numpy.plotting.style``: at least ``MIN_DPI``, at most ``MAX_WIDTH_IN`` wide (a
notebook shows a wider image scaled down, text included), no visible text under
``MIN_FONT_PT``, and no legend on the data of its panel: a legend inside the axes may
not hold a point of any line, nor overlap a shaded band.

On the documentation site a figure is shown at most ``SITE_IMAGE_WIDTH_PX`` pixels wide
(the article column, measured in Chromium by ``tests/site_check.py``), so a wider figure
and its text are scaled down: ``test_figure_is_readable_at_the_site_width`` requires every
piece of text to be at least ``MIN_FONT_PT`` as shown there (``style.rendered_pt``).
The figures drawn by modules this check was added after (``NOT_YET_AT_SITE_WIDTH``) are
expected to fail it, strictly: when one is redrawn to pass, the test says so and the name
must leave the list.
"""

from __future__ import annotations

import inspect
import json
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.patches import Polygon, Rectangle  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from ppo_numpy.grads.gradcheck import cmp  # noqa: E402
from ppo_numpy.grads.kl_exact import kl_gradient_table  # noqa: E402
from ppo_numpy.plotting import (  # noqa: E402
    concepts,
    grpo,
    kl_gradient,
    mismatch,
    oracle,
    overoptimisation,
    policy,
    step,
    training,
    transformer,
)
from ppo_numpy.plotting.style import (  # noqa: E402
    MAX_WIDTH_IN,
    MIN_DPI,
    MIN_FONT_PT,
    SITE_IMAGE_WIDTH_PX,
    rendered_pt,
)
from ppo_numpy.training.metrics import COLUMNS  # noqa: E402
from tests.test_plotting_concepts import CASES as CONCEPT_CASES  # noqa: E402
from tests.test_plotting_policy import _report  # noqa: E402
from tests.test_plotting_training import _oo_rows  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _history(n):
    return [{c: float(k + 1) for c in COLUMNS} | {"score": 0.1 * k} for k in range(n)]


MASK = np.array([[1, 1, 1, 0], [1, 1, 0, 0]])
RNG = np.random.default_rng(0)

CASES = {f"concepts.{name}": call for name, call in CONCEPT_CASES.items()} | {
    "policy.plot_forward_pass": lambda: policy.plot_forward_pass(
        {"x": RNG.normal(size=(4, 6)), "V": RNG.normal(size=4)}, tokens=list("abcd")),
    "policy.plot_gradients": lambda: policy.plot_gradients(
        {"W": RNG.normal(size=(3, 4)), "b": RNG.normal(size=4), "b_v": np.array(0.3)}),
    "policy.plot_gradcheck": lambda: policy.plot_gradcheck(
        {"W": cmp("W", np.ones(3), np.ones(3) + 1e-9)}),
    "policy.plot_minibatch": lambda: policy.plot_minibatch(
        {f"q{k}": RNG.normal(size=MASK.shape) for k in range(12)}, MASK),
    "policy.plot_ratio_after_step": lambda: policy.plot_ratio_after_step(
        np.array([[1.1, 0.9, 1.3, 1.0], [0.7, 1.0, 1.0, 1.0]]),
        np.array([[1.0, -1.0, 1.0, 0.0], [-1.0, 1.0, 0.0, 0.0]]), MASK),
    "oracle.plot_comparison": lambda: oracle.plot_comparison(_report()),
    "training.plot_training": lambda: training.plot_training(_history(8), random_score=0.1),
    "training.plot_beta_sweep": lambda: training.plot_beta_sweep(
        {0.0: _history(5), 0.1: _history(5)}, last=2),
    "training.plot_runs": lambda: training.plot_runs({"a": _history(5), "b": _history(4)}),
    # the stored comparison itself: its labels are long (notebook 10 draws it)
    "training.plot_critic_comparison[docs data]": lambda: training.plot_critic_comparison(
        json.loads((ROOT / "docs" / "data" / "critic_comparison.json").read_text())),
    "training.plot_critic_comparison": lambda: training.plot_critic_comparison(
        {"target": {"PPO": [{"score_frac": [0.5, 0.95, 1.0], "iteration_90": 2},
                            {"score_frac": [0.5, 0.6, 0.8], "iteration_90": None}],
                    "GRPO": [{"score_frac": [0.4, 0.7, 0.95], "iteration_90": 3}]}}),
    # the stored comparison (notebook 15 draws it): seven long labels
    "mismatch.plot_mismatch_comparison[docs data]": lambda: mismatch.plot_mismatch_comparison(
        json.loads((ROOT / "docs" / "data" / "mismatch_comparison.json").read_text())),
    "mismatch.plot_mismatch_comparison": lambda: mismatch.plot_mismatch_comparison(
        {"task": "length", "precision": "bfloat16", "rollout_temperature": 0.75,
         "variants": {label: {"runs": [{"eval_iterations": [0, 2], "trainer_score_frac":
                                        [0.3, 0.9], "score_frac": [0.3, 0.5],
                                        "kl_k1": [0.01, 0.02]}]}
                      for label in ("no correction", "TIS")}}),
    "mismatch.plot_correction_weights": lambda: mismatch.plot_correction_weights(
        np.geomspace(0.1, 10, 30), {"TIS, max 2": np.minimum(np.geomspace(0.1, 10, 30), 2),
                                    "MIS, [0.5, 2]": np.geomspace(0.1, 10, 30) * (
                                        np.abs(np.log(np.geomspace(0.1, 10, 30))) < 0.69),
                                    "sequence mask": np.ones(30)}),
    "kl_gradient.plot_kl_gradient_table": lambda: kl_gradient.plot_kl_gradient_table(
        kl_gradient_table([0.25, 0.75], [0.5, 0.5], [1 / 3, 2 / 3])),
    "kl_gradient.plot_sequence_gradients": lambda: kl_gradient.plot_sequence_gradients(
        ["z[1]", "z[2]", "z[1 | 1]", "z[2 | 1]", "z[1 | 2]", "z[2 | 2]"],
        {"grad KL(P || R) (sequence)": [-0.24, 0.24, 0, 0, -0.17, 0.17],
         "k1 in the reward, gamma 1": [-0.24, 0.24, 0, 0, -0.17, 0.17],
         "k3 x ratio in the loss": [-0.21, 0.21, 0, 0, -0.17, 0.17],
         "k3 plain in the loss": [-0.25, 0.25, 0, 0, -0.225, 0.225]}),
    "kl_gradient.plot_kl_runs": lambda: kl_gradient.plot_kl_runs(
        {"k1 in the loss, plain (OpenRLHF's default)": RNG.uniform(0, 4, (3, 25)),
         "k1, importance-weighted k2 gradient (--algo.kl.unbiased_gradient)":
         RNG.uniform(0, 2, (3, 25))}),
    "overoptimisation.plot_overoptimisation": lambda: overoptimisation.plot_overoptimisation(
        _oo_rows(), smooth=2),
    "overoptimisation.plot_reward_model_fit": lambda: overoptimisation.plot_reward_model_fit(
        [{"step": k, "bt_loss": 0.7 - 0.1 * k, "accuracy": 0.5 + 0.1 * k,
          "heldout_bt_loss": 0.7 + 0.05 * k, "heldout_accuracy": 0.6,
          "heldout_gold_accuracy": 0.6, "heldout_label_gold_accuracy": 0.9}
         for k in range(4)]),
    "grpo.plot_std_scaling": lambda: grpo.plot_std_scaling(
        np.array([0.25, 0.5, 0.75]), [2.0, 1.5, 2.0], [0.75, 0.5, 0.25], [1.5, 0.75, 0.5],
        group_size=4),
    "grpo.plot_length_bias": lambda: grpo.plot_length_bias(
        [2, 6], [1.0, -1.0],
        {"token-mean": [1 / 8, 1 / 8], "seq-mean-token-mean": [1 / 4, 1 / 12]}),
    "grpo.plot_training_curves": lambda: grpo.plot_training_curves(
        {"ppo": _history(6), "grpo": _history(6)}, optimum=1.0),
    "transformer.plot_attention": lambda: transformer.plot_attention(
        np.tril(np.ones((2, 4, 10, 10))) / np.arange(1, 11)[:, None], [str(k) for k in range(10)],
        title="attention"),
    "transformer.plot_attention_change": lambda: transformer.plot_attention_change(
        np.tril(np.ones((2, 4, 9, 9))) / np.arange(1, 10)[:, None],
        np.tril(np.ones((2, 4, 9, 9))) / np.arange(1, 10)[:, None] ** 0.9, list("abcdefghi")),
    "transformer.plot_accuracy_by_sum": lambda: transformer.plot_accuracy_by_sum(
        np.arange(200) % 100, (np.arange(200) * 7) % 100,
        {"after warm-up": np.arange(200) % 3 == 0, "after PPO": np.arange(200) % 5 != 0},
        (np.arange(200) % 10 + (np.arange(200) * 7) % 10) >= 10),
    "step.plot_response_shares": lambda: step.plot_response_shares(
        {"global token mean": [10 / 1010, 1000 / 1010], "micro-batch mean, 2 x 1": [0.5, 0.5],
         "TRL grpo, 1 x 2": [0.5, 0.5], "TRL dapo, 1 x 2": [10 / 1010, 1000 / 1010]},
        ["10 tokens", "1000 tokens"], full_batch=[10 / 1010, 1000 / 1010]),
    "step.plot_accumulation_drift": lambda: step.plot_accumulation_drift(
        {"global, 4 micro-batches": [3e-16, 1e-15, 4e-15, 2e-14],
         "micro-batch-mean, 4 micro-batches": [0.12, 0.38, 0.47, 0.5]}),
}


def _public_plot_functions():
    names = set()
    for module in (concepts, grpo, kl_gradient, mismatch, oracle, overoptimisation, policy,
                   step, training, transformer):
        short = module.__name__.rsplit(".", 1)[1]
        for name, obj in vars(module).items():
            if (name.startswith("plot_") and inspect.isfunction(obj)
                    and obj.__module__ == module.__name__):
                names.add(f"{short}.{name}")
    return names


@pytest.fixture(autouse=True)
def _close():
    yield
    plt.close("all")


def test_every_plotting_function_has_a_case():
    assert _public_plot_functions() == {name.split("[")[0] for name in CASES}


def _inside(bbox, x, y):
    return (bbox.x0 < x) & (x < bbox.x1) & (bbox.y0 < y) & (y < bbox.y1)


def _overlaps(a, b):
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def legend_problems(fig) -> list[str]:
    """Legends drawn on their panel's data (a line's point inside, a band overlapping) or
    on its x label."""
    problems = []
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None:
            continue
        label = ax.xaxis.label
        if label.get_text() and _overlaps(legend.get_window_extent(), label.get_window_extent()):
            problems.append(f"{ax.get_title()!r}: legend covers the x label")
        if not _overlaps(legend.get_window_extent(), ax.get_window_extent()):
            continue
        box = legend.get_window_extent()
        for line in ax.lines:
            xy = line.get_transform().transform(line.get_xydata())
            # the segments between the points too: 50 points along each
            f = np.linspace(0, 1, 50)[:, None, None]
            xy = (xy[:-1] + f * (xy[1:] - xy[:-1])).reshape(-1, 2) if len(xy) > 1 else xy
            if np.any(_inside(box, xy[:, 0], xy[:, 1])):
                problems.append(f"{ax.get_title()!r}: legend covers line {line.get_label()!r}")
        bands = [p for p in ax.patches if isinstance(p, (Rectangle, Polygon))]
        bands += [c for c in ax.collections if isinstance(c, PolyCollection)]
        for band in bands:
            if _overlaps(box, band.get_window_extent()):
                problems.append(f"{ax.get_title()!r}: legend covers band {band.get_label()!r}")
    return problems


def _drawn(name):
    return _draw(CASES[name])


def _draw(make):
    """The figure ``make()`` returns, laid out and drawn. A layout that cannot fit the
    figure is an error: constrained layout then gives up with a warning that the axes
    collapsed, and the panels are drawn where they overlap their labels."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*layout not applied.*")
        fig = make()
        # a Figure made without pyplot has no renderer yet: give it Agg, then lay it out
        FigureCanvasAgg(fig) if not isinstance(fig.canvas, FigureCanvasAgg) else None
        fig.canvas.draw()
    return fig


#: the smallest panel drawn, in inches (width and height; colour bars are not panels)
MIN_PANEL_IN = 0.5


def squeezed_panels(fig) -> list[tuple[str, float, float]]:
    """(title, width, height) of visible panels smaller than ``MIN_PANEL_IN`` inches."""
    w_in, h_in = fig.get_size_inches()
    small = []
    for ax in fig.axes:
        if not ax.get_visible() or not ax.axison or getattr(ax, "_colorbar", None):
            continue
        box = ax.get_position()
        w, h = box.width * w_in, box.height * h_in
        if min(w, h) < MIN_PANEL_IN:
            small.append((ax.get_title()[:30], round(w, 2), round(h, 2)))
    return small


def _texts(fig):
    return [t for t in fig.findobj(Text) if t.get_visible() and t.get_text().strip()]


def site_width_problems(fig) -> list[tuple[str, float, float]]:
    """(text, its size in the figure, its size as the site shows it) below ``MIN_FONT_PT``."""
    shown = [(t, rendered_pt(t.get_fontsize(), fig)) for t in _texts(fig)]
    return sorted({(t.get_text()[:30], t.get_fontsize(), round(pt, 2)) for t, pt in shown
                   if pt < MIN_FONT_PT})


#: figures wider than the site's column whose text is then below MIN_FONT_PT (issue 26):
#: each must be redrawn and leave this list (the last five left it when redrawn at
#: ``SITE_WIDTH_IN``)
NOT_YET_AT_SITE_WIDTH: set[str] = set()


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(
    strict=True, reason="not yet redrawn for the site's width")) if n in NOT_YET_AT_SITE_WIDTH
    else n for n in sorted(CASES)])
def test_figure_is_readable_at_the_site_width(name):
    fig = _drawn(name)
    small = site_width_problems(fig)
    width_px = fig.get_size_inches()[0] * fig.dpi
    assert not small, (f"{name}: {width_px:.0f} px wide, shown at {SITE_IMAGE_WIDTH_PX} px on "
                       f"the site: text below {MIN_FONT_PT} pt there (text, pt, pt shown): "
                       f"{small[:5]}")


def test_site_width_check_finds_a_scaled_down_label():
    fig, ax = plt.subplots(figsize=(2 * SITE_IMAGE_WIDTH_PX / MIN_DPI, 2), dpi=MIN_DPI)
    ax.set_title("shown at half size", fontsize=10)   # 10 pt shown as 5 pt
    ax.set_xlabel("big enough", fontsize=14)           # 14 pt shown as 7 pt
    ax.tick_params(labelsize=16)
    fig.canvas.draw()
    assert site_width_problems(fig) == [("shown at half size", 10.0, 5.0)]
    fig.set_size_inches(SITE_IMAGE_WIDTH_PX / MIN_DPI, 2)  # at the site's width: own size
    assert site_width_problems(fig) == []


@pytest.mark.parametrize("name", sorted(CASES))
def test_figure_is_readable(name):
    fig = _drawn(name)
    width, _ = fig.get_size_inches()
    assert fig.dpi >= MIN_DPI, f"{name}: dpi {fig.dpi}"
    assert width <= MAX_WIDTH_IN, f"{name}: {width:.1f} in wide"
    small = sorted({(t.get_text()[:30], t.get_fontsize()) for t in _texts(fig)
                    if t.get_fontsize() < MIN_FONT_PT})
    assert not small, f"{name}: text below {MIN_FONT_PT} pt: {small[:5]}"
    problems = legend_problems(fig)
    assert not problems, f"{name}: " + "; ".join(problems)
    squeezed = squeezed_panels(fig)
    assert not squeezed, f"{name}: panels under {MIN_PANEL_IN} in (title, w, h): {squeezed}"


def test_layout_check_finds_a_collapsed_layout_and_a_squeezed_panel():
    def collapsed():
        fig, axes = plt.subplots(1, 2, figsize=(3, 2), dpi=MIN_DPI, layout="constrained")
        axes[0].set_yticks([0, 1], ["a label far too long for a figure three inches wide", "b"])
        return fig

    with pytest.raises(UserWarning, match="layout not applied"):
        _draw(collapsed)
    fig, axes = plt.subplots(2, 1, figsize=(3, 2), dpi=MIN_DPI, height_ratios=[10, 1])
    assert [h < MIN_PANEL_IN for _, _, h in squeezed_panels(fig)] == [True]


def test_legend_check_finds_a_legend_on_a_band_and_on_a_line():
    fig, ax = plt.subplots(dpi=MIN_DPI)
    ax.plot([0, 1], [0, 1], label="line")
    ax.axhspan(0.0, 1.0, color="grey", alpha=0.2, label="band")
    ax.legend(loc="center")
    fig.canvas.draw()
    text = " ".join(legend_problems(fig))
    assert "line 'line'" in text and "band 'band'" in text
