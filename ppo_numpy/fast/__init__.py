"""The fast forms: the same quantities as the reference functions, computed another way for
speed, each tested equal to its reference.

The reference functions never choose a fast form. A caller that needs the speed chooses it,
explicitly, by calling it (or ``gae(..., method="blocked")``), or by the size rule written
beside it, which it applies itself: the presets, the training loop and the benchmarks.

=========================  ===============================  =======================================
fast form                  chosen by                        tested equal to the reference
=========================  ===============================  =======================================
``gae_blocked``            ``gae(..., method="blocked")``;  within (4 n_t + 4) u S_t per token,
(GAE by blocks of C        the presets and the training     bit for bit where the arithmetic is
steps, matrix products)    loop by the size rule            exact (``tests/test_td_gae.py``)
                           ``use_blocked``: float values
                           of >= ``BLOCKED_FROM`` = 32768
                           entries
``gspo_rowwise``           the toy policy's loss in         within 4 ulps of each output's scale,
(GSPO once per             training (``policy_loss_kernel`` the clip counts exactly
response)                  here) and the benchmarks         (``tests/test_gspo_rowwise.py``)
                           (``policy_loss_and_grad``
                           here), by the rule
                           ``use_rowwise``: the sequence
                           level, the clipped surrogate,
                           >= ``ROWWISE_FROM`` = 16384
                           entries, one advantage per
                           response
``group_layouts``          the training loop's GRPO and     bit for bit
(GRPO and RLOO for         RLOO, and the benchmarks, by     (``tests/test_group_layouts.py``)
groups laid out as a       calling its ``grpo_advantages``
reshape, the layout        and ``rloo_advantages``; on
cached by the ids' bytes)  other ids they call the
                           reference
=========================  ===============================  =======================================

Each form checks the arguments of its public call as the reference does (the same messages);
``gae_blocked`` and ``gspo_rowwise`` check the values on their results (one short read, the
inputs used as given, their padding never read) and hand a failure to the reference's checks,
which name the argument.

Nothing below this package imports it but the reference ``gae``, which runs ``gae_blocked``
when its caller asks (a kernel that imports only ``_checks`` and ``ppo.td``).
"""
