"""The GPU device run, as one prepared script: prove the GPU path and measure it, in parts.

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
              with the fused CUDA kernels of ``fast/engine/cuda.py`` off and on, Adam and the clipping
              per tensor and over the flat layout (``MINITRANSFORMER_FLAT``), the peak memory,
              and PyTorch eager on the same device in the same run (``--torch-python``,
              default: this Python, if it has torch);
``graph``     the same step replayed as one CUDA graph (an experiment: what launches cost);
``sampling``  KV-cached sampling, 64 sequences x 64 new tokens, ours and PyTorch's;
``profile``   where a training step's device time goes, kernel by kernel (small and medium);
``molecules`` ``minitransformer train lm`` on the backend with a time budget, the default
              recipe and a larger model side by side (needs RDKit; ``--data`` the folder of
              Tox21, MOSES and ChemNet's weights, as ``$MINITRANSFORMER_DATA``).

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
sys.path.insert(1, str(HERE.parent))  # benchmarks/: common, profile_step

PARTS = ("env", "tests", "speed", "graph", "sampling", "profile", "molecules")
MODEL_TESTS = ("tests/test_backend_rng.py", "tests/models/test_model_gradients.py",
               "tests/models/test_model_decoder_lm.py")


def _env(**extra) -> dict:
    """This process's environment with ``extra``, and the repository first on PYTHONPATH
    (kept after it: where wheels brought along, RDKit's, were installed)."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return dict(os.environ, PYTHONPATH=path, **extra)


def _run(cmd, timeout, env=None) -> dict:
    """A subprocess: its exit code, the tail of its output (stdout, then stderr), its last
    line on stdout (where the measuring scripts print their JSON), and its wall time."""
    t0 = time.perf_counter()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                              env=_env(**(env or {})))
        rc, out, last = done.returncode, (done.stdout + done.stderr), (done.stdout.strip().splitlines() or [""])[-1]
    except subprocess.TimeoutExpired as exc:
        rc, out, last = "timeout", f"{exc}", ""
    return {"rc": rc, "tail": out[-6000:], "last": last, "seconds": round(time.perf_counter() - t0, 1)}


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
        out["gpu"] = _run([py, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider", "-o", "addopts=",
                           "--tb=short", "-rf", "tests/"], args.timeout)  # failures' reasons in the tail
    select = ["-k", "not hypothesis"] if args.quick else []
    out["models"] = _run([py, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *select, *MODEL_TESTS],
                         args.timeout, env={"MINITRANSFORMER_BACKEND": args.backend})
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
    row = json.loads(r["last"])  # a warning on stderr comes after it in the tail
    return {"median_s": statistics.median(row["times"]), "version": row["version"], "device": device,
            "peak_gpu_bytes": row.get("peak_gpu_bytes")}


def part_speed(args) -> dict:
    import speed  # benchmarks/gpu/speed.py

    from minitransformer import backend
    backend.use(args.backend)
    rows = []
    for name in (("small",) if args.quick else tuple(speed.MODELS)):
        steps, warmup = (3, 1) if args.quick else (20, 5)
        os.environ["MINITRANSFORMER_CUDA_KERNELS"] = "0"  # CuPy's operator chains, side by side
        unfused = speed.measure(name, steps=steps, warmup=warmup)["median_step_s"]
        os.environ["MINITRANSFORMER_CUDA_KERNELS"] = "1"  # the fused kernels (fast/engine/cuda.py)
        os.environ["MINITRANSFORMER_FLAT"] = "0"  # Adam and the clipping once per tensor
        per_tensor = speed.measure(name, steps=steps, warmup=warmup)["median_step_s"]
        os.environ["MINITRANSFORMER_FLAT"] = "1"  # once for all tensors (fast/engine/flat.py, fast/engine/cuda_flat.py)
        ours = speed.measure(name, steps=steps, warmup=warmup)
        theirs = _torch(args, "train", ours["config"], ours["B"], ours["T"])
        ratio = theirs["median_s"] / ours["median_step_s"] if "median_s" in theirs else None
        rows.append({**ours, "unfused_step_s": unfused, "per_tensor_step_s": per_tensor, "pool_bytes": speed.pool_bytes(), "torch": theirs,
                     "ours_over_torch": ratio})
    return {"rows": rows}


def part_graph(args) -> dict:
    """The training step replayed as one CUDA graph (an experiment: how much is launches)."""
    if args.backend != "cupy":
        return {"skipped": "CUDA graphs need CuPy"}
    import speed  # benchmarks/gpu/speed.py

    from minitransformer import backend
    backend.use(args.backend)
    return {"rows": [speed.measure_graph(name) for name in speed.MODELS]}


def part_sampling(args) -> dict:
    import common  # benchmarks/common.py

    from minitransformer import backend
    from minitransformer.generate import sample
    backend.use(args.backend)
    rows = []
    for name in (("small",) if args.quick else tuple(common.CONFIGS)):
        model = common.sampling_model(name).eval()  # EOS never drawn: 64 new tokens a row, as torch's
        times = []
        for i in range(2 if args.quick else 4):
            times.append(common.time_call(lambda: sample(model, batch_size=common.SAMPLE_BATCH,
                                                         max_len=common.SAMPLE_MAX_LEN, rng=i, use_cache=True)))
        ours = statistics.median(times[1:])
        theirs = _torch(args, "sample", name, common.SAMPLE_BATCH, common.SAMPLE_NEW)
        rows.append({"model": name, "ours_s": ours, "tokens_per_s": common.SAMPLE_BATCH * common.SAMPLE_NEW / ours,
                     "torch": theirs, "ours_over_torch": theirs["median_s"] / ours if "median_s" in theirs else None})
    return {"rows": rows}


def part_profile(args) -> dict:
    """Per-kernel device time of one training step (benchmarks/profile_step.py, each kernel
    timed between two synchronisations), and the plain step beside it."""
    import profile_step  # benchmarks/profile_step.py

    from minitransformer import backend, devices
    backend.use(args.backend)
    settings = argparse.Namespace(warmup=1 if args.quick else 3, repeats=2 if args.quick else 10)
    rows = []
    for name in (("small",) if args.quick else ("small", "medium")):
        B, T = profile_step.SHAPE[name]
        rows.append(profile_step.profile(name, B, T, settings, sync=devices.synchronize))
    return {"rows": rows, "markdown": "\n".join(profile_step.markdown(r) for r in rows)}


def _one(value):
    """A metric's number: FCD is a {reference set: value} dict with one entry here."""
    return next(iter(value.values()), None) if isinstance(value, dict) else value


#: The molecules part's runs: the default recipe, and a larger model in the same minutes.
MOLECULE_RUNS = {"default": [], "larger": ["--d-model", "256", "--n-layers", "6"]}


def part_molecules(args) -> dict:
    """``train lm`` with a time budget, the default recipe and a larger model side by side
    (two processes sharing the device: each is launch-bound, so neither fills it)."""
    try:
        import rdkit  # noqa: F401
    except ImportError:
        return {"skipped": "RDKit is not installed here (bring its wheel with the working tree)"}
    env = {"MINITRANSFORMER_BACKEND": args.backend}
    if args.data:
        env["MINITRANSFORMER_DATA"] = str(Path(args.data).resolve())
    budget = ["--quick", "--max-minutes", "0.3"] if args.quick else [
        "--max-minutes", str(args.minutes), "--pretrain-minutes", str(args.pretrain_minutes)]
    runs = {"default": []} if args.quick else MOLECULE_RUNS
    procs = {}
    for label, changes in runs.items():
        out = Path(args.work or args.out) / f"lm-{label}"
        cmd = [sys.executable, "-m", "minitransformer", "train", "lm", "--out", str(out), "--force", "--quiet",
               *budget, *changes]
        log = open(out.parent / f"lm-{label}.log", "w")
        procs[label] = (subprocess.Popen(cmd, cwd=ROOT, env=_env(**env), stdout=log,
                                         stderr=subprocess.STDOUT), log, out, time.perf_counter())
    report = {}
    for label, (proc, log, out, t0) in procs.items():
        try:
            rc = proc.wait(timeout=args.timeout * 2)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "timeout"
        log.close()
        r = {"args": runs[label], "rc": rc, "seconds": round(time.perf_counter() - t0, 1),
             "tail": Path(log.name).read_text()[-1500:]}
        metrics_file = out / "metrics.json"
        if metrics_file.is_file():
            m = json.loads(metrics_file.read_text())
            r["metrics"] = {sampler: {k: _one(m[sampler].get(k)) for k in ("validity", "uniqueness", "novelty", "fcd")}
                            for sampler in ("bare", "valence") if isinstance(m.get(sampler), dict)}
            r["fcd_floor"] = _one(m.get("fcd_floor"))
            r["summary"] = {k: v for k, v in m.items() if not isinstance(v, (dict, list))}
        report[label] = r
    return {"runs": report}


def _cell(value, digits: int = 4) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def markdown(report: dict) -> str:
    lines = [f"# Device run ({report['parts'].get('env', {}).get('device', '?')})", ""]
    for name, part in report["parts"].items():
        lines.append(f"- **{name}**: {report['seconds'][name]} s" + (f", error: {part['error']}" if "error" in part
                                                                     else ""))
    for key, title in (("speed", "Training speed"), ("sampling", "KV-cached sampling")):
        rows = report["parts"].get(key, {}).get("rows") or []
        if rows:
            lines += ["", f"## {title}", "", "| model | ours, unfused (s) | ours, Adam per tensor (s) | ours (s) | "
                      "torch (s) | ours / torch speed |", "|---|---:|---:|---:|---:|---:|"]
            for r in rows:
                ours = r.get("median_step_s", r.get("ours_s"))
                unfused, per_tensor = (_cell(r.get(k)) for k in ("unfused_step_s", "per_tensor_step_s"))
                theirs, ratio = _cell(r["torch"].get("median_s")), _cell(r.get("ours_over_torch"), 2)
                lines.append(f"| {r['model']} | {unfused} | {per_tensor} | {ours:.4f} | {theirs} | {ratio} |")
    graphs = report["parts"].get("graph", {}).get("rows") or []
    if graphs:
        lines += ["", "## The step as one CUDA graph (experiment)", "", "| model | replay (s) | or: why not |",
                  "|---|---:|---|"]
        for r in graphs:
            step = r.get("graph_step_s")
            lines.append(f"| {r['model']} | {'n/a' if step is None else f'{step:.4f}'} | {r.get('graph_error', '')} |")
    profile = report["parts"].get("profile", {}).get("markdown")
    if profile:
        lines += ["", "## Where a step's device time goes", "", profile]
    runs = report["parts"].get("molecules", {}).get("runs") or {}
    if runs:
        lines += ["", "## Molecules (train lm on the device)", "",
                  "| run | args | rc | seconds | sampler | validity | uniqueness | novelty | FCD |",
                  "|---|---|---|---:|---|---:|---:|---:|---:|"]
        for label, r in runs.items():
            for sampler, m in (r.get("metrics") or {"-": {}}).items():
                cells = [m.get(k) for k in ("validity", "uniqueness", "novelty", "fcd")]
                lines.append(f"| {label} | {' '.join(r['args']) or '(recipe)'} | {r['rc']} | {r['seconds']} | "
                             f"{sampler} | " + " | ".join("n/a" if c is None else f"{c:.3f}" for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backend", choices=("cupy", "strict"), default="cupy")
    p.add_argument("--out", default=os.environ.get("OUT", "gpu-out"))
    p.add_argument("--parts", type=lambda s: s.split(","), default=list(PARTS))
    p.add_argument("--quick", action="store_true", help="one small model, few steps (the CI dry run)")
    p.add_argument("--torch-python", default=None, help="a Python with torch (default: this one, if it has it)")
    p.add_argument("--minutes", type=float, default=3.0, help="training budget of each molecules run, "
                   "pretraining included")
    p.add_argument("--pretrain-minutes", type=float, default=1.25, help="of which pretraining (on MOSES)")
    p.add_argument("--work", default=None, help="where the molecules part's run folders go (default: --out; "
                   "the device machine sends back only 8 files)")
    p.add_argument("--data", default=os.environ.get("MINITRANSFORMER_DATA"),
                   help="the data folder of the molecules part (tox21.csv.gz, moses/, chemnet/)")
    p.add_argument("--timeout", type=int, default=300, help="seconds any one subprocess may take")
    args = p.parse_args(argv)
    unknown = sorted(set(args.parts) - set(PARTS))
    if unknown:
        p.error(f"unknown part(s) {unknown}; choose from {', '.join(PARTS)}")
    for folder in (args.out, args.work):
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
    report = {"backend": args.backend, "quick": args.quick, "parts": {}, "seconds": {}}
    for name in (n for n in PARTS if n in args.parts):
        t0 = time.perf_counter()
        try:
            report["parts"][name] = globals()[f"part_{name}"](args)
        except Exception as exc:  # record it and go on: one broken part must not cost the others
            report["parts"][name] = {"error": f"{type(exc).__name__}: {exc}"}
        report["seconds"][name] = round(time.perf_counter() - t0, 1)
        print(f"{name}: {report['seconds'][name]} s", flush=True)
        # after every part: a run cut off by its time limit keeps the parts it finished
        (Path(args.out) / "device_run.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    text = markdown(report)
    (Path(args.out) / "device_run.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
