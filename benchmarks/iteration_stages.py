"""``python -m benchmarks.iteration_stages [LABEL=CHECKOUT ...] [--set FIELD=VALUE]``: where the
time of one default training iteration goes, stage by stage, for this checkout and older ones
side by side in one process.

Each checkout is imported under its own name (:func:`benchmarks.targets.load_package`); one
``new_run(PPOConfig())`` of each is warmed up, then their ``ppo_iteration`` calls alternate
(the order swapped every iteration). The functions of each stage are wrapped by a timer
(inclusive seconds, a few microseconds of overhead per call); a stage is the time inside its
functions per iteration (median over the iterations), and "rest of the iteration" what no
stage covers. The stages:

* **sampling** (``sample``: the policy's forward pass at every step);
* **reference evaluation** (``evaluate``: logp_ref under pi_ref);
* **rewards, GAE, whitening** (KL, shaped rewards, GAE, whitening or the group baselines);
* **loss and gradient** (each minibatch's ``ppo_loss_and_grads``), split into its *forward*
  (the policy and critic's forward pass, log-softmax, entropy), the *policy loss* (its value,
  statistics and d loss / d logp), the *value loss* (its value and gradient), *d loss / d
  z* (from dlogp and the entropy) and the *backward* (the model's, to every parameter);
* **gradient norm and clipping**, **optimizer** (Adam's step);
* **held-out evaluation** (greedy decoding of the held-out prompts), **metrics**.

The wrapped names differ between checkouts (:data:`STAGES`: what each name is in the first
version, 2178b48, and in this layout); a name a checkout does not have is skipped.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

#: stage -> the functions (module, attribute path) whose inclusive time it is; a name with
#: ":" is a sub-stage of the stage before the colon
STAGES = {
    "sampling": [("training.loop", "sample")],
    "reference evaluation": [("training.loop", "evaluate"),
                             ("training.loop", "evaluate_kernel")],
    "scoring": [("training.tasks", "Task.score")],
    "rewards, GAE, whitening": [
        ("training.loop", name) for name in (
            "kl_shaped_rewards", "kl_estimate", "gae", "whiten", "kl_estimate_kernel",
            "kl_shaped_rewards_kernel", "gae_kernel", "whiten_kernel", "check_scores",
            "critic_free_advantages")],
    "minibatch rows": [("batch", "Rollout.rows")],
    "loss options": [("training.loop", "PolicyLossOptions")],
    "loss and gradient": [("training.loop", "ppo_loss_and_grads"),
                          ("training.loop", "loss_and_grads_kernel")],
    "loss and gradient: forward": [("policy.loss", "evaluate"),
                                   ("models.loss", "evaluate_kernel")],
    "loss and gradient: policy loss": [
        ("policy.loss", "ppo_policy_loss"), ("policy.loss", "policy_loss_grad"),
        ("models.loss", "policy_loss_kernel")],
    "loss and gradient: value loss": [
        ("policy.loss", "value_loss"), ("policy.loss", "value_loss_grad"),
        ("models.loss", "value_loss_kernel"), ("models.loss", "value_loss_grad_kernel")],
    "loss and gradient: d loss / d z": [("policy.loss", "logits_grad_from_logp"),
                                        ("policy.loss", "entropy_grad"),
                                        ("models.loss", "logits_grad_from_logp"),
                                        ("models.loss", "entropy_grad_kernel")],
    "loss and gradient: backward": [("policy.mlp", "MLPPolicy.backward"),
                                    ("models.mlp", "MLPPolicy.backward")],
    "gradient norm and clipping": [("training.loop", "global_norm"),
                                   ("training.loop", "clip_grad_norm"),
                                   ("training.loop", "scale_to_norm")],
    "optimizer": [("policy.optim", "Adam.step"), ("models.optim", "Adam.step")],
    "held-out evaluation": [("training.tasks", "Task.heldout_accuracy")],
    "metrics": [("training.loop", "explained_variance"), ("training.loop", "return_variance"),
                ("training.loop", "response_lengths")],
}


class Timer:
    """Inclusive seconds per stage, over the calls of one iteration."""

    def __init__(self):
        self.now: dict[str, float] = {}

    def wrap(self, stage, fn):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.now[stage] = self.now.get(stage, 0.0) + time.perf_counter() - start
        timed.__wrapped__ = fn
        return timed


def instrument(pkg_name: str, timer: Timer) -> list[str]:
    """Wrap the functions of :data:`STAGES` that the package ``pkg_name`` has; returns the
    stages found."""
    found = []
    for stage, targets in STAGES.items():
        for module, path in targets:
            try:
                mod = importlib.import_module(f"{pkg_name}.{module}")
            except ImportError:
                continue
            *owner_path, attr = path.split(".")
            owner = mod
            for part in owner_path:
                owner = getattr(owner, part, None)
            if owner is None or not hasattr(owner, attr):
                continue
            setattr(owner, attr, timer.wrap(stage, getattr(owner, attr)))
            if stage not in found:
                found.append(stage)
    return found


def run(checkouts: dict, *, iterations: int, warm: int, fields: dict) -> dict:
    """``{label: {stage: [seconds per iteration, ...], "iteration": [...]}}``."""
    from benchmarks.targets import load_package

    states, steps, timers = {}, {}, {}
    for i, (label, path) in enumerate(checkouts.items()):
        name = f"ppo_numpy_stage_{i}"
        load_package(path, name)
        timers[label] = Timer()
        instrument(name, timers[label])
        loop = importlib.import_module(f"{name}.training.loop")
        config_cls = importlib.import_module(f"{name}.training.config").PPOConfig
        states[label] = loop.new_run(config_cls(**(fields if path == ROOT else {})))
        steps[label] = loop.ppo_iteration
    for _ in range(warm):
        for label in steps:
            steps[label](states[label])
    out = {label: {"iteration": []} for label in steps}
    labels = list(steps)
    gc.disable()
    for i in range(iterations):
        for label in labels if i % 2 == 0 else labels[::-1]:
            timers[label].now = {}
            start = time.perf_counter()
            steps[label](states[label])
            out[label]["iteration"].append(time.perf_counter() - start)
            for stage, seconds in timers[label].now.items():
                out[label].setdefault(stage, []).append(seconds)
    gc.enable()
    return out


def table(results: dict) -> list[str]:
    labels = list(results)
    med = {lab: {k: statistics.median(v) for k, v in r.items()} for lab, r in results.items()}
    lines = ["| stage | " + " | ".join(f"{lab} (ms)" for lab in labels) + " |",
             "|---|" + "---:|" * len(labels)]
    for stage in STAGES:
        if not any(stage in med[lab] for lab in labels):
            continue
        name = "&nbsp;&nbsp;" + stage.split(": ")[1] if ": " in stage else stage
        lines.append(f"| {name} | " + " | ".join(
            f"{1e3 * med[lab][stage]:.2f}" if stage in med[lab] else "-" for lab in labels)
            + " |")
    # per iteration: the time no top-level stage covers; then the median
    rest = {}
    for lab, r in results.items():
        top = [k for k in r if k != "iteration" and ": " not in k]
        rest[lab] = statistics.median(
            total - sum(r[k][i] for k in top) for i, total in enumerate(r["iteration"]))
    lines.append("| rest of the iteration | " + " | ".join(
        f"{1e3 * rest[lab]:.2f}" for lab in labels) + " |")
    lines.append("| **iteration** (median) | " + " | ".join(
        f"**{1e3 * med[lab]['iteration']:.2f}**" for lab in labels) + " |")
    return lines


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.iteration_stages",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("checkouts", nargs="*", metavar="LABEL=CHECKOUT",
                   help="older checkouts; this checkout is added last as HEAD")
    p.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                   help="a field of this checkout's PPOConfig (e.g. value_hidden=0)")
    p.add_argument("--iterations", type=int, default=40)
    p.add_argument("--warm", type=int, default=5)
    args = p.parse_args(argv)
    import json

    checkouts = dict(c.split("=", 1) for c in args.checkouts)
    checkouts["HEAD"] = ROOT
    fields = {k: json.loads(v) for k, v in (s.split("=", 1) for s in args.set)}
    results = run(checkouts, iterations=args.iterations, warm=args.warm, fields=fields)
    from benchmarks.versions import machine_line

    print(f"{args.iterations} iterations of each, alternating; {machine_line()}\n")
    print("\n".join(table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
