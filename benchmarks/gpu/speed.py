"""Training tokens/s of our models on the active backend (CuPy on a GPU), float32, with the
GPU memory held: the speed part of the GPU device run. Prints one JSON line.

The models and the step are ``benchmarks/common.py``'s (forward, cross-entropy, backward,
clipping, Adam), the same step ``torch_eager.py`` times, so the two sides do equal work.
"""
import json
import statistics
import sys
import time
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


def measure_graph(name, steps=20, warmup=5):
    """The same step replayed as one CUDA graph (CuPy's stream capture): how much of the
    step is launch overhead. An experiment, not a way to train: the captured Adam step
    keeps the step number of its capture (its bias corrections), and nothing checks that
    replays match eager steps. Returns the median replay time, or why capture failed."""
    import cupy
    config, B, T = MODELS[name]
    model, optimizer = common.build(common.make_config(config, T))
    ids = common.make_batch(B, T, model.config)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:  # CuPy's memory pool is per stream: warm it on the capture stream
        for _ in range(warmup):
            common.train_step(model, optimizer, ids)
        stream.synchronize()
        try:
            stream.begin_capture()
            try:
                common.train_step(model, optimizer, ids)
            finally:
                graph = stream.end_capture()
        except Exception as exc:  # noqa: BLE001 - the reason is the result
            return {"model": name, "graph_error": f"{type(exc).__name__}: {exc}"[:300]}
        graph.launch(stream)
        stream.synchronize()
        times = []
        for _ in range(steps):
            t0 = time.perf_counter()
            graph.launch(stream)
            stream.synchronize()
            times.append(time.perf_counter() - t0)
    return {"model": name, "graph_step_s": statistics.median(times), "graph_tokens_per_s": B * T / statistics.median(times)}


def pool_bytes() -> int | None:
    """Bytes CuPy's memory pool holds (at least the peak in use, as the pool frees nothing)."""
    if backend.name() != "cupy":
        return None
    import cupy
    return int(cupy.get_default_memory_pool().total_bytes())


if __name__ == "__main__":
    backend.use(sys.argv[1] if len(sys.argv) > 1 else "cupy")
    print(json.dumps({"backend": backend.name(), "rows": [dict(measure(n), pool_bytes=pool_bytes()) for n in MODELS]}))
