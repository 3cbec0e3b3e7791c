"""``python benchmarks/run.py [options]``: the same as ``python -m benchmarks [options]``."""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from benchmarks.__main__ import main

    raise SystemExit(main())
