"""Training tokens/s of our models on the active backend (CuPy on a GPU), float32, with the
GPU memory held: the speed part of issue 29's device run. Prints one JSON line.

The models and the step are ``benchmarks/common.py``'s (forward, cross-entropy, backward,
clipping, Adam), the same step ``torch_eager.py`` times, so the two sides do equal work.
"""
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/, for common

import common  # noqa: E402
from minitransformer import backend  # noqa: E402

#: name -> (config, B, T). The first three are the CPU benchmarks' shapes (RESULTS.md);
#: ``medium-b256`` is the medium model at a batch that fills a GPU.
MODELS = {"small": ("small", 64, 64), "tomczak": ("tomczak", 64, 64), "medium": ("medium", 32, 128),
          "medium-b256": ("medium", 256, 128)}


def measure(name, steps=20, warmup=5):
    """Median seconds per training step of row ``name`` of :data:`MODELS`, synchronised."""
    config, B, T = MODELS[name]
    model, optimizer = common.build(common.make_config(config, T))
    ids = common.make_batch(B, T, model.config)
    for _ in range(warmup):
        common.train_step(model, optimizer, ids)
    times = [common.time_call(lambda: common.train_step(model, optimizer, ids)) for _ in range(steps)]
    return {"model": name, "config": config, "B": B, "T": T, "median_step_s": statistics.median(times),
            "tokens_per_s": B * T / statistics.median(times)}


def pool_bytes() -> int | None:
    """Bytes CuPy's memory pool holds (at least the peak in use, as the pool frees nothing)."""
    if backend.name() != "cupy":
        return None
    import cupy
    return int(cupy.get_default_memory_pool().total_bytes())


if __name__ == "__main__":
    backend.use(sys.argv[1] if len(sys.argv) > 1 else "cupy")
    print(json.dumps({"backend": backend.name(), "rows": [dict(measure(n), pool_bytes=pool_bytes()) for n in MODELS]}))
