"""Training tokens/s of our models on the active backend (CuPy on a GPU), float32, with the
peak GPU memory: the first, minimal part of issue 29's device run. Prints one JSON line."""
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import numpy as np  # noqa: E402

from minitransformer import backend  # noqa: E402
from minitransformer.models import DecoderLM, DecoderLMConfig  # noqa: E402
from minitransformer.optim import AdamW  # noqa: E402
from minitransformer.train.tasks import LMTask  # noqa: E402

MODELS = {  # as benchmarks/compare_revisions.py
    "small": (dict(d_model=64, n_heads=4, n_layers=2, d_ff=256, norm="pre", activation="gelu"), 64, 64),
    "tomczak": ("tomczak", 64, 64),
    "medium": (dict(d_model=256, n_heads=8, n_layers=4, d_ff=1024, norm="pre", activation="gelu"), 32, 128),
}


def config(name) -> DecoderLMConfig:
    """The named model, with room for its T and for 64 sampled tokens after BOS."""
    spec, _, T = MODELS[name]
    if spec == "tomczak":
        return DecoderLMConfig.tomczak(vocab_size=112, max_len=max(T, 65))
    return DecoderLMConfig(vocab_size=112, max_len=max(T, 65), **spec)


def measure(name, steps=20, warmup=5):
    _, B, T = MODELS[name]
    cfg = config(name)
    model, task = DecoderLM(cfg), LMTask(pad_id=cfg.pad_id)
    opt = AdamW(model, lr=1e-3)
    batch = np.random.default_rng(0).integers(3, 112, size=(B, T + 1), dtype=np.int64)
    batch[:, 0] = cfg.bos_id
    times = []
    for i in range(warmup + steps):
        backend.synchronize()
        t0 = time.perf_counter()
        model.zero_grad()
        task.loss(model, batch)
        task.backward(model)
        opt.step()
        backend.synchronize()
        if i >= warmup:
            times.append(time.perf_counter() - t0)
    return {"model": name, "B": B, "T": T, "median_step_s": statistics.median(times),
            "tokens_per_s": B * T / statistics.median(times)}


if __name__ == "__main__":
    backend.use(sys.argv[1] if len(sys.argv) > 1 else "cupy")
    rows = [measure(n) for n in MODELS]
    out = {"backend": backend.name(), "rows": rows}
    if backend.name() == "cupy":
        import cupy
        out["device"] = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
        out["peak_pool_bytes"] = cupy.get_default_memory_pool().total_bytes()
    print(json.dumps(out))
