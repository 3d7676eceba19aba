#!/usr/bin/env python
"""One decoding step's attention over a KV cache, per layer: the cache's layouts and loops side by side.

Run from the repository root::

    python benchmarks/decode_attention.py              # the three configs, 4 cache lengths (about 1 minute)
    python benchmarks/decode_attention.py --quick      # smoke test: small, 2 repeats

For each config (B = 64 sequences, its heads and head width) and cache length T,
the attention of one new query per (sequence, head) over T cached keys and values,
through ``fast.attention.attention_forward``, three ways:

``pairs, NumPy``
    the cache as it was before it became time-major, (B, H, capacity, d): the NumPy twin's two
    batched products, one BLAS call per (sequence, head) pair each;
``time-major, NumPy``
    today's time-major cache, (capacity, B, H, d), through the same NumPy twin (what
    runs without Numba);
``time-major, loop``
    today's cache through the compiled loop of ``fast/decode_attention.py``.

Each call reads the caches of the config's layers in turn (ten for tomczak), as a
decoding step does, so a layer's cache is read from memory, not from the CPU cache
where the previous call left it. The capacity is ``SAMPLE_MAX_LEN`` (65, as in
``decode_speed.py`` and ``against_torch.py``) unless ``--capacity`` says otherwise.
Timed in turns; the median of ``--repeats`` rounds; microseconds per layer.
"""
from __future__ import annotations

import statistics
import sys

from blas_threads import configure_from_argv

if __name__ == "__main__":
    configure_from_argv(sys.argv[1:], "decode")  # before NumPy is imported (by common)

import numpy as np  # noqa: E402

from common import (  # noqa: E402
    SAMPLE_BATCH, SAMPLE_MAX_LEN, add_config_options, d_head, finish_args, format_table, make_config, parser,
    start, time_call, write_result,
)
from minitransformer.fast import attention as fast_attention  # noqa: E402
from minitransformer.fast.engine import compiled
from minitransformer.nn.attention import causal_mask  # noqa: E402

WAYS = ("pairs, NumPy", "time-major, NumPy", "time-major, loop")


def caches(cfg, T: int, capacity: int, rng) -> list[dict]:
    """Per layer: a query (B, H, 1, d) as the fused projection's view, and the keys and
    values of T positions in both layouts, each in a buffer of ``capacity`` positions."""
    B, H, d = SAMPLE_BATCH, cfg.n_heads, d_head(cfg)
    layers = []
    for _ in range(cfg.n_layers):
        qkv = rng.standard_normal((B, 1, 3 * H * d), dtype=np.float32)  # (B, 1, 3 H d)
        q = qkv[..., :H * d].reshape(B, 1, H, d).transpose(0, 2, 1, 3)  # (B, H, 1, d), a view
        time_major = [rng.standard_normal((capacity, B, H, d), dtype=np.float32) for _ in range(2)]
        pairs = [np.ascontiguousarray(a.transpose(1, 2, 0, 3)) for a in time_major]  # (B, H, capacity, d)
        layers.append({"q": q, "pairs": [a[:, :, :T] for a in pairs],
                       "time_major": [a[:T].transpose(1, 2, 0, 3) for a in time_major]})
    return layers


def one_step(layers, way: str, mask):
    """The attention of every layer once, the way named; mask (1, T), all True."""
    use_loop = way == "time-major, loop"
    saved = compiled.enabled()
    compiled.set_enabled(use_loop)  # off: the NumPy twin runs (the loop needs Numba on)
    try:
        for layer in layers:
            k, v = layer["pairs" if way == "pairs, NumPy" else "time_major"]
            fast_attention.attention_forward(layer["q"], k, v, mask=mask)
    finally:
        compiled.set_enabled(saved)


def measure(name: str, T: int, capacity: int, repeats: int, warmup: int) -> dict:
    """One table row: microseconds a layer of each way (median of ``repeats``), for the
    config ``name`` at cache length T in buffers of ``capacity`` positions."""
    cfg = make_config(name, capacity)
    layers = caches(cfg, T, capacity, np.random.default_rng(T))
    mask = causal_mask(1, T)  # (1, T), what DecoderLM.step passes
    times = {way: [] for way in WAYS}
    for i in range(warmup + repeats):
        for way in WAYS:
            t = time_call(lambda: one_step(layers, way, mask))
            if i >= warmup:
                times[way].append(t / cfg.n_layers * 1e6)
    row = {"config": name, "T": T, "capacity": capacity, "heads": cfg.n_heads, "d_head": d_head(cfg),
           "cache_mb_per_layer": 2 * SAMPLE_BATCH * cfg.n_heads * T * d_head(cfg) * 4 / 1e6}
    for way in WAYS:
        row[way] = statistics.median(times[way])
        row[way + " runs"] = times[way]
    return row


def main(argv=None) -> None:
    p = parser(__doc__)
    add_config_options(p, shapes=False)
    p.add_argument("--lengths", type=lambda s: [int(x) for x in s.split(",")], default=[8, 16, 32, 64],
                   help="comma-separated cache lengths T (default 8,16,32,64)")
    p.add_argument("--capacity", type=int, default=SAMPLE_MAX_LEN,
                   help=f"positions each cache buffer holds (default {SAMPLE_MAX_LEN})")
    args = finish_args(p, p.parse_args(argv))
    if max(args.lengths) > args.capacity or min(args.lengths) < 1:
        p.error(f"--lengths must lie in 1..{args.capacity} (the --capacity)")
    if not compiled.AVAILABLE:
        p.error("the compiled loop needs Numba: pip install numba (or minitransformer[fast])")
    machine = start(args, "decoding attention")
    rows = [measure(name, T, args.capacity, args.repeats, args.warmup)
            for name in args.configs for T in args.lengths]
    header = ("config", "T", "MB a layer", *(f"{w} us" for w in WAYS), "loop / pairs speed")
    cells = [[r["config"], str(r["T"]), f"{r['cache_mb_per_layer']:.1f}", *(f"{r[w]:.0f}" for w in WAYS),
              f"{r['pairs, NumPy'] / r['time-major, loop']:.2f}"] for r in rows]
    print(format_table(header, cells))
    write_result(args, "decode_attention", machine, {"rows": rows})


if __name__ == "__main__":
    main()
