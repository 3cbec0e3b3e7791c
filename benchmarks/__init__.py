"""Speed of ppo_numpy against the alternatives: ``python -m benchmarks`` (``make bench``)
writes docs/benchmarks.md; ``--quick`` is the smoke run of ``tests/test_benchmarks.py``."""
