"""Settings of every test session.

One OpenBLAS thread, as ``make test`` sets it: the notebooks' stored outputs were computed
that way (``make notebooks``), and BLAS with several threads sums in another order, which
changes the last bits of what they print. Set here, before the notebook kernels (and the
pytest-xdist workers) start, so that a plain ``pytest`` runs them as ``make test`` does; a
value given in the environment is kept.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
