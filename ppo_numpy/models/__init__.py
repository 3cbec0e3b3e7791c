"""Tiny autoregressive toy policies whose forward and backward passes are written by hand.

==================  ====================================================  ==============
what                names                                                 module
==================  ====================================================  ==============
token ids           PAD, BOS, EOS, FIRST_CONTENT, Vocab                   vocab
tabular policy      BigramPolicy                                          bigram
MLP policy          MLPPolicy                                             mlp
transformer policy  TransformerPolicy                                     transformer
rollouts            sample, evaluate, Rollout, Evaluation                 sampling
PPO loss + grads    ppo_loss_and_grads                                    loss
optimisers          Adam, SGD, clip_grad_norm                             optim
persistence         save_checkpoint, load_checkpoint                      checkpoint
==================  ====================================================  ==============
"""

from .bigram import BigramPolicy
from .checkpoint import load_checkpoint, save_checkpoint
from .loss import ppo_loss_and_grads
from .mlp import MLPPolicy
from .optim import SGD, Adam, clip_grad_norm
from .sampling import Evaluation, Rollout, evaluate, sample
from .transformer import TransformerPolicy
from .vocab import BOS, EOS, FIRST_CONTENT, PAD, Vocab

__all__ = [
    "Adam",
    "BOS",
    "BigramPolicy",
    "EOS",
    "Evaluation",
    "FIRST_CONTENT",
    "MLPPolicy",
    "PAD",
    "Rollout",
    "SGD",
    "TransformerPolicy",
    "Vocab",
    "clip_grad_norm",
    "evaluate",
    "load_checkpoint",
    "ppo_loss_and_grads",
    "sample",
    "save_checkpoint",
]
