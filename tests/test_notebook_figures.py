"""Every figure a notebook stores is shown at its own size on the site, so its text is read at
the size it was drawn (issue 26).

The site shows an image at most ``SITE_IMAGE_WIDTH_PX`` wide (``tests/site_check.py``
measures the column in Chromium); a wider one is scaled down with its text. So a stored PNG
wider than that has text below ``MIN_FONT_PT`` as rendered wherever the figure has text at
``MIN_FONT_PT``, and ``tests/test_plotting_readable.py`` only draws each function on small
inputs, which a notebook's may not be (``plot_forward_pass`` on a 15-token vocabulary is
1180 pixels wide, its test case 531). This test reads the PNG outputs stored in the
notebooks: each must be at most ``SITE_IMAGE_WIDTH_PX`` pixels wide, unless the cell draws it
with a function ``STILL_WIDE`` lists for that notebook (redrawn, but the notebook not yet
re-executed; strict: a listed function none of whose figures in that notebook is wide any
more must leave the list).
"""

from __future__ import annotations

import base64
import re
import struct
from pathlib import Path

import nbformat
import pytest

from ppo_numpy.plotting.style import SITE_IMAGE_WIDTH_PX

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: notebook -> plotting functions whose figures it stores are still wider than the site's
#: column (redrawn at ``SITE_WIDTH_IN``, the notebook not yet re-executed): none since issue 26
STILL_WIDE: dict[str, set[str]] = {}


def png_size(data: str) -> tuple[int, int]:
    """(width, height) in pixels of a base64 PNG (its IHDR chunk)."""
    raw = base64.b64decode(data)
    if raw[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    return struct.unpack(">II", raw[16:24])


def stored_figures(path: Path) -> list[tuple[int, set[str], int]]:
    """(cell index, the plot_* names its source calls, PNG width) of each stored figure."""
    out = []
    for i, cell in enumerate(nbformat.read(path, as_version=4).cells):
        for o in cell.get("outputs", []):
            if "image/png" in o.get("data", {}):
                out.append((i, set(re.findall(r"\b(plot_\w+)\(", cell.source)),
                            png_size(o["data"]["image/png"])[0]))
    return out


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_stored_figures_fit_the_sites_column(path):
    still_wide = STILL_WIDE.get(path.name, set())
    wide = [(i, sorted(names), w) for i, names, w in stored_figures(path)
            if w > SITE_IMAGE_WIDTH_PX and not names & still_wide]
    assert not wide, (f"{path.name}: figures wider than the site's {SITE_IMAGE_WIDTH_PX} px, "
                      f"shown scaled down with their text (cell, drawn by, px): {wide}")


def test_every_still_wide_function_still_has_a_wide_figure():
    fitted = {}
    for name, functions in STILL_WIDE.items():
        wide_names = set()
        for _, names, w in stored_figures(ROOT / "notebooks" / name):
            if w > SITE_IMAGE_WIDTH_PX:
                wide_names |= names
        if functions - wide_names:
            fitted[name] = sorted(functions - wide_names)
    assert not fitted, f"every stored figure of these fits now: take them off STILL_WIDE: {fitted}"


def test_png_size_reads_the_header():
    header = b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + struct.pack(">II", 737, 12)
    assert png_size(base64.b64encode(header).decode()) == (737, 12)
    with pytest.raises(ValueError):
        png_size(base64.b64encode(b"GIF89a" + b"\x00" * 20).decode())
