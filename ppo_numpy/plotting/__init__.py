"""Figures for the notebooks, docs and command-line tools (matplotlib only lives here).

Each module holds the named plotting functions of one topic, e.g.
``ppo_numpy.plotting.training`` for the training dashboard. Import the module
you need; nothing is imported here, so ``import ppo_numpy`` never pulls in matplotlib.
"""
