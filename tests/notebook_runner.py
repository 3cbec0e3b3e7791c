"""Execute notebooks top to bottom on a fresh Jupyter kernel (nbclient).

    python -m tests.notebook_runner notebooks/*.ipynb          # run each; exit 1 on an error
    python -m tests.notebook_runner --write notebooks/*.ipynb  # re-execute in place

Every run starts from a notebook whose outputs and execution counts have been
removed, so the stored outputs written by ``--write`` come from one clean
top-to-bottom run: execution counts 1, 2, 3, ... . ``tests/test_notebooks.py``
uses the same functions to execute each notebook and to check that what is
stored is what a clean run produces.

The kernel is the ``python3`` kernel of the running interpreter: jupyter_client
falls back to ipykernel's built-in spec and replaces ``python`` in its command
line by ``sys.executable``, so no ``ipykernel install`` is needed. The kernel
gets the repository root on ``PYTHONPATH`` (``import ppo_numpy`` works without
an installed package) and matplotlib's inline backend (headless; it renders
with Agg), whatever ``MPLBACKEND`` the caller has set, so figures are stored
as PNG outputs and tests see the same outputs as ``make notebooks`` writes.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from ppo_numpy._machine import cpu_kind  # the stored run's CPU kind (CPU_TAG)

ROOT = Path(__file__).resolve().parents[1]
KERNEL_NAME = "python3"
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
#: seconds allowed for one cell (a hang guard, not a speed test)
CELL_TIMEOUT = 60
#: cells tagged so keep their outputs out of the stale-output comparison (e.g. timings)
VOLATILE_TAG = "volatile-output"
#: cells tagged so print what a long training run ends at, or rounding noise: the last
#: bits of NumPy's exp/log/tanh (and of BLAS products) differ between CPU kinds (SIMD
#: widths, kernels), and over many iterations such a difference can flip a sampled token;
#: a finite-difference check's error (1e-11) is such last bits divided by h, and where
#: its worst element sits moves with them. So these outputs differ from one CPU kind to
#: another. When the stored run was made on another CPU kind
#: (``cpu_kind``, kept in the notebook's metadata under ``CPU_KEY``), such a cell is
#: compared by the kinds of its outputs and their numbers of lines only; on the same kind,
#: like every other cell. Its claims are its own asserts, which hold on every CPU.
CPU_TAG = "cpu-dependent"
CPU_KEY = "ppo_numpy_cpu_kind"

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_SPACES = re.compile(r" +")
_NUMBER = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?")
#: printed numbers may differ by this much between a stored and a fresh run: the last
#: digits of exp/log differ between CPUs (SIMD code paths), and a rounding-noise
#: value such as a finite-difference error of 4e-11 may print differently
RTOL, ATOL = 1e-3, 1e-9


def clean_notebook(nb):
    """Remove every output, execution count and execution timing, in place; return ``nb``."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
        cell.metadata.pop("execution", None)
    return nb


def kernel_env() -> dict:
    """The kernel's environment: the caller's, the repo on PYTHONPATH, the inline backend."""
    env = dict(os.environ)
    paths = [str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["MPLBACKEND"] = INLINE_BACKEND
    env["PYTHONHASHSEED"] = "0"
    return env


def execute_notebook(path, *, timeout=CELL_TIMEOUT, kernel_name=KERNEL_NAME):
    """Execute the notebook at ``path`` from a clean state; return ``(nb, seconds)``.

    The file is not modified. The working directory of the kernel is the
    notebook's folder. Raises ``nbclient.exceptions.CellExecutionError`` (with
    the failing cell's traceback) if any cell raises.
    """
    path = Path(path)
    nb = clean_notebook(nbformat.read(path, as_version=4))
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name=kernel_name,
        allow_errors=False,
        record_timing=False,
        resources={"metadata": {"path": str(path.parent.resolve())}},
    )
    start = time.perf_counter()
    client.execute(env=kernel_env())
    seconds = time.perf_counter() - start
    nb.metadata[CPU_KEY] = cpu_kind()
    return nb, seconds


def clean_run_problems(nb) -> list[str]:
    """What shows that the stored outputs did not come from one clean top-to-bottom run.

    Code cells must have execution counts 1, 2, 3, ... in order (every code
    cell executed once, none re-run, none skipped), and no output may be an error
    or text on stderr (a warning is a defect to fix; its text names this machine's paths).
    """
    problems = []
    expected = 1
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        count = cell.get("execution_count")
        if count != expected:
            problems.append(f"cell {i}: execution count {count}, expected {expected}")
        expected += 1
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                problems.append(f"cell {i}: stored error output {out.get('ename')}: "
                                f"{out.get('evalue')}")
            elif out.get("output_type") == "stream" and out.get("name") == "stderr":
                problems.append(f"cell {i}: stored stderr output {out.get('text', '')[:200]!r}")
    return problems


def output_summary(nb, *, other_cpu=False) -> list[tuple]:
    """Per code cell, its outputs as comparable text: type, stream or MIME types, plain text.

    Images are represented by their MIME type and text/plain (e.g. ``<Figure size
    ... with 2 Axes>``), not by their bytes; memory addresses are blanked. Cells
    tagged ``volatile-output`` are represented by their tag only. Consecutive
    outputs of one stream are joined: how the kernel cuts printed text into
    messages depends on timing (one ``print`` after a slow call arrives as a
    message of its own), not on what the cell computes.
    """
    summary = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        if VOLATILE_TAG in cell.metadata.get("tags", []):
            summary.append((i, VOLATILE_TAG))
            continue
        outs = []
        for out in cell.get("outputs", []):
            kind = out.get("output_type")
            if kind == "stream":
                text = out.get("text", "")
                if outs and outs[-1][:2] == (kind, out.get("name")):
                    outs[-1] = (kind, out.get("name"), outs[-1][2] + text)
                else:
                    outs.append((kind, out.get("name"), text))
            elif kind in ("display_data", "execute_result"):
                data = out.get("data", {})
                text = _ADDRESS.sub(" at 0x", str(data.get("text/plain", "")))
                outs.append((kind, tuple(sorted(data)), text))
            else:
                outs.append((kind, out.get("ename"), out.get("evalue")))
        outs = [(k, n, _ADDRESS.sub(" at 0x", t)) if k == "stream" else (k, n, t)
                for k, n, t in outs]
        if other_cpu and CPU_TAG in cell.metadata.get("tags", []):
            outs = [(k, n, f"{str(t).count(chr(10))} lines") for k, n, t in outs]
        summary.append((i, tuple(outs)))
    return summary


def _texts_match(a: str, b: str, rtol=RTOL, atol=ATOL) -> bool:
    """Same text once numbers are cut out and runs of spaces made one (a table's column
    moves with the width of a number: ``6.05e-12`` and ``8.3e-12`` right-aligned), and each
    pair of numbers close."""
    if [_SPACES.sub(" ", t) for t in _NUMBER.split(a)] != \
            [_SPACES.sub(" ", t) for t in _NUMBER.split(b)]:
        return False
    na, nb = _NUMBER.findall(a), _NUMBER.findall(b)
    return all(abs(float(x) - float(y)) <= atol + rtol * abs(float(y)) for x, y in zip(na, nb))


def stale_outputs(stored, fresh, *, rtol=RTOL, atol=ATOL) -> list[str]:
    """Code cells whose stored outputs differ from a fresh run's (see :func:`output_summary`).

    Printed numbers are compared with a tolerance (``rtol``, ``atol``) so that
    last-digit differences between machines do not count; a changed value,
    a missing figure or a new line of output does. Cells tagged ``cpu-dependent`` are
    compared loosely when the two runs' ``cpu_kind`` differ (see ``CPU_TAG``).
    """
    problems = []
    other_cpu = stored.metadata.get(CPU_KEY) != fresh.metadata.get(CPU_KEY)
    a, b = output_summary(stored, other_cpu=other_cpu), output_summary(fresh, other_cpu=other_cpu)
    if [i for i, _ in a] != [i for i, _ in b]:
        return ["the notebooks have different code cells"]
    for (i, outs_a), (_, outs_b) in zip(a, b):
        if outs_a == outs_b:
            continue
        same = (isinstance(outs_a, tuple) and isinstance(outs_b, tuple)
                and len(outs_a) == len(outs_b)
                and all(x[:2] == y[:2] and _texts_match(str(x[2]), str(y[2]), rtol, atol)
                        for x, y in zip(outs_a, outs_b)))
        if not same:
            problems.append(f"cell {i}: stored outputs {outs_a!r:.300} differ from a fresh "
                            f"run's {outs_b!r:.300}")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.notebook_runner",
        description="Execute notebooks top to bottom on a fresh kernel; with --write, store the "
                    "outputs of that clean run in place.")
    parser.add_argument("paths", nargs="+", type=Path, help="notebooks (.ipynb)")
    parser.add_argument("--write", action="store_true",
                        help="overwrite each notebook with its freshly executed version")
    parser.add_argument("--timeout", type=float, default=CELL_TIMEOUT,
                        help=f"seconds allowed per cell (default {CELL_TIMEOUT})")
    args = parser.parse_args(argv)
    failed = []
    total = 0.0
    for path in args.paths:
        if not path.is_file() or path.suffix != ".ipynb":
            print(f"{path}: not a notebook file", file=sys.stderr)
            failed.append(path)
            continue
        try:
            nb, seconds = execute_notebook(path, timeout=args.timeout)
        except CellExecutionError as err:
            print(f"FAIL {path}\n{err}", file=sys.stderr)
            failed.append(path)
            continue
        total += seconds
        if args.write:
            nbformat.write(nb, path)
        print(f"ok   {path}  {seconds:6.2f} s{'  (written)' if args.write else ''}")
    print(f"{len(args.paths) - len(failed)} of {len(args.paths)} notebooks ran, {total:.2f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
