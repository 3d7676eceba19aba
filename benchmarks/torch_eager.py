"""The PyTorch side of ``against_torch.py``: the three benchmark models in torch eager.

Run only by ``against_torch.py``, with the Python of a separate benchmark
environment that has torch (``--torch-python``). Nothing of minitransformer is
imported here, and torch appears nowhere else: not in the package, not in its tests.

The models mirror ``common.CONFIGS`` layer for layer: token and learned position
embeddings (dropout on their sum for ``tomczak``), pre- or post-LN blocks with one
fused QKV projection, ``scaled_dot_product_attention(is_causal=True)``, exact GELU,
biases everywhere, a final LayerNorm for the pre-LN models, an untied output
projection. The training step is the one of ``common.train_step``: forward, mean
cross-entropy (PAD ignored), zero_grad, backward, clip_grad_norm_(1.0), AdamW.

Prints one JSON line (see ``against_torch.py`` for the fields).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import resource
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from gemm_rates import GEMM_SHAPES, gemm_rates  # beside this file

VOCAB, PAD, BOS = 112, 0, 1
# name: (D, layers, heads, d_head, d_ff, norm, final LN, embedding dropout); as common.CONFIGS
CONFIGS = {
    "small": (64, 2, 4, 16, 256, "pre", True, 0.0),
    "tomczak": (64, 10, 4, 64, 256, "post", False, 0.1),
    "medium": (256, 4, 8, 32, 1024, "pre", True, 0.0),
}


class Block(nn.Module):
    def __init__(self, D, H, dh, dff, norm):
        super().__init__()
        self.H, self.dh, self.norm = H, dh, norm
        self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
        self.qkv, self.proj = nn.Linear(D, 3 * H * dh), nn.Linear(H * dh, D)
        self.fc1, self.fc2 = nn.Linear(D, dff), nn.Linear(dff, D)

    def attention(self, x, past=None, pos=None):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.H, self.dh).permute(2, 0, 3, 1, 4)  # (B, H, T, dh) each
        if past is None:
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # one new token at position pos: write k, v into the cache, attend to 0..pos
            past[0][:, :, pos:pos + T] = k
            past[1][:, :, pos:pos + T] = v
            o = F.scaled_dot_product_attention(q, past[0][:, :, :pos + T], past[1][:, :, :pos + T])
        return self.proj(o.transpose(1, 2).reshape(B, T, self.H * self.dh))

    def mlp(self, x):
        return self.fc2(F.gelu(self.fc1(x)))

    def forward(self, x, past=None, pos=None):
        if self.norm == "pre":
            x = x + self.attention(self.ln1(x), past, pos)
            return x + self.mlp(self.ln2(x))
        x = self.ln1(x + self.attention(x, past, pos))
        return self.ln2(x + self.mlp(x))


class DecoderLM(nn.Module):
    def __init__(self, name, max_len):
        super().__init__()
        D, L, H, dh, dff, norm, final_ln, p = CONFIGS[name]
        self.tok, self.pos = nn.Embedding(VOCAB, D), nn.Embedding(max_len, D)
        self.drop = nn.Dropout(p)
        self.blocks = nn.ModuleList(Block(D, H, dh, dff, norm) for _ in range(L))
        self.ln_f = nn.LayerNorm(D) if final_ln else None
        self.head = nn.Linear(D, VOCAB)
        self.shape = (L, H, dh)

    def forward(self, ids, cache=None, pos=0):
        T = ids.shape[1]
        x = self.drop(self.tok(ids) + self.pos(torch.arange(pos, pos + T, device=ids.device)))
        for i, block in enumerate(self.blocks):
            x = block(x, None if cache is None else cache[i], pos)
        if self.ln_f is not None:
            x = self.ln_f(x)
        return self.head(x)


def train_steps(args):
    model = DecoderLM(args.config, max(args.T, 65)).train().to(args.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    ids = rng.integers(3, VOCAB, size=(args.B, args.T + 1))
    ids[:, 0] = BOS
    ids = torch.from_numpy(ids).to(args.device)

    def step():
        logits = model(ids[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), ids[:, 1:].reshape(-1), ignore_index=PAD)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return float(loss)

    return step


def sample_run(args):
    """64 sequences x 64 new tokens with a preallocated KV cache, multinomial draws."""
    dev = args.device
    model = DecoderLM(args.config, 65).eval().to(dev)
    L, H, dh = model.shape
    B, new = 64, 64
    gen = torch.Generator(device=dev).manual_seed(0)

    @torch.inference_mode()
    def run():
        cache = [(torch.empty(B, H, 1 + new, dh, device=dev), torch.empty(B, H, 1 + new, dh, device=dev))
                 for _ in range(L)]
        tok = torch.full((B, 1), BOS, dtype=torch.long, device=dev)
        out = [tok]
        for pos in range(new):
            logits = model(tok, cache, pos)[:, -1]  # (B, V)
            logits[:, (PAD, BOS)] = -math.inf  # never PAD or BOS inside a sequence, as ours
            tok = torch.multinomial(torch.softmax(logits, -1), 1, generator=gen)  # (B, 1)
            out.append(tok)
        return torch.cat(out, 1)

    return run


def tiny_step():
    """One AdamW training step of a D = 8, one-layer model."""
    model = nn.Sequential(nn.Embedding(VOCAB, 8), Block(8, 2, 4, 16, "pre"), nn.LayerNorm(8), nn.Linear(8, VOCAB))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(3, VOCAB, (4, 8))
    loss = F.cross_entropy(model(ids[:, :-1]).reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()


def rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def torch_runtime() -> dict:
    """What torch runs on this CPU: its BLAS (from ``torch.__config__.show()``), the CPU
    capability its own kernels use, and whether MKL's Intel check was overridden (LD_PRELOAD)."""
    blas = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    return {"blas": blas.group(1) if blas else None, "mkl": torch.backends.mkl.is_available(),
            "cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "preload": os.path.basename(os.environ["LD_PRELOAD"]) if os.environ.get("LD_PRELOAD") else None}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--task", choices=("train", "sample", "gemms"), required=True)
    p.add_argument("--config", choices=list(CONFIGS), required=True)
    p.add_argument("--B", type=int, default=64)
    p.add_argument("--T", type=int, default=64)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", help="cpu (default) or cuda (benchmarks/gpu: the same card as CuPy)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if args.task == "gemms":
        print(json.dumps({"side": "torch", "shapes": GEMM_SHAPES, "runtime": torch_runtime(),
                          "gflops": gemm_rates(torch.matmul, lambda m, n: torch.rand(m, n))}))
        return
    imported = rss_mb()
    tiny_step()  # loads the runtime (thread pools, allocator), as against_torch.py's own side does
    base = rss_mb()
    fn = train_steps(args) if args.task == "train" else sample_run(args)
    cuda = args.device.startswith("cuda")
    sync = torch.cuda.synchronize if cuda else (lambda: None)  # time the device's work, not the launches
    for _ in range(args.warmup):
        fn()
    times = []
    for _ in range(args.steps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"side": "torch", "version": torch.__version__, "times": times, "device": args.device,
                      "runtime": torch_runtime(),
                      "gpu_name": torch.cuda.get_device_name() if cuda else None,
                      "peak_gpu_bytes": torch.cuda.max_memory_allocated() if cuda else None,
                      "imported_rss_mb": imported, "base_rss_mb": base, "peak_rss_mb": peak,
                      "threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
