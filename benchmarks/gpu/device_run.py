"""Issue 29's device run, as one prepared script: prove the GPU path and measure it, in parts.

Run from the repository root::

    python benchmarks/gpu/device_run.py --backend cupy --out $OUT          # on the GPU machine
    python benchmarks/gpu/device_run.py --backend strict --quick --out out  # the dry run, on any CPU

``--backend strict`` runs every part on the strict CPU stand-in for CuPy
(:mod:`minitransformer.testing.strict`), so CI keeps the script working and the
dry run says how long each part takes. The parts (``--parts``, in this order):

``env``       the device, CuPy and NumPy versions, and what runs (``runtime.summary_line``);
``tests``     the GPU tests (``-m gpu tests/test_gpu.py``: kernels against NumPy, a step that
              never synchronises, the NCCL all-reduce with one rank) and the model-level tests
              run on the backend (``MINITRANSFORMER_BACKEND``): gradient checks, KV cache = full
              forward, one seed = the same weights, checkpoints across backends;
``speed``     training tokens/s of the small, tomczak and medium models (float32, fast kernels),
              with the peak memory, and PyTorch eager on the same device in the same run
              (``--torch-python``, default: this Python, if it has torch);
``sampling``  KV-cached sampling, 64 sequences x 64 new tokens, ours and PyTorch's;
``molecules`` ``minitransformer train lm`` on the backend with a time budget (needs RDKit).

A part that fails is recorded with its error, and the next part runs. Writes
``device_run.json`` and ``device_run.md`` under ``--out``; prints the Markdown.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

PARTS = ("env", "tests", "speed", "sampling", "molecules")
MODEL_TESTS = ("tests/test_backend_rng.py", "tests/models/test_model_gradients.py",
               "tests/models/test_model_decoder_lm.py")


def _run(cmd, timeout, env=None) -> dict:
    """A subprocess: its exit code, the tail of its output, and its wall time."""
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env=dict(os.environ, **(env or {})))
        rc, out = done.returncode, (done.stdout + done.stderr)
    except subprocess.TimeoutExpired as exc:
        rc, out = "timeout", f"{exc}"
    return {"rc": rc, "tail": out[-3000:], "seconds": round(time.perf_counter() - t0, 1)}


def part_env(args) -> dict:
    import numpy as np

    from minitransformer import backend, runtime
    backend.use(args.backend)
    info = {"backend": backend.name(), "numpy": np.__version__, "runtime": runtime.summary_line()}
    if args.backend == "cupy":
        import cupy
        info.update(cupy=cupy.__version__, device=cupy.cuda.runtime.getDeviceProperties(0)["name"].decode())
    else:
        info["device"] = "the strict CPU stand-in for CuPy"
    return info


def part_tests(args) -> dict:
    py = sys.executable
    out = {}
    if args.backend == "cupy":
        out["gpu"] = _run([py, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "tests/test_gpu.py"],
                          args.timeout)
    select = ["-k", "not hypothesis"] if args.quick else []
    out["models"] = _run([py, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *select, *MODEL_TESTS],
                         args.timeout, env={"MINITRANSFORMER_BACKEND": args.backend, "PYTHONPATH": str(ROOT)})
    out["passed"] = all(r["rc"] == 0 for r in out.values() if isinstance(r, dict))
    return out


@functools.lru_cache(maxsize=None)
def _torch_python(given: str | None) -> str | None:
    """The Python that has torch: ``--torch-python``, else this one if it imports torch (asked once)."""
    if given:
        return given
    done = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True)
    return sys.executable if done.returncode == 0 else None


def _torch(args, task: str, config: str, B: int, T: int) -> dict:
    """PyTorch eager on the same device (cuda under CuPy; the CPU in the dry run)."""
    py = _torch_python(args.torch_python)
    if py is None:
        return {"skipped": "no Python with torch (--torch-python)"}
    device = "cuda" if args.backend == "cupy" else "cpu"
    steps, warmup = (3, 1) if args.quick else (20, 5)
    r = _run([py, str(ROOT / "benchmarks" / "torch_eager.py"), "--task", task, "--config", config, "--B", str(B),
              "--T", str(T), "--steps", str(steps), "--warmup", str(warmup), "--device", device], args.timeout)
    if r["rc"] != 0:
        return {"error": r["tail"][-500:]}
    row = json.loads(r["tail"].strip().splitlines()[-1])
    return {"median_s": statistics.median(row["times"]), "version": row["version"], "device": device,
            "peak_gpu_bytes": row.get("peak_gpu_bytes")}


def _peak_bytes() -> int | None:
    from minitransformer import backend
    if backend.name() != "cupy":
        return None
    import cupy
    return int(cupy.get_default_memory_pool().total_bytes())


def part_speed(args) -> dict:
    import speed  # benchmarks/gpu/speed.py

    from minitransformer import backend
    backend.use(args.backend)
    rows = []
    for name in (("small",) if args.quick else tuple(speed.MODELS)):
        steps, warmup = (3, 1) if args.quick else (20, 5)
        ours = speed.measure(name, steps=steps, warmup=warmup)
        _, B, T = speed.MODELS[name]
        theirs = _torch(args, "train", name, B, T)
        ratio = theirs["median_s"] / ours["median_step_s"] if "median_s" in theirs else None
        rows.append({**ours, "peak_bytes": _peak_bytes(), "torch": theirs, "ours_over_torch": ratio})
    return {"rows": rows}


def part_sampling(args) -> dict:
    import speed  # benchmarks/gpu/speed.py

    from minitransformer import backend
    from minitransformer.generate import sample
    from minitransformer.models import DecoderLM
    backend.use(args.backend)
    rows = []
    for name in (("small",) if args.quick else tuple(speed.MODELS)):
        model = DecoderLM(speed.config(name)).eval()
        times = []
        for i in range(2 if args.quick else 4):
            backend.synchronize()
            t0 = time.perf_counter()
            sample(model, batch_size=64, max_len=65, rng=i, use_cache=True)
            backend.synchronize()
            times.append(time.perf_counter() - t0)
        ours = statistics.median(times[1:])
        theirs = _torch(args, "sample", name, 64, 64)
        rows.append({"model": name, "ours_s": ours, "tokens_per_s": 64 * 64 / ours, "torch": theirs,
                     "ours_over_torch": theirs["median_s"] / ours if "median_s" in theirs else None})
    return {"rows": rows}


def part_molecules(args) -> dict:
    try:
        import rdkit  # noqa: F401
    except ImportError:
        return {"skipped": "RDKit is not installed here (bring its wheel with the working tree)"}
    minutes = "0.3" if args.quick else str(args.minutes)
    cmd = [sys.executable, "-m", "minitransformer", "train", "lm", "--out", str(Path(args.out) / "lm"), "--force",
           "--max-minutes", minutes, "--quiet"] + (["--quick"] if args.quick else [])
    backend_env = {"MINITRANSFORMER_BACKEND": args.backend, "PYTHONPATH": str(ROOT)}
    r = _run(cmd, args.timeout, env=backend_env)
    metrics_file = Path(args.out) / "lm" / "metrics.json"
    if metrics_file.is_file():
        m = json.loads(metrics_file.read_text())
        r["metrics"] = {label: {k: m[label].get(k) for k in ("validity", "uniqueness", "novelty", "fcd")}
                        for label in ("bare", "valence") if isinstance(m.get(label), dict)}
    return r


def markdown(report: dict) -> str:
    lines = [f"# Device run ({report['parts'].get('env', {}).get('device', '?')})", ""]
    for name, part in report["parts"].items():
        lines.append(f"- **{name}**: {report['seconds'][name]} s" + (f", error: {part['error']}" if "error" in part
                                                                     else ""))
    for key, title in (("speed", "Training speed"), ("sampling", "KV-cached sampling")):
        rows = report["parts"].get(key, {}).get("rows") or []
        if rows:
            lines += ["", f"## {title}", "", "| model | ours (s) | torch (s) | ours / torch speed |", "|---|---:|---:|---:|"]
            for r in rows:
                ours = r.get("median_step_s", r.get("ours_s"))
                theirs = r["torch"].get("median_s")
                ratio = r.get("ours_over_torch")
                lines.append(f"| {r['model']} | {ours:.4f} | {'n/a' if theirs is None else f'{theirs:.4f}'} | "
                             f"{'n/a' if ratio is None else f'{ratio:.2f}'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("cupy", "strict"), default="cupy")
    p.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    p.add_argument("--parts", type=lambda s: s.split(","), default=list(PARTS))
    p.add_argument("--quick", action="store_true", help="one small model, few steps (the CI dry run)")
    p.add_argument("--torch-python", default=None, help="a Python with torch (default: this one, if it has it)")
    p.add_argument("--minutes", type=float, default=3.0, help="training budget of the molecules part")
    p.add_argument("--timeout", type=int, default=300, help="seconds any one subprocess may take")
    args = p.parse_args(argv)
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        p.error(f"unknown part(s) {unknown}; choose from {', '.join(PARTS)}")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    report = {"backend": args.backend, "quick": args.quick, "parts": {}, "seconds": {}}
    for name in (n for n in PARTS if n in args.parts):
        t0 = time.perf_counter()
        try:
            report["parts"][name] = globals()[f"part_{name}"](args)
        except Exception as exc:  # record it and go on: one broken part must not cost the others
            report["parts"][name] = {"error": f"{type(exc).__name__}: {exc}"}
        report["seconds"][name] = round(time.perf_counter() - t0, 1)
        print(f"{name}: {report['seconds'][name]} s", flush=True)
    (Path(args.out) / "device_run.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    text = markdown(report)
    (Path(args.out) / "device_run.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
