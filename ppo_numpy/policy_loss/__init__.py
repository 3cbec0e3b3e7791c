"""The policy loss: the public functions (:mod:`~ppo_numpy.policy_loss.objective`), their options
(:mod:`~ppo_numpy.policy_loss.options`) and the kernel that wraps the family's member
(:mod:`~ppo_numpy.policy_loss.kernel`: the ratio, the rollout weights, the aggregation, the KL
term and the statistics, once for every member of :mod:`ppo_numpy.family.losses`)."""
