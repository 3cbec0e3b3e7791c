"""Check examples/torch_ppo.py against the oracle and print the report, dtype by dtype.

    python examples/check_torch_ppo.py                    # float64, float32, bfloat16
    python examples/check_torch_ppo.py --dtype float32 --config seed

The pattern to copy for your own trainer (``docs/oracle.md``): wrap it as a
function ``case -> outputs``, pick the preset of your framework, call
:func:`ppo_numpy.oracle.compare.compare`.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import torch

from ppo_numpy.oracle.cases import generate_cases
from ppo_numpy.oracle.compare import compare
from ppo_numpy.oracle.presets import get_preset

PRESET = get_preset("seed")
TORCH_DTYPES = {"float64": torch.float64, "float32": torch.float32, "bfloat16": torch.bfloat16}
CONFIGS = {
    # the seed preset as it is: no whitening, L_PPO summed over tokens, no value clipping
    "seed": {},
    # the usual trainer settings, as overrides of the same preset
    "whiten-token-mean-vclip": {"whiten_advantages": True, "policy_agg": "token-mean",
                                "value_clip": 0.2},
}
OUTPUTS = ["rewards", "advantages", "returns", "policy_loss", "value_loss", "dlogp", "dvalues",
           "stat/clipfrac_active", "stat/approx_kl_k1", "stat/approx_kl_k3", "stat/ratio_mean"]
# bfloat16: values only. torch.max splits the gradient at a tie, and two different squared
# errors tie often in bf16; the extreme cases' log-ratios of 50 are stored to +-0.125.
BF16_OUTPUTS = ["rewards", "advantages", "returns", "policy_loss", "value_loss",
                "stat/approx_kl_k1", "stat/approx_kl_k3", "stat/ratio_mean"]


def _load_torch_ppo():
    spec = importlib.util.spec_from_file_location(
        "torch_ppo", Path(__file__).resolve().with_name("torch_ppo.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


torch_ppo = _load_torch_ppo()


def candidate_for(dtype: str, config: dict):
    """examples/torch_ppo.py as a function ``case -> outputs`` computing in ``dtype``."""
    def candidate(case):
        p = {**PRESET.defaults, **case["params"], **config}
        if p["value_agg"] != "token-mean":
            raise ValueError("torch_ppo averages the value loss over tokens only")
        return torch_ppo.run(case["inputs"], dtype=TORCH_DTYPES[dtype], gamma=p["gamma"],
                             lam=p["lam"], beta=p["beta"], eps=p["epsilon"],
                             value_clip=p["value_clip"], kl_estimator=p["kl_estimator"],
                             whiten_advantages=p["whiten_advantages"],
                             loss_agg=p["policy_agg"])
    candidate.__name__ = f"torch_ppo[{dtype}]"
    return candidate


def reference_for(config: dict):
    """The seed preset with ``config`` as overrides."""
    def reference(case):
        return PRESET(case, **config)
    reference.name = "seed" + "".join(f" {k}={v}" for k, v in config.items())
    return reference


def check(dtype: str, config: str, seed: int = 0):
    """The comparison report of torch_ppo in ``dtype`` against the seed preset + ``config``."""
    cases = generate_cases(seed)
    outputs = OUTPUTS
    if dtype == "bfloat16":
        cases = [c for c in cases if not c["name"].startswith("extreme")]
        outputs = BF16_OUTPUTS
    return compare(candidate_for(dtype, CONFIGS[config]), reference_for(CONFIGS[config]),
                   cases, dtype, outputs=outputs)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", choices=list(TORCH_DTYPES), nargs="+",
                        default=list(TORCH_DTYPES))
    parser.add_argument("--config", choices=list(CONFIGS), nargs="+", default=list(CONFIGS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    ok = True
    for config in args.config:
        for dtype in args.dtype:
            report = check(dtype, config, args.seed)
            print(report, end="\n\n")
            ok &= report.passed
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
