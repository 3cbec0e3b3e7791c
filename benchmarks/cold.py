"""GAE and the streaming floor in a fresh process whose heap was never warmed.

``python -m benchmarks.cold B T`` prints one JSON object with the median
seconds per call of ``gae`` and of ``rewards - values`` and the median of their paired ratio
(``ratio``: gae / floor, samples of one round taken one after the other; see
:func:`benchmarks.timing.warm_heap` for why this differs from the main table).
"""

from __future__ import annotations

import json
import statistics
import sys

from benchmarks.core import PARAMS, gae_sized
from benchmarks.data import make_batch
from benchmarks.timing import measure_samples, paired_ratio


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    B, T = (int(a) for a in argv[:2]) if len(argv) >= 2 else (256, 1024)
    b = make_batch(B, T)
    samples = measure_samples({
        "gae": lambda: gae_sized(b.rewards, b.values, PARAMS["gamma"], PARAMS["lam"], b.mask),
        "floor": lambda: b.rewards - b.values,
    }, rounds=15, target=0.02)
    times = {name: statistics.median(v) for name, v in samples.items()}
    print(json.dumps({**times, "ratio": paired_ratio(samples, "gae", "floor")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
