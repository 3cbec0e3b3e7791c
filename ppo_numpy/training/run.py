"""Runs: :func:`train` and :func:`resume`, their output directory, checkpoints, the beta sweep.

An output directory holds

* ``metrics.csv``: one row per PPO iteration (``ppo_numpy.training.metrics``);
* ``checkpoint.npz``: the policy's params, Adam's state, the frozen
  reference's params (``ref.<name>``), beta, the iteration, the configuration
  (JSON) and the generator state (JSON), written after the warm-up and after
  every iteration (to a temporary file, then renamed, so an interruption never
  leaves a broken checkpoint);
* ``config.json``: the configuration, for reading;
* ``dashboard.png``: the training curves (``ppo_numpy.plotting.training``).

Resuming restores the checkpoint and keeps the first ``iteration`` rows of
metrics.csv, so an interrupted and resumed run writes the same bytes as an
uninterrupted one.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .._npz import BadFileError, entry
from ..models.checkpoint import _check_expected, load_checkpoint, save_checkpoint
from ..models.optim import Adam
from .config import CRITIC_FREE, PPOConfig, responses_per_prompt
from .loop import RunState, fork_run, make_kl_controller, make_policy, new_run, ppo_iteration
from .metrics import COLUMNS, MetricsWriter, read_metrics, read_rows
from .tasks import make_task

OUTPUTS = ("metrics.csv", "checkpoint.npz", "config.json", "dashboard.png")
#: 2: Adam's state stored under its own keys ("m/W1"); version 1 renamed them "m|W1"
CHECKPOINT_VERSION = 2


class RunError(ValueError):
    """A run cannot start or resume: bad output directory, or a mismatching checkpoint."""


def ensure_writable(out: Path) -> None:
    """Create the directory ``out`` and check a file can be written there (RunError if not)."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        raise RunError(f"output directory {out}: cannot write there ({err.strerror})") from None


def prepare_out_dir(out_dir, force: bool) -> Path:
    """Create ``out_dir`` if needed; refuse a previous run in it unless ``force``."""
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise RunError(f"output directory {out}: exists and is not a directory")
    existing = [name for name in OUTPUTS if (out / name).exists()]
    if existing and not force:
        raise RunError(f"output directory {out} already holds a run ({', '.join(existing)}); "
                       f"pass --force to overwrite it, or --resume {out} to continue it")
    ensure_writable(out)
    for name in existing:
        (out / name).unlink()
    return out


def save_state(state: RunState, path) -> None:
    """Write ``state`` to ``path`` (.npz; atomically, by ``save_checkpoint``)."""
    extra = {f"ref.{k}": v for k, v in state.reference.params.items()}
    extra.update(
        config=np.array(state.config.to_json()),
        rng_state=np.array(json.dumps(state.rng.bit_generator.state)),
        beta=np.array(state.kl_controller.value, dtype=np.float64),
        iteration=np.array(state.iteration, dtype=np.int64),
        version=np.array(CHECKPOINT_VERSION, dtype=np.int64),
    )
    save_checkpoint(path, state.policy.params, state.optimizer.state_dict(), extra)


def load_state(path) -> RunState:
    """Rebuild the :class:`RunState` saved by :func:`save_state`.

    A file that is damaged or not a training checkpoint (an entry missing or of
    the wrong dtype, a configuration or generator state that does not parse,
    NaN or inf in an array) is a :class:`~ppo_numpy._npz.BadFileError` naming
    the file and what is wrong; a checkpoint this code cannot resume (another
    version, parameters that do not fit its own configuration) a :class:`RunError`.
    """
    path = Path(path)
    if not path.exists():
        raise RunError(f"no checkpoint at {path}")
    saved = load_checkpoint(path)
    extra = saved["extra"]

    def get(key, kinds, shape=()):
        return entry(path, extra, key, kinds, shape=shape, label=f"extra/{key}")

    version = int(get("version", "iu"))
    if version != CHECKPOINT_VERSION:
        raise RunError(f"{path}: checkpoint version {version}, this code reads "
                       f"{CHECKPOINT_VERSION}")
    config_json, rng_json = str(get("config", "U")), str(get("rng_state", "U"))
    try:
        config = PPOConfig.from_json(config_json)
    except (ValueError, TypeError) as err:
        raise BadFileError(path, f"extra/config is not a configuration ({err})") from None
    beta, iteration = float(get("beta", "f")), int(get("iteration", "iu"))
    if iteration < 0:
        raise BadFileError(path, f"extra/iteration is {iteration}, expected >= 0")
    for section, arrays in (("params", saved["params"]),
                            ("optim", saved["optimizer_state"] or {}), ("extra", extra)):
        for key, value in arrays.items():
            if value.dtype.kind == "f" and not np.isfinite(value).all():
                raise BadFileError(path, f"{section}/{key} holds NaN or inf")
    if beta < 0:
        raise BadFileError(path, f"extra/beta is {beta}, expected >= 0")
    task = make_task(config.task)
    # the architecture only: every parameter is overwritten below
    policy = make_policy(config, task, np.random.default_rng(0))
    reference = make_policy(config, task, np.random.default_rng(0))
    problems = _check_expected(saved["params"], policy.params)
    if problems:
        raise RunError(f"{path}: does not match its own configuration ({problems})")
    for name in policy.params:
        policy.params[name][...] = saved["params"][name]
        reference.params[name][...] = get(f"ref.{name}", "f", policy.params[name].shape)
    optimizer = Adam(policy.params, lr=config.lr)
    try:
        optimizer.load_state_dict(saved["optimizer_state"] or {})
    except ValueError as err:
        raise RunError(f"{path}: its optimizer state does not match ({err})") from None
    # a PCG64 generator (the kind default_rng makes), then the saved state
    rng = np.random.Generator(np.random.PCG64(0))
    try:
        rng.bit_generator.state = json.loads(rng_json)
    except (ValueError, TypeError, KeyError) as err:
        raise BadFileError(path, f"extra/rng_state is not a PCG64 generator state "
                                 f"({type(err).__name__}: {err})") from None
    return RunState(config, task, rng, policy, reference, optimizer,
                    make_kl_controller(config, beta), iteration)


def _read_history(path: Path, n: int) -> list[dict]:
    """The first ``n`` rows of metrics.csv as dicts; BadFileError naming the file and row."""
    rows = read_rows(path)
    if len(rows) < n:
        raise BadFileError(path, f"has {len(rows)} rows, the checkpoint is at iteration {n}")
    history = []
    for k, row in enumerate(rows[:n], start=1):
        if len(row) != len(COLUMNS):
            raise BadFileError(path, f"row {k} (line {k + 1}) has {len(row)} fields, "
                                     f"expected {len(COLUMNS)}")
        parsed = {}
        for name, v in zip(COLUMNS, row):
            try:
                parsed[name] = int(v) if name == "iteration" else float(v)
            except ValueError:
                raise BadFileError(path, f"row {k} (line {k + 1}): {name} = {v!r} is not a "
                                         "number") from None
        if parsed["iteration"] != k:
            raise BadFileError(path, f"row {k} (line {k + 1}) has iteration "
                                     f"{parsed['iteration']}, expected {k}")
        history.append(parsed)
    return history


def _run(state: RunState, out: Path | None, callback, plot: bool, history=None):
    """Iterate until ``state.config.iterations``; write rows, checkpoints, the dashboard.

    ``history``: the rows of the iterations already done (a resume, checked by
    :func:`_read_history`); metrics.csv keeps them.
    """
    history = list(history or [])
    writer = None
    if out is not None:
        writer = MetricsWriter(out / "metrics.csv", keep_rows=len(history))
        (out / "config.json").write_text(
            json.dumps(json.loads(state.config.to_json()), indent=2) + "\n")
        if state.iteration == 0:
            save_state(state, out / "checkpoint.npz")
    try:
        while state.iteration < state.config.iterations:
            row = ppo_iteration(state)
            history.append(row)
            if writer is not None:
                writer.write(row)
                save_state(state, out / "checkpoint.npz")
            if callback is not None:
                callback(row)
    finally:
        if writer is not None:
            writer.close()
    if out is not None and plot and history:
        from ..plotting.training import plot_training

        c = state.config
        title = f"{c.task} (seed {c.seed})"
        if c.algo in CRITIC_FREE:
            title = f"{c.algo}, G = {responses_per_prompt(c)}: {title}"
        fig = plot_training(read_metrics(out / "metrics.csv"), optimum=state.task.optimum,
                            random_score=float(state.task.random_score()), title=title)
        if c.algo in CRITIC_FREE:
            _label_unused_value_head(fig)
        fig.savefig(out / "dashboard.png", dpi=90)
    return history


def _label_unused_value_head(fig) -> None:
    """Say on the dashboard that a critic-free run logs no value statistics (NaN columns)."""
    for ax in fig.axes:
        title = ax.get_title()
        if title == "losses":
            ax.set_title("losses (no value loss: critic-free)")
        if "explained variance" in title:
            ax.set_title("explained variance: no value head")
            ax.set_xlim(fig.axes[0].get_xlim())
            ax.text(0.5, 0.5, "critic-free run:\nthe value head is not used",
                    transform=ax.transAxes, ha="center", va="center", color="0.4")


def train(config: PPOConfig | None = None, out_dir=None, callback=None, *, force=False,
          plot=True) -> list[dict]:
    """Warm up, then run ``config.iterations`` PPO iterations; return one dict per iteration.

    Parameters
    ----------
    config : PPOConfig, optional
        Default ``PPOConfig()`` (the default task and hyperparameters).
    out_dir : str or Path, optional
        Write metrics.csv, checkpoint.npz, config.json and dashboard.png there.
        ``None``: nothing is written (notebooks, sweeps).
    callback : callable(row), optional
        Called after every iteration with its row of metrics (the CLI prints it).
    force : bool
        Overwrite a previous run in ``out_dir`` (otherwise :class:`RunError`).
    plot : bool
        Write dashboard.png at the end.

    Returns
    -------
    list of dict, one per iteration, keys :data:`~ppo_numpy.training.metrics.COLUMNS`.
    """
    config = PPOConfig() if config is None else config
    if not isinstance(config, PPOConfig):
        raise TypeError(f"config: expected a PPOConfig, got {type(config).__name__}")
    out = None if out_dir is None else prepare_out_dir(out_dir, force)
    return _run(new_run(config), out, callback, plot)


def resume(out_dir, overrides=None, callback=None, *, plot=True) -> list[dict]:
    """Continue the run saved in ``out_dir``; return its whole history (old rows included).

    ``overrides`` may change ``iterations`` (to extend a run); any other field
    must equal the checkpoint's, or :class:`RunError` lists the differences.
    A damaged checkpoint.npz or metrics.csv is a :class:`~ppo_numpy._npz.BadFileError`
    naming the file and what is wrong; nothing in ``out_dir`` is changed then.
    """
    out = Path(out_dir)
    state = load_state(out / "checkpoint.npz")
    try:
        asked = state.config.replace(**(overrides or {}))
    except (TypeError, ValueError) as err:
        raise RunError(str(err)) from None
    diff = state.config.differences(asked)
    if diff:
        listed = ", ".join(f"{k} = {a!r} in the checkpoint, {b!r} asked" for k, (a, b)
                           in diff.items())
        raise RunError(f"the checkpoint in {out} was made with another configuration: {listed}")
    if asked.iterations < state.iteration:
        raise RunError(f"the run in {out} already has {state.iteration} iterations; "
                       f"iterations = {asked.iterations} would shorten it")
    state.config = asked
    if not (out / "metrics.csv").exists():
        raise RunError(f"{out}: has a checkpoint but no metrics.csv")
    # checked before anything is written: a refused resume leaves the run as it was
    history = _read_history(out / "metrics.csv", state.iteration)
    return _run(state, out, callback, plot, history)


def beta_sweep(betas, config: PPOConfig | None = None, callback=None) -> dict:
    """Train once per beta from one shared warm-up; return ``{beta: history}``.

    Every run starts from the same warmed-up policy, reference and generator
    state, so ``beta_sweep([b], config)[b]`` equals ``train(config.replace(beta=b))``.
    The default configuration (:data:`SWEEP_CONFIG`) takes a few seconds per beta.
    """
    config = SWEEP_CONFIG if config is None else config
    betas = [float(b) for b in betas]
    start = new_run(config)
    results = {}
    for beta in betas:
        state = fork_run(start, config.replace(beta=beta))
        results[beta] = _run(state, None, callback, plot=False)
    return results


#: a small, quick configuration for sweeps (notebook 10). Its value head is the first
#: version's (``value_hidden`` 0, the default before issue 25), which notebook 10's sweep
#: and docs/training.md's beta table were measured with; notebook 10 sets it beside the
#: critic with its own layer in "What the critic buys"
SWEEP_CONFIG = PPOConfig(task="target", iterations=40, value_hidden=0)
