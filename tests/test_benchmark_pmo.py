"""benchmarks/pmo.py runs PMO's protocol end to end on a tiny prior: the budget is kept, the AUC is the
oracle's, and the table sits beside the published rows."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(os.environ.get("MINITRANSFORMER_KERNELS", "fast") == "reference",
                                reason="the benchmark script is checked once, in the fast-kernel pass")


def test_the_pmo_benchmark_runs_a_small_budget(tmp_path):
    """With augmented memory (the replay baseline shares every other line)."""
    pytest.importorskip("rdkit")
    from minitransformer.checkpoint import save_checkpoint
    from minitransformer.chem import Vocab
    from minitransformer.models import DecoderLM, DecoderLMConfig
    vocab = Vocab.build(["CCO", "c1ccccc1", "CC(=O)N", "CCCl", "C#N", "CCN(C)C=O"])
    prior = DecoderLM(DecoderLMConfig(len(vocab), n_layers=1, d_model=16, n_heads=2, d_ff=32, max_len=24,
                                      pad_id=vocab.pad_id, bos_id=vocab.bos_id, eos_id=vocab.eos_id, seed=0))
    save_checkpoint(tmp_path / "prior.npz", prior, vocab=vocab)
    out = tmp_path / "pmo.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pmo.py"), "--prior", str(tmp_path / "prior.npz"),
                           "--tasks", "qed,isomers_c7h8n2o2", "--budget", "40", "--batch-size", "16",
                           "--patience", "3", "--max-steps", "30", "--json", str(out), "--threads", "1",
                           "--memory", "augmented"],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert [r["task"] for r in report["runs"]] == ["qed", "isomers_c7h8n2o2"]
    for r in report["runs"]:
        assert 0 < r["calls"] <= 40 and r["stop"] in ("budget", "patience", "max_steps")
        assert 0.0 <= r["auc_top10"] <= r["top10_mean"] <= r["top1"] <= 1.0
        assert r["curve"] == [], "the top-10 mean is logged every 100 calls: none within 40"
    assert "REINVENT (PMO)" in report["table"] and "0.941" in report["table"], "qed's published REINVENT row"
