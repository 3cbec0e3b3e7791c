"""``make demo``: until training lands, the printed walkthrough of the running example."""

from __future__ import annotations

from . import walkthrough


def main(argv=None) -> int:
    return walkthrough.main(argv)
