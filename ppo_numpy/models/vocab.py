"""Token ids of the toy language models, and names for printing them.

Three special tokens come first; content tokens are ``FIRST_CONTENT .. K - 1``:

    PAD = 0   fills the response after EOS (mask 0); never generated
    BOS = 1   starts every prompt; never generated
    EOS = 2   ends a response; it *is* a response token (mask 1)

Content tokens are named ``a``, ``b``, ... ``z``, then ``t29``, ``t30``, ... by id.
"""

from __future__ import annotations

import string

import numpy as np

from .._checks import check_int

PAD = 0
BOS = 1
EOS = 2
FIRST_CONTENT = 3
SPECIAL_NAMES = ("<pad>", "<bos>", "<eos>")
NEVER_GENERATED = (PAD, BOS)


def check_vocab_size(vocab_size) -> int:
    """Return ``vocab_size`` as an int after checking K >= 4 (at least one content token)."""
    return check_int(vocab_size, "vocab_size", FIRST_CONTENT + 1)


def check_tokens(tokens, vocab_size: int, name: str = "tokens", *, ndim: int = 2) -> np.ndarray:
    """Return ``tokens`` as a new int64 array after checking dtype, rank and range [0, K).

    Raises TypeError for non-integer arrays and ValueError naming ``name`` for a
    wrong rank or an id outside the vocabulary.

    >>> check_tokens([[1, 3, 2]], 5).tolist()
    [[1, 3, 2]]
    """
    arr = np.asarray(tokens)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name}: expected integer token ids, got dtype {arr.dtype}")
    if arr.ndim != ndim:
        want = "(B, L)" if ndim == 2 else f"{ndim}-d"
        raise ValueError(f"{name}: expected shape {want}, got shape {arr.shape}")
    bad = (arr < 0) | (arr >= vocab_size)
    if np.any(bad):
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"{name}: token id {int(arr[idx])} at index {idx} is outside the "
                         f"vocabulary [0, {vocab_size})")
    return arr.astype(np.int64, copy=True)


class Vocab:
    """Names of the K token ids: ``<pad> <bos> <eos> a b c ...``.

    Examples
    --------
    >>> v = Vocab(6)
    >>> v.names
    ('<pad>', '<bos>', '<eos>', 'a', 'b', 'c')
    >>> v.decode([1, 3, 5, 4, 2, 0, 0])
    '<bos> a c b <eos>'
    >>> v.encode("a c <eos>")
    [3, 5, 2]
    """

    def __init__(self, vocab_size):
        self.size = check_vocab_size(vocab_size)
        letters = string.ascii_lowercase
        content = [letters[i] if i < len(letters) else f"t{i + FIRST_CONTENT}"
                   for i in range(self.size - FIRST_CONTENT)]
        self.names = SPECIAL_NAMES + tuple(content)

    def __len__(self) -> int:
        return self.size

    def name(self, token_id) -> str:
        return self.names[int(check_tokens([token_id], self.size, "token_id", ndim=1)[0])]

    def decode(self, ids, *, keep_pad: bool = False) -> str:
        """Space-separated names of a 1-d sequence of ids; PAD dropped unless ``keep_pad``."""
        ids = check_tokens(ids, self.size, "ids", ndim=1)
        return " ".join(self.names[i] for i in ids if keep_pad or i != PAD)

    def encode(self, text: str) -> list:
        """Ids of space-separated token names (the inverse of :meth:`decode`)."""
        index = {n: i for i, n in enumerate(self.names)}
        unknown = [w for w in text.split() if w not in index]
        if unknown:
            raise ValueError(f"text: unknown token names {unknown}; known: {' '.join(self.names)}")
        return [index[w] for w in text.split()]
