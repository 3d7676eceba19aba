"""``minitransformer info``: what a checkpoint holds and where it came from.

A checkpoint carries its model's type and configuration, its vocabulary, the
trainer's position (epoch, step, best validation metric) and the run's
settings and data fingerprint. The run folder beside it adds ``metrics.json``
(the test results) and ``provenance.json`` (versions, commit, command line,
data checksum). ``info`` reads all of that without building the model, and
prints it as text or, with ``--json``, as one JSON object.
"""
from __future__ import annotations

import json
import sys
from minitransformer.atomic import parse_json
from pathlib import Path


def add_parser(commands):
    from minitransformer import cli
    p = cli.add_command(commands, "info", help="describe a checkpoint: model, vocabulary, data, metrics, provenance",
                        example="minitransformer info runs/lm/best.npz\n"
                                "minitransformer info runs/lm/best.npz --json > info.json")
    p.add_argument("checkpoint", type=cli.existing_file("checkpoint"), help="a .npz checkpoint")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(run=run)
    return p


def _read_json(path: Path):
    try:
        return parse_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def describe(path) -> dict:
    """Everything ``info`` reports about the checkpoint at ``path``, as JSON-ready data.

    The checkpoint is checked as ``sample`` and ``translate`` check it (the model is built
    from its config and every weight's shape compared), so a forged or damaged file that
    they refuse is refused here too, rather than described."""
    from minitransformer.checkpoint import model_from_checkpoint
    _, ckpt = model_from_checkpoint(path)
    meta, folder = ckpt.meta, Path(path).resolve().parent
    vocab = ckpt.vocab if isinstance(ckpt.vocab, dict) else {}
    trainer = meta.get("trainer") if isinstance(meta.get("trainer"), dict) else {}
    run = meta.get("run") if isinstance(meta.get("run"), dict) else {}
    if (folder / "metrics.json").is_file() or (folder / "provenance.json").is_file():
        run_folder = folder
    elif (folder.parent / "provenance.json").is_file():  # pretrain/last.npz: the run folder is one up
        run_folder = folder.parent
    else:
        run_folder = None
    n_weights = int(sum(w.size for w in ckpt.weights.values()))
    provenance = _read_json(run_folder / "provenance.json") if run_folder else None
    metrics = _read_json(run_folder / "metrics.json") if run_folder else None
    made = (provenance.get("data") or {}).get("molecules_sha256") if isinstance(provenance, dict) else None
    if made is not None and run.get("data_sha256") not in (None, made):  # another run's folder
        provenance = metrics = None
    if isinstance(metrics, dict) and (meta.get("phase") == "pretrain" or metrics.get("parameters") not in
                                      (None, n_weights)):  # the results of the run's final model, not this one
        metrics = None
    return {
        "file": str(path),
        "model": {"type": ckpt.model_type, "parameters": n_weights,
                  "config": ckpt.config},
        "vocabulary": {"size": len(vocab.get("tokens", [])), "tokens": vocab.get("tokens")} if vocab else None,
        "training": {"phase": meta.get("phase"), "epoch": trainer.get("epoch"), "step": trainer.get("step"),
                     "best": trainer.get("best"), "best_epoch": trainer.get("best_epoch"),
                     "has_optimizer_state": meta.get("optimizer") is not None},
        "data": {k: run.get(k) for k in ("data", "data_sha256", "split", "sizes", "tasks", "cleaning")
                 if k in run},
        "settings": run.get("settings"),
        "metrics": metrics,
        "provenance": provenance,
    }


def _text(d: dict) -> str:
    m, t, v = d["model"], d["training"], d["vocabulary"]
    lines = [f"checkpoint   {d['file']}",
             f"model        {m['type']}, {m['parameters']:,} weights"]
    cfg = m["config"] or {}
    shape = ", ".join(f"{k}={cfg[k]}" for k in ("d_model", "n_heads", "n_layers", "n_enc_layers", "n_dec_layers",
                                                  "d_ff", "max_len", "norm", "pos") if k in cfg)
    if shape:
        lines.append(f"             {shape}")
    if v:
        shown = " ".join(v["tokens"][:30]) + (" ..." if v["size"] > 30 else "")
        lines.append(f"vocabulary   {v['size']} tokens: {shown}")
    if t["epoch"] is not None:
        best = f", best {t['best']:.4g} at epoch {t['best_epoch']}" if isinstance(t["best"], (int, float)) else ""
        lines.append(f"training     {t['phase'] or 'train'} phase, epoch {t['epoch']}, step {t['step']}{best}")
    for key, value in d["data"].items():
        lines.append(f"{'data' if key == 'data' else '  ' + key:<12} {value}")
    if d["metrics"]:
        shown = _headline_numbers(d["metrics"])
        lines.append("metrics      " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                              for k, v in list(shown.items())[:16]))
    p = d["provenance"]
    if p:
        ver = p.get("versions", {})
        lines.append(f"made by      {' '.join(p.get('command', []))}")
        lines.append(f"             minitransformer {ver.get('minitransformer')}, commit {p.get('git_commit')}, "
                     f"Python {ver.get('python')}, NumPy {ver.get('numpy')}, RDKit {ver.get('rdkit')}, "
                     f"BLAS {ver.get('blas')}, seed {p.get('seed')}, started {p.get('started')}")
        if ver.get("runtime"):
            from minitransformer.runtime import summary_line
            lines.append(f"             ran with {summary_line(ver['runtime'])}")
        data = p.get("data") or {}
        if data.get("file_sha256"):
            lines.append(f"             data file {data.get('file')} sha256 {data['file_sha256'][:16]}...")
    return "\n".join(lines) + "\n"


def _headline_numbers(metrics: dict) -> dict:
    """The numbers of ``metrics.json`` worth a line: for each labelled sample set of a generator
    (``bare``, ``valence``, ``syntax``) its validity, uniqueness, novelty and FCD, as
    ``bare.validity`` ..., then the top-level numbers."""
    def number(v):
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    shown = {}
    for label in ("bare", "valence", "syntax"):
        part = metrics.get(label)
        if isinstance(part, dict):
            shown.update({f"{label}.{k}": part[k] for k in ("validity", "uniqueness", "novelty") if number(part.get(k))})
            shown.update({f"{label}.fcd_{k}": v for k, v in (part.get("fcd") or {}).items() if number(v)})
    return shown | {k: v for k, v in metrics.items() if number(v)}


def run(args) -> int:
    from minitransformer.cli.outputs import json_safe
    d = describe(args.checkpoint)
    sys.stdout.write(json.dumps(json_safe(d), indent=1) + "\n" if args.json else _text(d))
    return 0
