"""Forward + backward of the hand-written transformer, and the same model in PyTorch autograd.

``python -m benchmarks.transformer [--batch B] [--length L] [--rounds N] [--torch-threads T]
[--blas-threads {1,default}]``

The policy is :class:`~ppo_numpy.models.transformer.TransformerPolicy` at its default size
(d_model 32, 4 heads, 2 layers, MLP width 128) on the add task's vocabulary (K = 15);
the default batch is a PPO minibatch-sized (B, L) = (64, 10) block of tokens (L = 10 is
the add task's prompt + response - 1). One call is ``forward`` then ``backward`` of a
fixed random linear functional of the logits and values. The PyTorch candidate is the
same model written with ``torch.nn.functional`` (float64, CPU, autograd), its leaves set
to our parameters; both are timed side by side in interleaved rounds
(:func:`benchmarks.timing.measure`), medians reported, and the ratio is taken between
medians of the same run. Before timing, PyTorch's outputs and every gradient are compared
with ours (an independent implementation check; also ``tests/test_transformer.py``).

Measured with one BLAS thread unless ``--blas-threads default`` (the script re-runs
itself with ``OPENBLAS_NUM_THREADS=1``); PyTorch with ``--torch-threads`` (default 1).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from benchmarks.timing import measure, rerun_with_one_blas_thread, warm_heap
from ppo_numpy.models.transformer import TransformerPolicy

VOCAB = 15


def torch_forward(torch, model, tokens, params):
    """``model``'s forward pass in torch.nn.functional, on the tensors ``params`` (by name)."""
    F = torch.nn.functional
    B, L = tokens.shape
    D, H = model.d_model, model.n_heads
    x = params["E_tok"][torch.as_tensor(tokens)] + params["E_pos"][:L]
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    for layer in range(model.n_layers):
        w = {k.split(".", 1)[1]: v for k, v in params.items() if k.startswith(f"h{layer}.")}
        a = F.layer_norm(x, (D,), w["ln1_g"], w["ln1_b"], eps=1e-5)
        q, k, v = (a @ w["W_qkv"] + w["b_qkv"]).split(D, dim=-1)
        q, k, v = (z.view(B, L, H, D // H).transpose(1, 2) for z in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=causal)
        x = x + o.transpose(1, 2).reshape(B, L, D) @ w["W_o"] + w["b_o"]
        a2 = F.layer_norm(x, (D,), w["ln2_g"], w["ln2_b"], eps=1e-5)
        u = a2 @ w["W_fc"] + w["b_fc"]
        x = x + F.gelu(u, approximate="tanh") @ w["W_proj"] + w["b_proj"]
    h = F.layer_norm(x, (D,), params["lnf_g"], params["lnf_b"], eps=1e-5)
    logits = h @ params["W_pi"] + params["b_pi"] + torch.as_tensor(model.logit_bias)
    return logits, h @ params["w_v"] + params["b_v"]


def torch_grads(torch, model, tokens, G, Gv):
    """Outputs and autograd gradients of sum(G * logits) + sum(Gv * values), as NumPy."""
    leaves = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
              for k, v in model.params.items()}
    logits, values = torch_forward(torch, model, tokens, leaves)
    ((logits * torch.as_tensor(G)).sum() + (values * torch.as_tensor(Gv)).sum()).backward()
    return (logits.detach().numpy(), values.detach().numpy(),
            {k: t.grad.numpy() for k, t in leaves.items()})


def setup(batch, length, seed=0):
    """The default-size model, a (B, L) token block and fixed upstream gradients."""
    rng = np.random.default_rng(seed)
    model = TransformerPolicy(VOCAB, rng, max_len=max(24, length))
    tokens = rng.integers(0, VOCAB, (batch, length))
    G = rng.normal(size=(batch, length, VOCAB))
    G[..., [0, 1]] = 0.0  # PAD and BOS columns (their logits are ~-1e9)
    Gv = rng.normal(size=(batch, length))
    return model, tokens, G, Gv


def compare(model, tokens, G, Gv, torch) -> float:
    """Largest relative difference between our and PyTorch's outputs and gradients."""
    logits, values, cache = model.forward(tokens)
    grads = model.backward(cache, G, Gv)
    t_logits, t_values, t_grads = torch_grads(torch, model, tokens, G, Gv)
    gen = np.ones(VOCAB, dtype=bool)
    gen[[0, 1]] = False

    def rel(a, b):
        return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))

    worst = max(rel(logits[..., gen], t_logits[..., gen]), rel(values, t_values))
    return max([worst] + [rel(grads[k], t_grads[k]) for k in grads])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.transformer",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=64, help="B (default 64)")
    parser.add_argument("--length", type=int, default=10, help="L (default 10)")
    parser.add_argument("--rounds", type=int, default=9, help="rounds per median (default 9)")
    parser.add_argument("--torch-threads", type=int, default=1,
                        help="torch intra-op threads (default 1; 0 keeps torch's default)")
    parser.add_argument("--blas-threads", choices=("1", "default"), default="1",
                        help="OPENBLAS_NUM_THREADS for the measurement (default 1)")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    if args.blas_threads == "1":
        code = rerun_with_one_blas_thread("benchmarks.transformer", argv)
        if code is not None:
            return code
    try:
        import torch
    except ImportError:
        torch = None
    model, tokens, G, Gv = setup(args.batch, args.length)
    B, L = tokens.shape
    print(f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', '(unset)')}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    print(f"TransformerPolicy(K={VOCAB}, d_model={model.d_model}, n_heads={model.n_heads}, "
          f"n_layers={model.n_layers}, d_mlp={model.d_mlp}): {model.n_params} parameters; "
          f"tokens (B, L) = ({B}, {L})")

    def ours():
        _, _, cache = model.forward(tokens)
        model.backward(cache, G, Gv)

    candidates = {"ppo_numpy (hand-written backward)": ours, "PyTorch autograd": None}
    if torch is not None:
        if args.torch_threads > 0:
            torch.set_num_threads(args.torch_threads)
        err = compare(model, tokens, G, Gv, torch)
        print(f"PyTorch {torch.__version__} ({torch.get_num_threads()} threads): largest "
              f"relative difference of outputs and gradients {err:.1e}")
        if not err < 1e-10:
            print("PyTorch and ppo_numpy disagree", file=sys.stderr)
            return 1
        # leaves and upstream tensors made once, as our parameters exist once
        leaves = {k: torch.tensor(v, dtype=torch.float64, requires_grad=True)
                  for k, v in model.params.items()}
        tG, tGv = torch.as_tensor(G), torch.as_tensor(Gv)

        def theirs():
            for t in leaves.values():
                t.grad = None
            logits, values = torch_forward(torch, model, tokens, leaves)
            ((logits * tG).sum() + (values * tGv).sum()).backward()

        candidates["PyTorch autograd"] = theirs
    else:
        print("PyTorch not importable: its column is skipped")
    warm_heap()
    times = measure(candidates, rounds=args.rounds, target=0.2)
    print("| forward + backward | median ms per call | tokens / s |")
    print("|---|---:|---:|")
    for name, sec in times.items():
        print(f"| {name} | {1e3 * sec:.2f} | {B * L / sec:,.0f} |")
    if len(times) == 2:
        mine, theirs = times.values()
        print(f"ratio ppo_numpy / PyTorch: {mine / theirs:.2f} (below 1: ppo_numpy faster)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
