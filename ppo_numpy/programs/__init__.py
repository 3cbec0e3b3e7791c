"""The programs: every ``python -m ppo_numpy COMMAND`` lives here, one module each.

==================  ==============================================================
module              command
==================  ==============================================================
demo                ``demo``: the main job, what ``make demo`` runs
walkthrough         ``walkthrough``: the running example through every function
train               ``train``: PPO on a toy task (:mod:`ppo_numpy.training`)
explain             ``explain``: hand-calculation tables (:mod:`ppo_numpy.explain`)
oracle              ``oracle``: presets, golden files (:mod:`ppo_numpy.oracle`)
overoptimisation    ``overoptimisation``: :mod:`ppo_numpy.reward.overoptimisation`
critic              ``critic``: what the critic buys, PPO against the critic-free family
mismatch            ``mismatch``: a sampler that is not the trainer, and its corrections
gradient_report     ``gradient-report``: the toy policies' gradient checks
hand_calculations   regenerates ``docs/hand-calculations.md``
==================  ==============================================================

Each defines ``main(argv) -> int``; nothing else in the package imports them.
``_exercises`` is no command: what the ``--exercises`` modes of ``overoptimisation`` and
``train`` share (the JSON file of a notebook's exercise runs).
"""
