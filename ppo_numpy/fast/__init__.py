"""The fast forms: the same quantities as the reference functions, computed another way for
speed, each tested equal to its reference.

========================  =================================  ======================================
fast form                 how it is chosen                   tested equal to the reference
========================  =================================  ======================================
``gae_blocked``           ``gae(..., method="blocked")``;    within (4 n_t + 4) u S_t per token,
(GAE by blocks of C       ``method=None`` by the one size    bit for bit where the arithmetic is
steps, matrix products)   rule ``ppo.gae.BLOCKED_FROM``      exact (``tests/test_td_gae.py``)
``gspo_rowwise``          explicitly by its callers: the     within 4 ulps of each output's scale,
(GSPO once per            toy policy's loss in training      the clip counts exactly
response)                 (``policy_loss_kernel`` here),     (``tests/test_gspo_rowwise.py``)
                          the benchmarks
                          (``policy_loss_and_grad`` here)
========================  =================================  ======================================

Two more speed forms stay inside the reference for now: the regular group layouts of
``ppo_numpy.family.advantages`` (bit for bit, ``tests/test_group_advantages.py``) and the
large-array paths of the input checks in ``ppo_numpy._checks`` (``tests/test_large_batches.py``).

Nothing below this package imports it but the reference ``gae``, which runs
``gae_blocked`` by its size rule (a kernel that imports only ``ppo.td``).
"""
