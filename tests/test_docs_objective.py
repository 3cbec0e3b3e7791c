"""docs/objective.md: its running example is what ``walkthrough`` prints, and every
``explain`` command it shows runs."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from ppo_numpy.programs.explain import main as explain_main
from ppo_numpy.programs.walkthrough import EXPLAIN

from .test_walkthrough import NUMBER, close, output, rows

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "objective.md").read_text(encoding="utf-8")

# first cell of a row of the running-example table -> the walkthrough row it repeats
# (the page writes them as math: $\mathrm{KL}_t$, $\tilde{r}_t = ...$)
TABLE_ROWS = {r"$\mathrm{KL}_t$": "1.", r"$\tilde{r}_t": "2.", r"$\delta_t": "3.",
              r"$\hat{A}_t": "4.", "$R_t": "R_t", r"$\rho_t$": "6.", r"$\min(\rho\hat{A},": "7."}


def example_table() -> dict:
    section = PAGE.split("## The running example", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0].split()[0] in TABLE_ROWS:
            # the first number of each cell ("1.5 (clipped to 1.2)" -> 1.5)
            table[cells[0].split()[0]] = [float(re.findall(NUMBER, c)[0]) for c in cells[1:]]
    return table


def test_running_example_table_is_what_walkthrough_prints(capsys):
    printed = rows(output(capsys))
    table = example_table()
    assert set(table) == set(TABLE_ROWS), table
    for label, key in TABLE_ROWS.items():
        close(table[label], printed[key], f"docs/objective.md row {label}")
    # the sentence below the table: L_PPO, the token-mean loss and the clip fraction 1/3
    assert (rf"$\mathcal{{L}}_\text{{PPO}}$ for this response is the sum, "
            f"{printed['8.'][0]:.10g}") in " ".join(PAGE.split())
    assert f"{printed['9.'][0]:.10g}" in PAGE


def commands() -> list[str]:
    found = re.findall(r"`python -m ppo_numpy explain ([^`]*)`", PAGE)
    # the multi-line command of the running example
    block = PAGE.split("the same chain in exact fractions is", 1)[1].split("\n\n")[1]
    found.append(" ".join(block.replace("\\\n", " ").split()).split(" explain ", 1)[1])
    return [c for c in found if "..." not in c]


@pytest.mark.parametrize("args", commands())
def test_explain_commands_on_the_page_run(args, capsys):
    assert explain_main(shlex.split(args)) == 0, capsys.readouterr().err
    assert capsys.readouterr().err == ""


def test_page_and_walkthrough_show_the_same_exact_command():
    assert commands()[-1] == EXPLAIN.split(" explain ", 1)[1]
