"""``python -m ppo_numpy explain QUANTITY ...``: print a step-by-step table to check by hand.

    python -m ppo_numpy explain gae --rewards 0,0,1 --values 0.5,0.6,0.7 --gamma 1 --lam 0.95
    python -m ppo_numpy explain clip --rho 1.1,1.5,0.9,0.5 --advantages 2,2,-1,-1 --exact
    python -m ppo_numpy explain rewards --logp -1,-2,-0.5 --logp-ref -1.5,-1.8,-0.6 \\
        --score 1 --beta 0.1 --exact
    python -m ppo_numpy explain ppo --score 1 --logp-old -1,-2,-0.5 --logp-ref -1.5,-1.8,-0.6 \\
        --values 0.5,0.6,0.7 --beta 0.1 --rho 1.1,1.5,0.7 --exact
    python -m ppo_numpy explain grpo --scores 1,0,0,1 --groups 0,0,1,1 --scale none --exact
    python -m ppo_numpy explain rloo --scores 1,0,0,1 --groups 0,0,1,1 --exact
    python -m ppo_numpy explain rollout-is --logp-old -1,-2,-0.5 --logp-rollout -1.5,-1.8,-0.4 \\
        --level sequence --mode mask --clip-max 3 --exact
    python -m ppo_numpy explain kl-gradient --pi 1/4,3/4 --pi-ref 1/2,1/2 --pi-old 1/3,2/3 --exact

The last command is the running example of ``docs/objective.md`` (``python -m ppo_numpy
walkthrough`` prints it in floats).

Numbers are written as integers, decimals or fractions (``0.95``, ``19/20``);
lists are comma-separated, one number per token of the response (its length
is T); for ``grpo`` and ``rloo``, one score and one integer prompt id per
response (for ``kl-gradient``, one probability per token of the vocabulary). Without
``--exact`` they are read as float64; with it, as the exact
fraction written (``0.95`` is 19/20), and the tables print exact fractions.
Bad input exits with status 2 and a message naming the option. A nonzero reward
that ``--mask`` marks as padding is ignored, as every core function ignores padding;
``gae`` prints a warning naming it.
"""

from __future__ import annotations

import argparse
import re
import sys
from fractions import Fraction

from .._renames import RenamedOption
from ..explain.kl_gradient import kl_gradient_tables
from ..explain.tables import (
    clip_table,
    gae_table,
    grpo_table,
    ppo_tables,
    ratio_clip_tables,
    render,
    rewards_table,
    rloo_table,
    rollout_is_table,
)
from ..family.advantages import SCALES
from ..mismatch.correction import IS_LEVELS, IS_MODES
from ..ppo.kl import ESTIMATORS

PROG = "python -m ppo_numpy explain"

# core argument name -> the option that supplied it
OPTION_OF = {
    "rewards": "--rewards", "values": "--values", "gamma": "--gamma", "lam": "--lam",
    "mask": "--mask", "rho": "--rho", "advantages": "--advantages", "epsilon": "--epsilon",
    "epsilon_high": "--epsilon-high", "dual_clip": "--dual-clip", "logp": "--logp",
    "logp_old": "--logp-old", "logp_ref": "--logp-ref", "beta": "--beta", "scores": "--score",
    "logp_rollout": "--logp-rollout", "level": "--level", "mode": "--mode",
    "clip_max": "--clip-max", "clip_min": "--clip-min", "log_ratio_bound": "--log-ratio-bound",
    "pi": "--pi", "pi_ref": "--pi-ref", "pi_old": "--pi-old", "bound": "--bound",
}
# the group baselines take one score per response
GROUP_OPTION_OF = {"scores": "--scores", "groups": "--groups", "std_eps": "--std-eps",
                   "ddof": "--ddof"}
GROUP_QUANTITIES = ("grpo", "rloo")
#: quantities of one distribution over the vocabulary, not of a response: no --mask
DISTRIBUTION_QUANTITIES = ("kl-gradient",)

LIST = "X1,X2,..."


class OptionError(Exception):
    """Bad value for a command-line option; ``str(err)`` is ``"--option: what is wrong"``."""

    def __init__(self, option: str, message: str):
        super().__init__(f"{option}: {message}")


def parse_number(text: str, option: str, exact: bool, where: str = ""):
    """``text`` as a Fraction (``exact``) or a float; OptionError naming ``option`` if not.

    >>> parse_number("0.95", "--lam", True), parse_number("19/20", "--lam", False)
    (Fraction(19, 20), 0.95)
    """
    s = text.strip()
    try:
        value = Fraction(s)
    except (ValueError, ZeroDivisionError):
        try:
            float(s)
        except ValueError:
            raise OptionError(option, f"{text!r}{where} is not a number") from None
        raise OptionError(option, f"{text!r}{where} is not a finite number") from None
    return value if exact else float(value)


def _entries(text: str, option: str, what: str) -> list:
    """The comma-separated entries of ``text``; OptionError naming ``option`` if it is blank."""
    if not text.strip():
        raise OptionError(option, f"expected a comma-separated list of {what}, got nothing")
    return text.split(",")


def parse_list(text: str, option: str, exact: bool) -> list:
    """A comma-separated list of numbers (see :func:`parse_number`)."""
    parts = _entries(text, option, "numbers")
    out = []
    for k, part in enumerate(parts, start=1):
        where = f" (entry {k} of {len(parts)})" if len(parts) > 1 else ""
        if not part.strip():
            raise OptionError(option, f"entry {k} of {text!r} is empty")
        out.append(parse_number(part, option, exact, where))
    return out


def parse_mask(text: str, option: str = "--mask") -> list:
    """A comma-separated list of 0 and 1."""
    out = []
    for k, part in enumerate(_entries(text, option, "0 and 1"), start=1):
        if part.strip() not in ("0", "1"):
            raise OptionError(option, f"entries must be 0 or 1, got {part.strip()!r} (entry {k})")
        out.append(int(part))
    return out


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser that records which options take a value."""

    def add_value(self, *names, **kwargs):
        self.value_options.update(names)
        return self.add_argument(*names, **kwargs)

    def add_renamed(self, old: str, new: str):
        """``old``, the deprecated spelling of the value option ``new`` (ppo_numpy._renames):
        the same value, with a DeprecationWarning naming ``new``."""
        dest = new.lstrip("-").replace("-", "_")
        self.add_value(old, dest=dest, default=argparse.SUPPRESS, action=RenamedOption,
                       new_option=new, metavar=dest.upper(), help=f"deprecated: {new}")

    def add_one_of(self, title: str, *specs):
        """Options of which exactly one must be given, under their own heading in --help.

        ``specs`` are ``(name, kwargs)`` pairs; argparse's usage line shows them as
        ``(--a A | --b B)`` and its error names them when none is given.
        """
        group = self.add_argument_group(title).add_mutually_exclusive_group(required=True)
        for name, kwargs in specs:
            self.value_options.add(name)
            group.add_argument(name, **kwargs)


def build_parser():
    """The ``explain`` parser and its sub-parsers by name."""
    parser = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False,
        description="Step-by-step tables of the objective's formulas (docs/objective.md) for "
                    "one response, to check by hand. See docs/hand-calculations.md.")
    sub = parser.add_subparsers(dest="quantity", required=True, metavar="QUANTITY",
                                parser_class=_Parser)
    specs = {
        "gae": "TD errors, GAE advantages and returns, backwards in t",
        "clip": "the clipped surrogate, its active branch and d/d rho",
        "rewards": "KL-shaped rewards r~_t = -beta KL_t + score at t = T",
        "ppo": "rewards -> GAE -> clipped surrogate -> L_PPO for one response",
        "grpo": "GRPO advantages of a batch: score, group mean, deviation, std, advantage",
        "rloo": "RLOO advantages of a batch: score, the others' mean, advantage",
        "rollout-is": "the rollout correction's importance weights pi_old / pi_rollout of one "
                      "response",
        "kl-gradient": "the KL term's expected gradient for every estimator, placement and "
                       "gradient form, exactly, for one distribution over the tokens: which "
                       "KL's gradient each is",
    }
    subs = {}
    for name, help_ in specs.items():
        group = name in GROUP_QUANTITIES
        numbers = (_GROUP_HELP if group else _DISTRIBUTION_HELP
                   if name in DISTRIBUTION_QUANTITIES else _NUMBERS_HELP)
        p = sub.add_parser(name, help=help_, allow_abbrev=False,
                           description=help_ + ". " + numbers)
        p.value_options = set()
        p.add_argument("--exact", action="store_true",
                       help="exact fractions: read 0.95 as 19/20 and print fractions")
        p.add_value("--format", choices=("text", "markdown"), default="text",
                    help="plain text (default) or a Markdown table")
        if not group and name not in DISTRIBUTION_QUANTITIES:
            p.add_value("--mask", metavar="M1,M2,...",
                        help="1 = response token, 0 = padding (default: all 1)")
        subs[name] = p
    g = subs["gae"]
    g.add_value("--rewards", required=True, metavar=LIST, help="r~_t, one per token")
    g.add_value("--values", required=True, metavar=LIST, help="V(s_t), one per token")
    g.add_value("--gamma", default="1", help="discount gamma (default 1)")
    g.add_value("--lam", default="0.95", help="GAE lambda (default 0.95)")

    c = subs["clip"]
    c.add_one_of("the ratio (one of these is required)",
                 ("--rho", dict(metavar=LIST, help="probability ratios rho_t")),
                 ("--logp", dict(metavar=LIST, help="log pi_theta of the tokens, with "
                                 "--logp-old (rho = exp(logp - logp_old), a float)")))
    c.add_value("--logp-old", metavar=LIST, help="log pi_theta_old of the tokens (required "
                                                 "with --logp)")
    c.add_value("--advantages", required=True, metavar=LIST, help="A_hat_t")
    c.add_value("--epsilon", default="0.2",
                help="clip width: the range is [1 - epsilon, 1 + epsilon] (default 0.2)")
    c.add_value("--epsilon-high", help="upper clip width (default: epsilon)")
    c.add_renamed("--eps", "--epsilon")
    c.add_renamed("--eps-high", "--epsilon-high")
    c.add_value("--dual-clip", help="dual clip bound c > 1 for A < 0 (default: off)")

    r = subs["rewards"]
    r.add_value("--logp", required=True, metavar=LIST, help="log pi_theta of the sampled tokens")
    r.add_value("--logp-ref", required=True, metavar=LIST, help="log pi_ref of the same tokens")
    r.add_value("--score", required=True, help="the reward model's score of the response")
    r.add_value("--beta", required=True, help="KL weight beta")
    r.add_value("--estimator", choices=ESTIMATORS, default="k1",
                help="KL estimator (default k1; k3 needs exp and is a float)")

    p = subs["ppo"]
    p.add_value("--score", required=True, help="the reward model's score of the response")
    p.add_value("--logp-old", required=True, metavar=LIST,
                help="log pi_theta_old of the sampled tokens (rollout policy)")
    p.add_value("--logp-ref", required=True, metavar=LIST, help="log pi_ref of the same tokens")
    p.add_value("--values", required=True, metavar=LIST, help="V(s_t), one per token")
    p.add_value("--beta", required=True, help="KL weight beta")
    p.add_value("--gamma", default="1", help="discount gamma (default 1)")
    p.add_value("--lam", default="0.95", help="GAE lambda (default 0.95)")
    p.add_value("--estimator", choices=ESTIMATORS, default="k1",
                help="KL estimator (default k1)")
    p.add_one_of("the ratio after the update (one of these is required)",
                 ("--rho", dict(metavar=LIST, help="rho_t after the update")),
                 ("--logp", dict(metavar=LIST, help="log pi_theta after the update "
                                 "(rho = exp(logp - logp_old), a float)")))
    p.add_value("--epsilon", default="0.2", help="clip width (default 0.2)")
    p.add_renamed("--eps", "--epsilon")

    for name in GROUP_QUANTITIES:
        q = subs[name]
        q.add_value("--scores", required=True, metavar=LIST, help="one score per response")
        q.add_value("--groups", required=True, metavar="G1,G2,...",
                    help="integer prompt id of each response; equal ids are one group")
    q = subs["grpo"]
    q.add_value("--scale", choices=SCALES, default="group",
                help="divide by the group's std (default), the batch's std, or nothing "
                     "(none: Dr. GRPO, exact with --exact)")
    q.add_value("--std-eps", default="1e-6", help="added to the std (default 1e-6, verl's; "
                                                  "TRL 1e-4); always a float")
    q.add_renamed("--eps", "--std-eps")
    q.add_value("--ddof", choices=("0", "1"), default="1",
                help="divisor n - ddof of the variance (default 1, as torch.std)")

    w = subs["rollout-is"]
    w.add_value("--logp-old", required=True, metavar=LIST,
                help="the trainer's log pi_old of the sampled tokens")
    w.add_value("--logp-rollout", required=True, metavar=LIST,
                help="the inference engine's log pi_rollout of the same tokens")
    w.add_value("--level", choices=IS_LEVELS, default="token",
                help="one weight per token (default), per response (sequence), or OpenRLHF's "
                     "gate on the geometric mean (geometric, with --mode mask)")
    w.add_value("--mode", choices=IS_MODES, default="truncate",
                help="clip the weight to the bounds (truncate, default) or zero it outside "
                     "them (mask)")
    w.add_value("--clip-max", default="2", help="upper bound (default 2, verl's; 'none': no "
                                               "bound)")
    w.add_value("--clip-min", help="lower bound (default: none)")
    w.add_value("--log-ratio-bound", help="clamp the log-ratio (or its sum) to [-b, b] before "
                                          "exp (verl: 20; default: none)")

    k = subs["kl-gradient"]
    k.add_value("--pi", required=True, metavar="P1,P2,...",
                help="pi_theta: the probability of each token (they sum to 1, each > 0)")
    k.add_value("--pi-ref", required=True, metavar="P1,P2,...", help="pi_ref, the reference")
    k.add_value("--pi-old", metavar="P1,P2,...",
                help="pi_old, the sampler: adds the terms sampled from it (default: none, "
                     "only those sampled from pi_theta)")
    k.add_value("--bound", default="10",
                help="the importance form's upper bound on pi / pi_old, >= 1 (default 10, "
                     "OpenRLHF's; 'none': no bound)")
    return parser, subs


_GROUP_HELP = ("Numbers: 1, 0.5 or 1/2, one score per response, comma-separated; prompt ids "
               "are integers, one per response; every group needs >= 2 responses.")
_DISTRIBUTION_HELP = ("Numbers: 1, 0.25 or 1/4; one probability per token of the vocabulary, "
                      "comma-separated (--pi 1/4,3/4). See docs/hand-calculations.md, section "
                      "11.")
_NUMBERS_HELP = ("Numbers: 1, 0.95 or 19/20; lists comma-separated, one number per token. "
                 "Negative lists: --logp -1,-2 or --logp=-1,-2.")


def _join_negative_values(argv: list, value_options: set) -> list:
    """``--logp -1,-2`` -> ``--logp=-1,-2``: argparse would read ``-1,-2`` as an option."""
    out = []
    for tok in argv:
        if out and out[-1] in value_options and re.match(r"-[\d.]", tok):
            out[-1] = f"{out[-1]}={tok}"
        else:
            out.append(tok)
    return out


def parse_groups(text: str, option: str = "--groups") -> list:
    """A comma-separated list of integer prompt ids.

    >>> parse_groups("0,0,1,1")
    [0, 0, 1, 1]
    """
    parts = _entries(text, option, "integer prompt ids")
    out = []
    for k, part in enumerate(parts, start=1):
        try:
            out.append(int(part.strip()))
        except ValueError:
            raise OptionError(option, f"entry {k} of {len(parts)} is {part.strip()!r}, not an "
                                      "integer prompt id") from None
    return out


def check_groups_of_two(groups: list, option: str = "--groups") -> None:
    """OptionError unless every prompt id occurs at least twice (a group baseline needs it)."""
    for k, g in enumerate(groups, start=1):
        if groups.count(g) == 1:
            raise OptionError(option, f"prompt id {g} (entry {k}) has a single response; a "
                                      "group baseline needs >= 2 responses per prompt")


def padding_warnings(rewards: list, mask) -> list:
    """One warning per nonzero reward that ``mask`` marks as padding (it is ignored).

    >>> padding_warnings([0, 0, 1], [1, 1, 0])  # doctest: +NORMALIZE_WHITESPACE
    ['warning: --rewards: entry 3 is 1, but --mask marks t = 3 as padding: padding is
      ignored, so this reward is dropped (the last response token is t = 2)']
    """
    if mask is None or not any(mask):
        return []
    last = max(t for t, m in enumerate(mask, start=1) if m)
    return [f"warning: --rewards: entry {t} is {r}, but --mask marks t = {t} as padding: "
            f"padding is ignored, so this reward is dropped (the last response token is "
            f"t = {last})"
            for t, (r, m) in enumerate(zip(rewards, mask), start=1) if not m and r != 0]


def _tables(args) -> list:
    """Parse the numbers of ``args`` and build the tables; OptionError on bad values.

    Warnings about the input (see :func:`padding_warnings`) go to stderr once the tables
    are built.
    """

    def num(option):
        text = getattr(args, option.lstrip("-").replace("-", "_"))
        return None if text is None else parse_number(text, option, args.exact)

    def lst(option, ref=None, ref_option=None, parse=None):
        """The list given for ``option`` (numbers, or ``parse(text, option)``), its length
        checked against ``ref``; None if the option was not given."""
        text = getattr(args, option.lstrip("-").replace("-", "_"))
        if text is None:
            return None
        values = parse_list(text, option, args.exact) if parse is None else parse(text, option)
        if ref is not None and len(values) != len(ref):
            raise OptionError(option, f"expected {len(ref)} numbers to match {ref_option}, "
                                      f"got {len(values)}")
        return values

    def mask(ref, ref_option):
        return lst("--mask", ref, ref_option, parse_mask)

    if args.quantity in GROUP_QUANTITIES:
        scores = lst("--scores")
        groups = lst("--groups", scores, "--scores", parse_groups)
        check_groups_of_two(groups)
        if args.quantity == "rloo":
            return [rloo_table(scores, groups)]
        return [grpo_table(scores, groups, scale=args.scale,
                           std_eps=float(parse_number(args.std_eps, "--std-eps", False)),
                           ddof=int(args.ddof))]
    if args.quantity == "gae":
        rewards = lst("--rewards")
        values = lst("--values", rewards, "--rewards")
        m = mask(rewards, "--rewards")
        table = gae_table(rewards, values, num("--gamma"), num("--lam"), m)
        for line in padding_warnings(rewards, m):
            print(line, file=sys.stderr)
        return [table]
    if args.quantity == "clip":
        clip_options = {"epsilon_high": num("--epsilon-high"), "dual_clip": num("--dual-clip")}
        # the parser has made sure that exactly one of --rho and --logp is given
        if args.rho is not None:
            if args.logp_old is not None:
                raise OptionError("--logp-old", "goes with --logp, not with --rho")
            rho = lst("--rho")
            A = lst("--advantages", rho, "--rho")
            return [clip_table(rho, A, num("--epsilon"), mask=mask(rho, "--rho"), **clip_options)]
        if args.logp_old is None:
            raise OptionError("--logp-old", "required with --logp")
        logp = lst("--logp")
        logp_old = lst("--logp-old", logp, "--logp")
        A = lst("--advantages", logp, "--logp")
        return ratio_clip_tables(logp, logp_old, A, num("--epsilon"), mask=mask(logp, "--logp"),
                                 **clip_options)
    if args.quantity == "rollout-is":
        logp_old = lst("--logp-old")
        logp_rollout = lst("--logp-rollout", logp_old, "--logp-old")
        clip_max = None if args.clip_max.strip().lower() == "none" else num("--clip-max")
        return [rollout_is_table(logp_old, logp_rollout, level=args.level, mode=args.mode,
                                 clip_max=clip_max, clip_min=num("--clip-min"),
                                 log_ratio_bound=num("--log-ratio-bound"),
                                 mask=mask(logp_old, "--logp-old"))]
    if args.quantity == "kl-gradient":
        pi = lst("--pi")
        pi_ref = lst("--pi-ref", pi, "--pi")
        bound = None if args.bound.strip().lower() == "none" else num("--bound")
        return kl_gradient_tables(pi, pi_ref, lst("--pi-old", pi, "--pi"), bound=bound)
    if args.quantity == "rewards":
        logp = lst("--logp")
        logp_ref = lst("--logp-ref", logp, "--logp")
        return [rewards_table(num("--score"), logp, logp_ref, num("--beta"),
                              mask(logp, "--logp"), args.estimator)]
    logp_old = lst("--logp-old")
    logp_ref = lst("--logp-ref", logp_old, "--logp-old")
    values = lst("--values", logp_old, "--logp-old")
    return ppo_tables(num("--score"), logp_old, logp_ref, values, num("--beta"), num("--gamma"),
                      num("--lam"), rho=lst("--rho", logp_old, "--logp-old"),
                      logp=lst("--logp", logp_old, "--logp-old"), epsilon=num("--epsilon"),
                      estimator=args.estimator, mask=mask(logp_old, "--logp-old"))


def _core_error_message(err: Exception, quantity: str = "") -> str:
    """A core function's ``"name: what"`` message, with ``name`` replaced by its option."""
    msg = str(err)
    name = msg.split(":", 1)[0]
    options = GROUP_OPTION_OF if quantity in GROUP_QUANTITIES else OPTION_OF
    return options[name] + msg[len(name):] if name in options else msg


def render_command(argv) -> str:
    """The output of ``explain`` for ``argv``; bad input exits (SystemExit(2), argparse style).

    Warnings about the input go to stderr.
    """
    parser, subs = build_parser()
    value_options = set().union(*(p.value_options for p in subs.values()))
    args = parser.parse_args(_join_negative_values(list(argv), value_options))
    sub = subs[args.quantity]
    try:
        tables = _tables(args)
    except OptionError as err:
        sub.error(str(err))
    except (ValueError, TypeError) as err:
        sub.error(_core_error_message(err, args.quantity))
    return render(tables, args.format)


def main(argv=None) -> int:
    """Entry point of ``python -m ppo_numpy explain``; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        text = render_command(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
