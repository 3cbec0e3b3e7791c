"""The objective's equations (docs/objective.md), one module each: the ratio, the clipped
surrogate, the KL estimators and shaped rewards, the KL term's gradient forms, TD errors, GAE,
whitening, the value loss, the entropy and the aggregation over tokens and sequences. Nothing
here imports the family, the policy loss or the fast forms."""
