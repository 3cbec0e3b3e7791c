"""What the ``--exercises`` modes share (``overoptimisation``, ``train``): the runs behind a
notebook's exercise solutions, written to one JSON file that the notebook reads instead of
running them (``docs/data/*_exercises.json``). Not a command.
"""

from __future__ import annotations

import json
from pathlib import Path


def runs_json(runs, command) -> str:
    """``runs`` (name -> a dict with a list of ``"rows"``) as JSON: the command, this
    machine's CPU kind (the last bits of the numbers depend on it), then the runs, one line
    per row. Floats are written by ``repr``, so they load back exactly."""
    from .._machine import cpu_kind

    def run(r):
        head = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in r.items() if k != "rows"]
        rows = ",\n".join("   " + json.dumps(row, separators=(",", ":")) for row in r["rows"])
        return "{\n" + ",\n".join(head) + ',\n  "rows": [\n' + rows + "]}"

    parts = [f'"command": {json.dumps(command)}',
             f'"cpu_kind": {json.dumps(cpu_kind(), separators=(",", ":"))}',
             '"runs": {\n' + ",\n".join(f" {json.dumps(name)}: {run(r)}"
                                         for name, r in runs.items()) + "}"]
    return "{\n" + ",\n".join(parts) + "\n}\n"


def json_path(parser, value) -> Path:
    """``--json PATH`` of an ``--exercises`` mode: a file in a directory that exists, else
    the parser's error (exit status 2) before anything runs."""
    if value is None:
        parser.error("--exercises: needs --json PATH, the file to write")
    path = Path(value)
    if path.is_dir() or not path.parent.is_dir():
        parser.error(f"--json: {value!r} is a directory or its directory does not exist")
    return path


def exercises_command(program: str, iterations, path) -> str:
    """The command line that writes the file, as the file records it: ``program``, then
    ``--iterations N`` when given, then ``--json PATH``.

    >>> exercises_command("python -m ppo_numpy train --exercises", None, "out.json")
    'python -m ppo_numpy train --exercises --json out.json'
    """
    return program + ("" if iterations is None else f" --iterations {iterations}") + \
        f" --json {path}"
