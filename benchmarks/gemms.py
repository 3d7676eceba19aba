"""The matrix products of one training step (the *GEMM limit*), and the FLOP model
of where attention's T^2 terms take over. Used by train_speed.py and scaling.py.

:func:`step_gemms` derives, from the config, every ``matmul`` of one training
step of ``DecoderLM`` at the model's exact shapes and memory layouts, as the
*fast* kernel set makes them (minitransformer/nn/linear.py for the linear maps,
minitransformer/fast/attention.py for attention); :func:`gemm_task` times one such
product; :func:`check_gemm_list` compares the list with a recorded real step.
"""
from __future__ import annotations

import dataclasses
import math
from collections import Counter

import numpy as np

from common import build, d_head, make_batch, make_config, time_call
from minitransformer import backend, kernels
from minitransformer.backend import xp
from minitransformer.fast.engine import parallel
from minitransformer.models import DecoderLMConfig

MIN_GEMM_SECONDS = 0.005  # a timed GEMM sample loops until it lasts about this long


@dataclasses.dataclass(frozen=True)
class Gemm:
    """One matrix product ``a @ b`` of a step (NumPy matmul rules: leading axes batch).

    ``a_layout`` / ``b_layout`` say how the model's operand lies in memory:

    * ``"C"``: a contiguous array of that shape (weights, activations);
    * ``"C.T"``: the last two axes of a contiguous array swapped, a view (``W.T``,
      ``x2.T`` in the linear backward, ``p.swapaxes(-1, -2)`` in attention);
    * ``"qkv"``: a (B, H, T, dh) head view into the fused (B, T, 3*H*dh) QKV
      projection output (q, k or v: ``split_heads(qkv[..., :H*dh], H)``);
    * ``"qkv.T"``: the same with the last two axes swapped (``k.swapaxes(-1, -2)``);
    * ``"heads"``: a (B, H, T, dh) head view of a contiguous (B, T, H*dh) array
      (the output gradient entering the attention backward, the scaled queries).
    """

    name: str
    phase: str  # "fwd" or "bwd"
    a_shape: tuple
    a_layout: str
    b_shape: tuple
    b_layout: str
    count: int  # times per step: n_layers for a block's products, 1 for the vocab head
    pieces: int = 1  # the model runs it as this many equal slices of the batch axis, together
    #                  on the CPU pool (attention: minitransformer.fast.engine.parallel); 1 = one call

    def piece_shapes(self) -> tuple:
        """(a, b) shapes of one piece: the leading (batch) axis divided by ``pieces``."""
        return tuple((s[0] // self.pieces,) + tuple(s[1:]) for s in (self.a_shape, self.b_shape))

    @property
    def flops(self) -> int:
        """2*m*k*n per matrix, times the batch (a's leading axes), times ``count``."""
        *batch, m, k = self.a_shape
        n = self.b_shape[-1]
        return 2 * math.prod(batch) * m * k * n * self.count


def linear_gemms(name: str, B: int, T: int, d_in: int, d_out: int, count: int) -> list[Gemm]:
    """The three products of ``y = x @ W + b`` (minitransformer/nn/linear.py), each one
    2-D GEMM over the N = B*T rows (x2, dy2 are the (N, .) row views of x, dy):
    forward ``x2 @ W``, input gradient ``dy2 @ W.T``, weight gradient ``x2.T @ dy2``."""
    N = B * T
    return [
        Gemm(f"{name} fwd", "fwd", (N, d_in), "C", (d_in, d_out), "C", count),
        Gemm(f"{name} dX", "bwd", (N, d_out), "C", (d_out, d_in), "C.T", count),
        Gemm(f"{name} dW", "bwd", (d_in, N), "C.T", (N, d_out), "C", count),
    ]


def attention_gemms(B: int, H: int, T: int, dh: int, count: int) -> list[Gemm]:
    """The six per-head products of attention (minitransformer/fast/attention.py), each
    batched over (B, H): forward ``S = (sQ) K^T`` and ``O = P V``; backward
    ``dV = P^T dO``, ``dP = dO V^T``, ``dQ = dS K``, ``dK = dS^T (sQ)``. The scaled
    queries ``sQ`` are a contiguous array of their own ("C"). The model runs each
    product in the batch slices of ``parallel.batch_slices``, together on the CPU
    pool, and so does the limit (:func:`gemm_task`)."""
    qk, tt = (B, H, T, dh), (B, H, T, T)
    kt = (B, H, dh, T)
    slices = parallel.batch_slices(B, H * T * T * 4)  # as attention_forward cuts a float32 batch
    pieces = len(slices)
    if any(sl.stop - sl.start != B // pieces for sl in slices):
        raise ValueError(f"attention_gemms: B={B} does not split into {pieces} equal pieces")
    return [
        Gemm("attn scores Q@K^T fwd", "fwd", qk, "C", kt, "qkv.T", count, pieces),
        Gemm("attn values P@V fwd", "fwd", tt, "C", qk, "qkv", count, pieces),
        Gemm("attn dV = P^T@dO", "bwd", tt, "C.T", qk, "heads", count, pieces),
        Gemm("attn dP = dO@V^T", "bwd", qk, "heads", kt, "qkv.T", count, pieces),
        Gemm("attn dQ = dS@K", "bwd", tt, "C", qk, "qkv", count, pieces),
        Gemm("attn dK = dS^T@Q", "bwd", tt, "C.T", qk, "C", count, pieces),
    ]


def step_gemms(cfg: DecoderLMConfig, B: int, T: int) -> list[Gemm]:
    """Every matmul of one training step of ``DecoderLM(cfg)`` on (B, T) tokens.

    Per block (count = n_layers), with D = d_model, I = n_heads * d_head, F = d_ff:
    the fused QKV projection D -> 3I, the six attention products, the output
    projection I -> D, the FFN's D -> F and F -> D; then once the vocabulary
    projection D -> V. Each linear map contributes forward, dX and dW. The forward
    pass is the ``phase == "fwd"`` subset. No other step of the model multiplies
    matrices (embedding, LayerNorm, GELU, softmax, cross-entropy, clipping and Adam
    are element-wise or gathers).
    """
    L, D, H, F = cfg.n_layers, cfg.d_model, cfg.n_heads, cfg.d_ff
    dh = d_head(cfg)
    inner = H * dh
    gemms = linear_gemms("qkv proj", B, T, D, 3 * inner, L)
    gemms += attention_gemms(B, H, T, dh, L)
    gemms += linear_gemms("out proj", B, T, inner, D, L)
    gemms += linear_gemms("ffn fc1", B, T, D, F, L)
    gemms += linear_gemms("ffn fc2", B, T, F, D, L)
    gemms += linear_gemms("vocab head", B, T, D, cfg.vocab_size, 1)
    return gemms


def make_operand(shape: tuple, layout: str, rng: backend.RNG):
    """A random float32 device array of ``shape`` laid out as ``layout`` (see :class:`Gemm`)."""
    if layout == "C":
        return rng.normal(shape)
    if layout == "C.T":
        return rng.normal(shape[:-2] + (shape[-1], shape[-2])).swapaxes(-1, -2)
    if layout == "qkv":
        B, H, T, dh = shape
        return rng.normal((B, T, 3, H, dh))[:, :, 0].transpose(0, 2, 1, 3)  # (B, H, T, dh), row stride 3*H*dh
    if layout == "qkv.T":
        B, H, dh, T = shape
        return make_operand((B, H, T, dh), "qkv", rng).swapaxes(-1, -2)  # (B, H, dh, T)
    if layout == "heads":
        B, H, T, dh = shape
        return rng.normal((B, T, H, dh)).transpose(0, 2, 1, 3)  # (B, H, T, dh), row stride H*dh
    raise ValueError(f"unknown operand layout {layout!r}")


def gemm_task(gemm: Gemm, rng: backend.RNG):
    """A callable that runs the product ``inner`` times in a row (the output allocated
    each time, as in the model), and ``inner``. A product in ``pieces`` runs as the
    model runs it: one ``xp.matmul`` per batch slice, the slices together on the
    CPU pool with BLAS on one thread meanwhile (``parallel.parallel_for``).

    ``inner`` makes one call last about MIN_GEMM_SECONDS, so microsecond products
    are not lost in timer noise; divide the call's time by it.
    """
    a = make_operand(gemm.a_shape, gemm.a_layout, rng)
    b = make_operand(gemm.b_shape, gemm.b_layout, rng)
    if gemm.pieces == 1:
        def product():
            xp.matmul(a, b)
    else:
        size = gemm.a_shape[0] // gemm.pieces
        slices = [slice(i, i + size) for i in range(0, gemm.a_shape[0], size)]

        def product():
            parallel.parallel_for(lambda sl: xp.matmul(a[sl], b[sl]), slices, uses_blas=True)
    first = time_call(product)  # a first estimate (and a warm-up)
    inner = max(1, min(1000, math.ceil(MIN_GEMM_SECONDS / max(first, 1e-7))))

    def run():
        for _ in range(inner):
            product()

    return run, inner


def gemm_summary(gemms: list[Gemm], seconds: list[float], tokens: int) -> dict:
    """Sum the products' seconds per step (each times its ``count``): all of them for
    training, the ``fwd`` ones for the forward pass; GEMM-bound tokens/s = tokens /
    that sum. Also the per-product breakdown."""
    rows, train_s, fwd_s = [], 0.0, 0.0
    for g, one in zip(gemms, seconds):
        per_step = one * g.count
        train_s += per_step
        fwd_s += per_step if g.phase == "fwd" else 0.0
        rows.append({"name": g.name, "phase": g.phase, "a": list(g.a_shape), "a_layout": g.a_layout,
                     "b": list(g.b_shape), "b_layout": g.b_layout, "count": g.count,
                     "pieces": g.pieces,
                     "gflop": g.flops / 1e9, "seconds": per_step, "gflop_per_s": g.flops / 1e9 / per_step})
    return {"train_seconds": train_s, "fwd_seconds": fwd_s,
            "train_tokens_per_s": tokens / train_s, "fwd_tokens_per_s": tokens / fwd_s,
            "gemms": rows}


# ---------------------------------------------------------------------------
# Checking the list against a real step
# ---------------------------------------------------------------------------
def layout_of(a) -> str:
    """Classify an operand's memory layout with the names of :class:`Gemm`."""
    if a.flags.c_contiguous:
        return "C"
    if a.swapaxes(-1, -2).flags.c_contiguous:
        return "C.T"
    for name, view in (("", a), (".T", a.swapaxes(-1, -2))):
        if view.ndim == 4 and view.strides[-1] == view.itemsize:
            H, dh = view.shape[1], view.shape[3]
            row = view.strides[2] // view.itemsize
            if row == 3 * H * dh:
                return "qkv" + name
            if row == H * dh:
                return "heads" + name
    return f"strides{tuple(a.strides)}"


def recorded_gemms(cfg: DecoderLMConfig, B: int, T: int) -> list[tuple]:
    """Run one training step with the fast kernels on the strict backend and record
    every matrix product it makes as (a shape, a layout, b shape, b layout).

    Seen: ``a @ b`` on device arrays (``StrictArray.__matmul__``) and ``xp.matmul``
    / ``xp.dot`` (the strict backend looks these up on the numpy module at each
    call, so they are replaced there for the duration). Not seen: ``xp.einsum``,
    ``xp.tensordot``; ``xp.vdot`` (gradient clipping) is a dot product, not a GEMM.
    """
    from common import train_step
    from minitransformer.testing.strict import StrictArray

    previous = backend.name()
    backend.use("strict")
    seen = []
    originals = {"__matmul__": StrictArray.__matmul__, "matmul": np.matmul, "dot": np.dot}

    def recording(fn):
        def product(a, b, *args, **kwargs):
            seen.append((tuple(a.shape), layout_of(a), tuple(b.shape), layout_of(b)))
            return fn(a, b, *args, **kwargs)
        return product

    try:
        with kernels.scope("fast"):  # step_gemms describes the fast kernels' products
            model, optimizer = build(cfg)
            ids = make_batch(B, T, cfg)
            StrictArray.__matmul__ = recording(originals["__matmul__"])
            np.matmul, np.dot = recording(originals["matmul"]), recording(originals["dot"])
            train_step(model, optimizer, ids)
    finally:
        StrictArray.__matmul__ = originals["__matmul__"]
        np.matmul, np.dot = originals["matmul"], originals["dot"]
        backend.use(previous)
    return seen


def check_gemm_list(name: str, B: int, T: int) -> bool:
    """Compare :func:`step_gemms` with the products one real step makes; print the
    differences. True when they agree (same shapes, layouts and counts)."""
    cfg = make_config(name, T)
    expected = Counter()
    for g in step_gemms(cfg, B, T):
        a_piece, b_piece = g.piece_shapes()
        expected[(a_piece, g.a_layout, b_piece, g.b_layout)] += g.count * g.pieces
    seen = Counter(recorded_gemms(cfg, B, T))
    missing, extra = expected - seen, seen - expected
    print(f"{name} {B}x{T}: {sum(seen.values())} products recorded, {sum(expected.values())} listed: "
          + ("they agree" if not missing and not extra else "MISMATCH"))
    for label, diff in (("listed but not made", missing), ("made but not listed", extra)):
        for (a, la, b, lb), n in sorted(diff.items()):
            print(f"  {label}: {a} {la} @ {b} {lb} x{n}")
    return not missing and not extra


def format_gemm_list(name: str, B: int, T: int) -> str:
    """The products of one step of ``name`` at (B, T), untimed: what :func:`step_gemms` derives."""
    cfg = make_config(name, T)
    gemms = step_gemms(cfg, B, T)
    out = [f"{name} {B}x{T}: D={cfg.d_model} H={cfg.n_heads} dh={d_head(cfg)} F={cfg.d_ff} "
           f"L={cfg.n_layers} V={cfg.vocab_size}"]
    for g in gemms:
        split = f" in {g.pieces} pieces" if g.pieces > 1 else ""
        out.append(f"  {g.name:24s} {g.phase}  {str(g.a_shape):20s} {g.a_layout:5s} @ "
                   f"{str(g.b_shape):20s} {g.b_layout:5s} x{g.count:<2d} {g.flops / 1e9:8.3f} GFLOP{split}")
    train = sum(g.flops for g in gemms)
    fwd = sum(g.flops for g in gemms if g.phase == "fwd")
    out.append(f"  total per step: {train / 1e9:.3f} GFLOP training, {fwd / 1e9:.3f} GFLOP forward")
    return "\n".join(out)


# ---------------------------------------------------------------------------
# FLOP model: where the T^2 attention terms take over
# ---------------------------------------------------------------------------
def forward_flops_per_layer(cfg: DecoderLMConfig, B: int, T: int) -> dict:
    """Forward matmul FLOPs of one block, split into the T^2 attention products
    (4*B*H*T^2*dh: Q@K^T and P@V) and the linear maps (2*B*T*(D*3I + I*D + 2*D*F))."""
    D, H, F, dh = cfg.d_model, cfg.n_heads, cfg.d_ff, d_head(cfg)
    inner = H * dh
    return {"t2": 4 * B * H * T * T * dh, "linear": 2 * B * T * (D * 3 * inner + inner * D + 2 * D * F)}


def crossover_length(cfg: DecoderLMConfig) -> float:
    """The T at which the T^2 terms equal the linear ones: 4*T*I = 2*(4*D*I + 2*D*F),
    i.e. T* = 2D + D*F/I (independent of B; the vocab head is left out)."""
    D, F = cfg.d_model, cfg.d_ff
    inner = cfg.n_heads * d_head(cfg)
    return 2 * D + D * F / inner
