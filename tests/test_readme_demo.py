"""The demo's numbers in README.md are what ``make demo`` prints on the CPU kind named beside them.

README.md's table "What a good result looks like" has one row per CPU kind (the SIMD loops
NumPy dispatches to: ``ppo_numpy._machine.simd_kind``): the score after the warm-up and
after PPO, the first iteration at 90 % of the optimum and the final KL to the reference, as
``make demo`` printed them there. This test runs the demo's main job (``python -m ppo_numpy
demo``, the program ``make demo`` runs; ``make test`` gives it one BLAS thread, as ``make
demo`` does) on the machine at hand and compares what it prints with the README's row for
this machine's kind: text against text, the three decimals the demo prints. Within one kind
the run is bit for bit the same, so any difference is a README gone stale (as the numbers
of 7fcb62c did when issue 25 gave the critic its own layer, fa65f7b: 0.352 -> 1.000 at
iteration 17 before, on both kinds alike). A kind with no row fails, naming what to add.
About 12 s (80 PPO iterations and the dashboard).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ppo_numpy._machine import simd_kind
from ppo_numpy.programs import demo

README = Path(__file__).resolve().parents[1] / "README.md"
#: the table's columns after the kind, and the demo's printed lines they are read from
COLUMNS = ("after the warm-up", "after PPO", "90 % first at iteration", "KL to the reference")
_PRINTED = {
    "after the warm-up": r"after the warm-up (\d+\.\d+)",
    "after PPO": r"after PPO (\d+\.\d+)",
    "90 % first at iteration": r"90% of the optimum first reached at iteration (\d+)",
    "KL to the reference": r"KL to the reference (\d+\.\d+) nats per response",
}


def readme_rows(text: str) -> dict[str, dict[str, str]]:
    """``{kind: {column: text}}`` from the table whose header starts ``| CPU kind |``."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("| CPU kind |")), None)
    if start is None:
        raise AssertionError("README.md: no table starting '| CPU kind |'")
    header = [c.strip() for c in lines[start].strip("|").split("|")]
    if tuple(header[1:]) != COLUMNS:
        raise AssertionError(f"README.md: the table's columns are {header}, expected "
                             f"['CPU kind', *{COLUMNS}]")
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        kind = re.match(r"\*?\*?([\w.-]+)", cells[0])[1]      # "AVX-512 (...)" -> "AVX-512"
        rows[kind] = dict(zip(COLUMNS, cells[1:]))
    return rows


def printed_numbers(text: str) -> dict[str, str]:
    """The demo's printed numbers, as printed, for the README's columns."""
    out = {}
    for column, pattern in _PRINTED.items():
        m = re.search(pattern, text)
        assert m, f"the demo printed no {column!r} ({pattern!r}):\n{text}"
        out[column] = m[1]
    return out


def test_readme_rows_and_printed_numbers_are_read_by_hand():
    text = ("x\n| CPU kind | after the warm-up | after PPO | 90 % first at iteration | KL to the "
            "reference |\n|---|---|---|---|---|\n| AVX-512 (X86_V4) | 0.273 | 0.992 | 16 | "
            "1.880 |\n| **AVX2** only | 0.3 | 1.000 | 17 | 1.9 |\n\nafter")
    assert readme_rows(text) == {
        "AVX-512": dict(zip(COLUMNS, ["0.273", "0.992", "16", "1.880"])),
        "AVX2": dict(zip(COLUMNS, ["0.3", "1.000", "17", "1.9"]))}
    printed = ("score: random policy 0.169, after the warm-up 0.273, after PPO 0.992; KL to the "
               "reference 1.880 nats per response\n90% of the optimum first reached at "
               "iteration 16, 3.6 s after the start")
    assert printed_numbers(printed) == dict(zip(COLUMNS, ["0.273", "0.992", "16", "1.880"]))
    with pytest.raises(AssertionError, match="no table"):
        readme_rows("| kind | a |")


def test_readme_names_the_three_x86_kinds():
    # the kinds make test-cpu-kinds runs as (tests/cpu_kinds.py), so each of its runs finds
    # its row
    assert {"AVX-512", "AVX2", "SSE4.2"} <= set(readme_rows(README.read_text(encoding="utf-8")))


def test_the_readmes_demo_numbers_are_what_make_demo_prints_on_this_cpu_kind(tmp_path, capsys):
    rows = readme_rows(README.read_text(encoding="utf-8"))
    assert demo.main(["--out", str(tmp_path / "demo")]) == 0
    out = capsys.readouterr().out
    got = printed_numbers(out)
    kind = simd_kind()
    assert f"CPU kind: {kind} " in out
    assert kind in rows, (f"README.md has no row for this CPU kind, {kind!r}; `make demo` "
                          f"printed {got}: add the row")
    assert got == rows[kind], (f"README.md's row for {kind} says {rows[kind]}, `make demo` "
                               f"prints {got} on this machine:\n{out}")
