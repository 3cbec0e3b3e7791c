"""Gradients: the losses' gradients by hand (``loss_grads``), centered finite differences and
the comparison report (``gradcheck``), and the KL term's exact expected gradients by
enumeration (``kl_exact``)."""
