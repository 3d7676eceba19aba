#!/usr/bin/env python
"""Speed and memory benchmark of ``DecoderLM`` training, inference and sampling.

Run from the repository root::

    python benchmarks/bench.py                 # everything (10-15 minutes on 2 cores)
    python benchmarks/bench.py --quick         # smoke test: 1 config, 1 shape, 2 repeats
    python benchmarks/bench.py --configs small,medium --shapes 64x64 --no-scaling

For every (config, shape) it measures, each as the median of ``--repeats`` runs
after ``--warmup`` runs:

* training tokens/s: forward + cross-entropy + backward + gradient clipping +
  Adam step, float32, the model in training mode (dropout as its config says);
* forward-only tokens/s: the model's forward pass (logits) in eval mode;
* the *GEMM limit*: the time of only the matrix products of one step, every
  ``xp.matmul`` of the forward and backward pass at the model's exact shapes and
  memory layouts (see :func:`step_gemms`), giving "GEMM-bound tokens/s" =
  tokens per step / sum of matmul times, and achieved/limit;
* the peak memory of one training step (``tracemalloc`` on NumPy, the CuPy
  memory pool on the GPU; see :func:`peak_step_memory`);
* sampling: 64 sequences x 64 new tokens with the KV cache and without it.

Then, for ``medium`` at 4096 tokens per batch, training tokens/s and peak memory
against the sequence length T (``--no-scaling`` skips it), plotted to
``benchmarks/scaling.png``. Results go to ``benchmarks/results.json``.
See ``benchmarks/README.md`` for the exact definitions.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import platform
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS")
DEFAULT_THREADS = 2


def set_blas_threads(n: int) -> None:
    """Set the BLAS/OpenMP thread-count variables, and let OpenBLAS's idle threads
    sleep after about 1.5 ms instead of 0.1 s (see minitransformer/parallel.py).
    BLAS reads them once, when NumPy is first imported, so this must run before
    ``import numpy``."""
    for var in THREAD_VARIABLES:
        os.environ[var] = str(n)
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "22")


def _threads_from_argv(argv) -> int:
    """Just ``--threads`` from the command line (the full parser runs later)."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--threads", type=int, default=DEFAULT_THREADS)
    return early.parse_known_args(argv)[0].threads


if __name__ == "__main__":
    set_blas_threads(_threads_from_argv(sys.argv[1:]))  # before NumPy is imported below

import numpy as np  # noqa: E402  (after the thread variables are set)

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))  # benchmark the checkout, installed or not

from minitransformer import backend, parallel  # noqa: E402
from minitransformer.backend import xp  # noqa: E402
from minitransformer.functional import cross_entropy_backward, cross_entropy_forward  # noqa: E402
from minitransformer.generate import sample  # noqa: E402
from minitransformer.models import DecoderLM, DecoderLMConfig  # noqa: E402
from minitransformer.optim import Adam, clip_grad_norm  # noqa: E402

HERE = Path(__file__).resolve().parent
VOCAB = 112
SHAPES = ((64, 64), (32, 128))  # (batch B, length T): the model reads (B, T) tokens
SAMPLE_BATCH, SAMPLE_NEW = 64, 64  # sampling: 64 sequences x 64 new tokens after BOS
SAMPLE_MAX_LEN = 1 + SAMPLE_NEW  # BOS + the new tokens
SCALING_TOKENS = 4096  # tokens per batch in the scaling run: B = 4096 / T
SCALING_LENGTHS = (64, 128, 256, 512, 1024)
QUICK_SCALING_LENGTHS = (64, 128)
MIN_GEMM_SECONDS = 0.005  # a timed GEMM sample loops until it lasts about this long


# ---------------------------------------------------------------------------
# Configurations
# ---------------------------------------------------------------------------
def config_small(max_len: int) -> DecoderLMConfig:
    """D=64, 2 pre-LN layers, 4 heads (d_head 16), d_ff 256, exact GELU, no dropout."""
    return DecoderLMConfig(vocab_size=VOCAB, max_len=max_len, d_model=64, n_heads=4, n_layers=2,
                           d_ff=256, norm="pre", activation="gelu")


def config_tomczak(max_len: int) -> DecoderLMConfig:
    """The reference ARM: D=64, 10 post-LN layers, 4 heads of width 64, d_ff 256,
    exact GELU, dropout 0.1 on the embedding sum only."""
    return DecoderLMConfig.tomczak(vocab_size=VOCAB, max_len=max_len)


def config_medium(max_len: int) -> DecoderLMConfig:
    """D=256, 4 pre-LN layers, 8 heads (d_head 32), d_ff 1024, exact GELU, no dropout."""
    return DecoderLMConfig(vocab_size=VOCAB, max_len=max_len, d_model=256, n_heads=8, n_layers=4,
                           d_ff=1024, norm="pre", activation="gelu")


CONFIGS = {"small": config_small, "tomczak": config_tomczak, "medium": config_medium}


def make_config(name: str, T: int) -> DecoderLMConfig:
    """The named config with room for T positions (and for the sampling run)."""
    return CONFIGS[name](max(T, SAMPLE_MAX_LEN))


def d_head(cfg: DecoderLMConfig) -> int:
    """Width of one attention head."""
    return cfg.d_head if cfg.d_head is not None else cfg.d_model // cfg.n_heads


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------
def time_call(fn) -> float:
    """Seconds for one ``fn()``, with the device synchronised before and after."""
    backend.synchronize()
    t0 = time.perf_counter()
    fn()
    backend.synchronize()
    return time.perf_counter() - t0


def interleaved_times(tasks: dict, repeats: int, warmup: int) -> dict:
    """Seconds of each run of each task (a name -> callable dict), timed in turns.

    After ``warmup`` untimed rounds, each of ``repeats`` rounds times every task
    once. A change in machine load then hits all tasks alike, so ratios between
    them (achieved/limit, uncached/cached) stay meaningful on a busy machine.
    """
    for _ in range(warmup):
        for fn in tasks.values():
            fn()
    samples = {name: [] for name in tasks}
    for _ in range(repeats):
        for name, fn in tasks.items():
            samples[name].append(time_call(fn))
    return samples


# ---------------------------------------------------------------------------
# The measured work: a training step, a forward pass
# ---------------------------------------------------------------------------
def make_batch(B: int, T: int, cfg: DecoderLMConfig, seed: int = 0):
    """Device ids (B, T + 1): BOS, then random tokens that are never PAD, so all
    B*T targets count. The model reads ids[:, :-1] and predicts ids[:, 1:]."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(3, cfg.vocab_size, size=(B, T + 1), dtype=np.int64)  # 0-2: PAD, BOS, EOS
    ids[:, 0] = cfg.bos_id
    return backend.asarray(ids)


def build(cfg: DecoderLMConfig):
    """A fresh model (training mode) and its Adam optimizer."""
    model = DecoderLM(cfg)
    return model, Adam(model, lr=1e-3)


def train_step(model, optimizer, ids) -> None:
    """One training step as the trainer runs it: forward, mean cross-entropy over the
    targets, zero_grad, backward, global-norm clipping at 1.0, Adam update."""
    logits = model(ids[:, :-1])  # (B, T, V)
    _, ce_cache = cross_entropy_forward(logits, ids[:, 1:], ignore_index=model.config.pad_id)
    model.zero_grad()
    model.backward(cross_entropy_backward(ce_cache))
    clip_grad_norm(model, 1.0)
    optimizer.step()


def forward_only(model, ids) -> None:
    """The forward pass alone (logits), as evaluation or scoring runs it."""
    model(ids[:, :-1])


# ---------------------------------------------------------------------------
# Peak memory of a training step
# ---------------------------------------------------------------------------
def peak_step_memory(cfg, B, T) -> dict:
    """Peak memory during one training step, after one warm-up step.

    NumPy (and the strict stand-in): ``tracemalloc`` runs from before the model is
    built, so it sees every NumPy buffer: weights, gradients, Adam's m and v, the
    activations cached by the previous step, and the step's own temporaries.
    ``peak_bytes`` is the highest total during the measured step and
    ``before_step_bytes`` the total when it starts. (Timing runs are separate:
    tracemalloc slows allocation.)

    CuPy: the default memory pool never hands blocks back on its own, so after
    ``free_all_blocks()`` its ``total_bytes()`` can only grow, and after the step
    it is the pool's high-water mark: the peak, rounded up by block sizes and
    fragmentation (an upper bound). ``before_step_bytes`` is ``used_bytes()``.
    """
    if backend.name() == "cupy":
        pool = xp.get_default_memory_pool()
        model, optimizer = build(cfg)
        ids = make_batch(B, T, cfg)
        train_step(model, optimizer, ids)
        backend.synchronize()
        pool.free_all_blocks()
        before = pool.used_bytes()
        train_step(model, optimizer, ids)
        backend.synchronize()
        return {"method": "cupy pool total_bytes after free_all_blocks", "peak_bytes": pool.total_bytes(),
                "before_step_bytes": before}
    tracemalloc.start()
    try:
        model, optimizer = build(cfg)
        ids = make_batch(B, T, cfg)
        train_step(model, optimizer, ids)
        tracemalloc.reset_peak()
        before, _ = tracemalloc.get_traced_memory()
        train_step(model, optimizer, ids)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return {"method": "tracemalloc", "peak_bytes": peak, "before_step_bytes": before}


def max_rss_mb() -> float:
    """The process's resident-set high-water mark (ru_maxrss, KiB on Linux), in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


# ---------------------------------------------------------------------------
# The GEMM limit: every matrix product of one step, at the model's shapes
# ---------------------------------------------------------------------------
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
    #                  on the CPU pool (attention: minitransformer.parallel); 1 = one call

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
    """The three products of ``y = x @ W + b`` (see functional/linear.py), each one
    2-D GEMM over the N = B*T rows (x2, dy2 are the (N, .) row views of x, dy):
    forward ``x2 @ W``, input gradient ``dy2 @ W.T``, weight gradient ``x2.T @ dy2``."""
    N = B * T
    return [
        Gemm(f"{name} fwd", "fwd", (N, d_in), "C", (d_in, d_out), "C", count),
        Gemm(f"{name} dX", "bwd", (N, d_out), "C", (d_out, d_in), "C.T", count),
        Gemm(f"{name} dW", "bwd", (d_in, N), "C.T", (N, d_out), "C", count),
    ]


def attention_gemms(B: int, H: int, T: int, dh: int, count: int) -> list[Gemm]:
    """The six per-head products of attention (see functional/attention.py), each
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


def measure(cfg: DecoderLMConfig, B: int, T: int, repeats: int, warmup: int, forward: bool = True) -> dict:
    """Time, in turns (see :func:`interleaved_times`): the training step, the
    forward pass (if ``forward``) and every product of :func:`step_gemms`.

    Returns the medians ``train_s`` and ``fwd_s`` (None without ``forward``), every
    run's seconds (``*_runs_s``) and ``gemm_limit`` (see :func:`gemm_summary`).
    """
    model, optimizer = build(cfg)
    ids = make_batch(B, T, cfg)
    tasks = {"train": lambda: train_step(model, optimizer, ids)}
    if forward:
        eval_model = DecoderLM(cfg).eval()  # dropout off; its own caches, so train is undisturbed
        tasks["fwd"] = lambda: forward_only(eval_model, ids)
    gemms = step_gemms(cfg, B, T)
    rng, inners = backend.RNG(1234), []
    for i, g in enumerate(gemms):
        tasks[i], inner = gemm_task(g, rng)
        inners.append(inner)
    times = interleaved_times(tasks, repeats, warmup)
    gemm_seconds = [statistics.median(times[i]) / inner for i, inner in enumerate(inners)]
    return {"train_s": statistics.median(times["train"]), "train_runs_s": times["train"],
            "fwd_s": statistics.median(times["fwd"]) if forward else None,
            "fwd_runs_s": times.get("fwd"), "gemm_limit": gemm_summary(gemms, gemm_seconds, B * T)}


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
    """Run one training step on the strict backend and record every matrix product
    it makes as (a shape, a layout, b shape, b layout).

    Seen: ``a @ b`` on device arrays (``StrictArray.__matmul__``) and ``xp.matmul``
    / ``xp.dot`` (the strict backend looks these up on the numpy module at each
    call, so they are replaced there for the duration). Not seen: ``xp.einsum``,
    ``xp.tensordot``; ``xp.vdot`` (gradient clipping) is a dot product, not a GEMM.
    """
    previous = backend.name()
    backend.use("strict")
    seen = []
    originals = {"__matmul__": backend.StrictArray.__matmul__, "matmul": np.matmul, "dot": np.dot}

    def recording(fn):
        def product(a, b, *args, **kwargs):
            seen.append((tuple(a.shape), layout_of(a), tuple(b.shape), layout_of(b)))
            return fn(a, b, *args, **kwargs)
        return product

    try:
        model, optimizer = build(cfg)
        ids = make_batch(B, T, cfg)
        backend.StrictArray.__matmul__ = recording(originals["__matmul__"])
        np.matmul, np.dot = recording(originals["matmul"]), recording(originals["dot"])
        train_step(model, optimizer, ids)
    finally:
        backend.StrictArray.__matmul__ = originals["__matmul__"]
        np.matmul, np.dot = originals["matmul"], originals["dot"]
        backend.use(previous)
    return seen


def check_gemm_list(name: str, B: int, T: int) -> bool:
    """Compare :func:`step_gemms` with the products one real step makes; print the
    differences. True when they agree (same shapes, layouts and counts)."""
    from collections import Counter

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


# ---------------------------------------------------------------------------
# Sampling: KV cache against re-running the prefix
# ---------------------------------------------------------------------------
def sampling_model(name: str) -> DecoderLM:
    """The config's model with max_len = 1 + 64 and an EOS id out of the vocabulary.

    ``eos_id = vocab_size`` can never be drawn (the logits cover ids 0..V-1), so no
    row stops early and every call produces exactly 64 new tokens. Nothing else
    changes: the weights and the work per step are those of the real model.
    """
    cfg = dataclasses.replace(CONFIGS[name](SAMPLE_MAX_LEN), eos_id=VOCAB)
    return DecoderLM(cfg)


def time_sampling(name: str, repeats: int, warmup: int) -> dict:
    """Median seconds to sample 64 x 64 new tokens, cached and uncached, and the ratio."""
    model = sampling_model(name)

    def run(use_cache):
        out = sample(model, batch_size=SAMPLE_BATCH, max_len=SAMPLE_MAX_LEN, rng=0, use_cache=use_cache)
        if out.shape != (SAMPLE_BATCH, SAMPLE_MAX_LEN):
            raise RuntimeError(f"sampling stopped early: got shape {out.shape}")

    times = interleaved_times({"cached": lambda: run(True), "uncached": lambda: run(False)}, repeats, warmup)
    cached, uncached = statistics.median(times["cached"]), statistics.median(times["uncached"])
    return {"cached_s": cached, "uncached_s": uncached, "ratio": uncached / cached,
            "cached_runs_s": times["cached"], "uncached_runs_s": times["uncached"],
            "sequences": SAMPLE_BATCH, "new_tokens": SAMPLE_NEW}


# ---------------------------------------------------------------------------
# One table row, and the scaling run
# ---------------------------------------------------------------------------
def bench_row(name: str, B: int, T: int, args, sampling: dict) -> dict:
    """Every measurement of one (config, shape)."""
    cfg = make_config(name, T)
    tokens = B * T
    timed = measure(cfg, B, T, args.repeats, args.warmup)
    train_s, fwd_s, limit = timed["train_s"], timed["fwd_s"], timed["gemm_limit"]
    memory = peak_step_memory(cfg, B, T)
    flops = forward_flops_per_layer(cfg, B, T)
    return {
        "config": name, "B": B, "T": T, "tokens_per_step": tokens, "model": cfg.to_dict(),
        "parameters": DecoderLM(cfg).num_parameters(),
        "train_step_s": train_s, "train_tokens_per_s": tokens / train_s, "train_runs_s": timed["train_runs_s"],
        "fwd_s": fwd_s, "fwd_tokens_per_s": tokens / fwd_s, "fwd_runs_s": timed["fwd_runs_s"],
        "gemm_limit": limit,
        "train_achieved_over_limit": limit["train_seconds"] / train_s,
        "fwd_achieved_over_limit": limit["fwd_seconds"] / fwd_s,
        "memory": memory,
        "forward_flops_per_layer": flops, "t2_over_linear": flops["t2"] / flops["linear"],
        "sampling": sampling,
    }


def run_scaling(args) -> list[dict]:
    """``medium`` at SCALING_TOKENS tokens per batch for each T: training tokens/s,
    GEMM-bound tokens/s and peak memory."""
    points = []
    for T in args.scaling_lengths:
        B = SCALING_TOKENS // T
        cfg = make_config("medium", T)
        timed = measure(cfg, B, T, args.repeats, args.warmup, forward=False)
        train_s, limit = timed["train_s"], timed["gemm_limit"]
        memory = peak_step_memory(cfg, B, T)
        flops = forward_flops_per_layer(cfg, B, T)
        point = {"T": T, "B": B, "train_step_s": train_s, "train_tokens_per_s": B * T / train_s,
                 "train_runs_s": timed["train_runs_s"],
                 "gemm_limit_tokens_per_s": limit["train_tokens_per_s"],
                 "achieved_over_limit": limit["train_seconds"] / train_s,
                 "peak_bytes": memory["peak_bytes"], "t2_over_linear": flops["t2"] / flops["linear"]}
        print(f"  scaling T={T:5d} B={B:3d}: {point['train_tokens_per_s']:9.0f} tok/s "
              f"(GEMM limit {point['gemm_limit_tokens_per_s']:9.0f}), peak {mb(point['peak_bytes']):7.1f} MB, "
              f"T^2/linear FLOPs {point['t2_over_linear']:.2f}", flush=True)
        points.append(point)
    return points


def plot_scaling(points: list[dict], path: Path, title: str) -> None:
    """Two panels against T (log scale): tokens/s (measured and GEMM limit), peak memory."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    Ts = [p["T"] for p in points]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    ax1.plot(Ts, [p["train_tokens_per_s"] for p in points], "o-", label="training step (measured)")
    ax1.plot(Ts, [p["gemm_limit_tokens_per_s"] for p in points], "s--", label="GEMM limit (matmuls only)")
    ax1.set_ylabel("tokens / s")
    ax1.set_ylim(bottom=0)
    ax1.legend()
    ax2.plot(Ts, [mb(p["peak_bytes"]) for p in points], "o-", color="C2")
    ax2.set_ylabel("peak memory of a step (MB)")
    ax2.set_ylim(bottom=0)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xticks(Ts, [str(t) for t in Ts])
        ax.set_xlabel(f"sequence length T  (batch B = {SCALING_TOKENS} / T)")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---------------------------------------------------------------------------
# Machine description and output
# ---------------------------------------------------------------------------
def cpu_model() -> str | None:
    """The CPU's "model name" from /proc/cpuinfo (Linux), or platform.processor()."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def blas_info():
    """NumPy's BLAS as ``np.show_config(mode='dicts')`` reports it (NumPy >= 1.26)."""
    try:
        return np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except Exception:  # older NumPy: no dict mode
        return None


def gpu_info() -> dict | None:
    """Device name, CuPy and CUDA runtime versions under the cupy backend."""
    if backend.name() != "cupy":
        return None
    props = xp.cuda.runtime.getDeviceProperties(xp.cuda.Device().id)
    return {"name": props["name"].decode(), "cupy": xp.__version__,
            "cuda_runtime": xp.cuda.runtime.runtimeGetVersion(),
            "memory_bytes": props["totalGlobalMem"]}


def machine_description(args) -> dict:
    """Where and how the numbers were taken."""
    return {
        "cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
        "cpus_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "load_average_at_start": os.getloadavg(),
        "python": platform.python_version(), "platform": platform.platform(),
        "numpy": np.__version__, "blas": blas_info(), "gpu": gpu_info(),
        "backend": backend.name(), "threads": args.threads,
        "thread_env": {v: os.environ.get(v) for v in THREAD_VARIABLES + ("OPENBLAS_THREAD_TIMEOUT",
                                                                       "MINITRANSFORMER_THREADS")},
        "pool_threads": parallel.threads(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def warn_if_busy(machine: dict, threads: int) -> None:
    """Say so when other work already occupies the cores the BLAS threads need:
    a BLAS thread that waits for a descheduled partner can turn a 100 us product
    into a 100 ms one, and every number becomes noise."""
    load, cpus = machine["load_average_at_start"][0], machine["cpus_available"] or machine["cpu_count"] or 1
    if backend.name() != "cupy" and load + threads > cpus + 0.5:
        print(f"warning: load average {load:.1f} on {cpus} CPUs: with {threads} BLAS threads the cores "
              "are oversubscribed and the timings will be noisy (see README)", file=sys.stderr)


def mb(n_bytes: float) -> float:
    """Bytes -> megabytes (10^6)."""
    return n_bytes / 1e6


TABLE_HEADER = ("config", "B x T", "train tok/s", "fwd tok/s", "GEMM-limit train tok/s",
                "GEMM-limit fwd tok/s", "train achieved/limit", "fwd achieved/limit", "peak MB",
                "sample cached s", "uncached s", "ratio")


def table_cells(row: dict) -> list[str]:
    """One result row as the table's text cells."""
    s, lim = row["sampling"], row["gemm_limit"]
    return [row["config"], f"{row['B']}x{row['T']}", f"{row['train_tokens_per_s']:,.0f}",
            f"{row['fwd_tokens_per_s']:,.0f}", f"{lim['train_tokens_per_s']:,.0f}",
            f"{lim['fwd_tokens_per_s']:,.0f}", f"{row['train_achieved_over_limit']:.2f}",
            f"{row['fwd_achieved_over_limit']:.2f}", f"{mb(row['memory']['peak_bytes']):.1f}",
            f"{s['cached_s']:.2f}", f"{s['uncached_s']:.2f}", f"{s['ratio']:.1f}"]


def format_table(rows: list[dict]) -> str:
    """A Markdown table, columns padded so it also reads well as plain text."""
    cells = [list(TABLE_HEADER)] + [table_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(TABLE_HEADER))]
    lines = ["| " + " | ".join(c.rjust(w) for c, w in zip(line, widths)) + " |" for line in cells]
    lines.insert(1, "|" + "|".join("-" * (w + 1) + ":" for w in widths) + "|")
    return "\n".join(lines)


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


def format_gemms(row: dict) -> str:
    """The per-product breakdown of one row's GEMM limit."""
    out = [f"GEMMs of one training step, {row['config']} {row['B']}x{row['T']} (ms include x count):"]
    for g in row["gemm_limit"]["gemms"]:
        out.append(f"  {g['name']:24s} {g['phase']}  {str(tuple(g['a'])):20s} {g['a_layout']:5s} @ "
                   f"{str(tuple(g['b'])):20s} {g['b_layout']:5s} x{g['count']:<2d} "
                   f"{g['seconds'] * 1e3:8.2f} ms {g['gflop_per_s']:7.1f} GFLOP/s")
    return "\n".join(out)


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------
def parse_shape(text: str) -> tuple[int, int]:
    """"64x64" -> (64, 64)."""
    try:
        B, T = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shape must look like 64x64 (BxT), got {text!r}") from None
    return B, T


def parse_args(argv=None) -> argparse.Namespace:
    """The command line; --quick fills in whatever was not given explicitly."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=("numpy", "cupy", "strict"), default="numpy",
                   help="array backend (strict: the CPU stand-in for CuPy, to check that path)")
    p.add_argument("--configs", type=lambda s: s.split(","), default=None,
                   help=f"comma-separated subset of {','.join(CONFIGS)} (default: all)")
    p.add_argument("--shapes", type=lambda s: [parse_shape(x) for x in s.split(",")], default=None,
                   help="comma-separated BxT list (default: 64x64,32x128)")
    p.add_argument("--repeats", type=int, default=None, help="timed runs per measurement (default 5)")
    p.add_argument("--warmup", type=int, default=None, help="untimed runs first (default 2)")
    p.add_argument("--threads", type=int, default=DEFAULT_THREADS,
                   help="BLAS/OpenMP threads, set before NumPy is imported (default 2)")
    p.add_argument("--quick", action="store_true",
                   help="smoke test: small, 64x64, 2 repeats, 1 warm-up, scaling at T=64,128 only")
    p.add_argument("--no-scaling", action="store_true", help="skip the medium sequence-length sweep")
    p.add_argument("--scaling-lengths", type=lambda s: [int(x) for x in s.split(",")], default=None,
                   help=f"T values of the sweep (default {','.join(map(str, SCALING_LENGTHS))})")
    p.add_argument("--show-gemms", action="store_true", help="print each row's per-GEMM timings")
    p.add_argument("--check-gemms", action="store_true",
                   help="check the matmul list against one recorded step (strict backend), and exit")
    p.add_argument("--list-gemms", action="store_true",
                   help="print the matmuls of one step for each config and shape, and exit (no timing)")
    p.add_argument("--json", type=Path, default=HERE / "results.json", help="results file")
    p.add_argument("--plot", type=Path, default=HERE / "scaling.png", help="scaling plot file")
    args = p.parse_args(argv)
    args.configs = args.configs or (["small"] if args.quick else list(CONFIGS))
    args.shapes = args.shapes or ([SHAPES[0]] if args.quick else list(SHAPES))
    args.repeats = args.repeats or (2 if args.quick else 5)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    args.scaling_lengths = args.scaling_lengths or list(QUICK_SCALING_LENGTHS if args.quick else SCALING_LENGTHS)
    unknown = sorted(set(args.configs) - set(CONFIGS))
    if unknown:
        p.error(f"unknown config(s) {unknown}; choose from {list(CONFIGS)}")
    bad = [T for T in args.scaling_lengths if T <= 0 or SCALING_TOKENS % T]
    if bad:
        p.error(f"scaling lengths must divide {SCALING_TOKENS}: {bad}")
    return args


def main(argv=None) -> None:
    """Run the benchmark, print the table, write the JSON (and the scaling plot)."""
    args = parse_args(argv)
    if args.list_gemms:
        for name in args.configs:
            for B, T in args.shapes:
                print(format_gemm_list(name, B, T))
        return
    if args.check_gemms:
        ok = all([check_gemm_list(name, B, T) for name in args.configs for B, T in args.shapes])
        sys.exit(0 if ok else 1)
    if os.environ.get("OPENBLAS_NUM_THREADS") != str(args.threads):
        print(f"warning: BLAS thread variables are not {args.threads}: NumPy was imported before "
              "they could be set (run this file as a script)", file=sys.stderr)
    backend.use(args.backend)
    machine = machine_description(args)
    print(f"backend {backend.name()}, {args.threads} BLAS threads, {machine['cpu_model']}, "
          f"numpy {np.__version__}, repeats {args.repeats} after {args.warmup} warm-up, "
          f"load average {machine['load_average_at_start'][0]:.1f}", flush=True)
    warn_if_busy(machine, args.threads)

    rows = []
    for name in args.configs:
        print(f"{name}: sampling {SAMPLE_BATCH} x {SAMPLE_NEW} tokens ...", flush=True)
        sampling = time_sampling(name, args.repeats, args.warmup)
        for B, T in args.shapes:
            print(f"{name}: {B}x{T} ...", flush=True)
            rows.append(bench_row(name, B, T, args, sampling))
            if args.show_gemms:
                print(format_gemms(rows[-1]))
    print()
    print(format_table(rows))
    print()
    for name in args.configs:
        cfg = make_config(name, SAMPLE_MAX_LEN)
        print(f"{name}: T^2 attention FLOPs equal the linear ones at T* = {crossover_length(cfg):.0f}")

    scaling = None
    if not args.no_scaling:
        print(f"\nscaling: medium, {SCALING_TOKENS} tokens per batch", flush=True)
        scaling = run_scaling(args)
        plot_scaling(scaling, args.plot, f"medium, {SCALING_TOKENS} tokens/batch, backend {backend.name()}, "
                                         f"{args.threads} threads")
        print(f"plot: {args.plot}")

    rss = max_rss_mb()
    print(f"ru_maxrss (process high-water mark over all runs, for reference): {rss:.0f} MB")
    machine["load_average_at_end"] = os.getloadavg()
    result = {"machine": machine,
              "settings": {"repeats": args.repeats, "warmup": args.warmup, "vocab_size": VOCAB,
                           "sampling": {"sequences": SAMPLE_BATCH, "new_tokens": SAMPLE_NEW},
                           "scaling_tokens": SCALING_TOKENS},
              "results": rows, "scaling": scaling, "ru_maxrss_mb": rss,
              "crossover_T": {n: crossover_length(make_config(n, SAMPLE_MAX_LEN)) for n in args.configs}}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=1))
    print(f"results: {args.json}")


if __name__ == "__main__":
    main()
