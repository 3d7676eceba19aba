"""The GPU machine's prepared script (benchmarks/gpu/device_run.py) runs on the strict CPU
stand-in for CuPy, so CI keeps it working before a GPU is lent, and says how long each part took."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(os.environ.get("MINITRANSFORMER_KERNELS", "fast") == "reference",
                                reason="the device script is checked once, in the fast-kernel pass")


def test_the_device_run_works_on_the_strict_stand_in(tmp_path):
    pytest.importorskip("rdkit")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "device_run.py"), "--backend", "strict",
                           "--quick", "--parts", "env,speed,sampling,profile,molecules", "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads((out / "device_run.json").read_text())
    assert set(report["seconds"]) == {"env", "speed", "sampling", "profile", "molecules"}
    assert not any("error" in part for part in report["parts"].values()), report["parts"]
    assert report["parts"]["env"]["backend"] == "strict"
    (row,) = report["parts"]["speed"]["rows"]
    assert row["model"] == "small" and row["tokens_per_s"] > 0
    assert report["parts"]["sampling"]["rows"][0]["tokens_per_s"] > 0
    molecules = report["parts"]["molecules"]["runs"]["default"]
    assert molecules["rc"] == 0 and 0.0 <= molecules["metrics"]["valence"]["validity"] <= 1.0
    assert molecules["metrics"]["bare"]["fcd"] > 0, "FCD is read out of its {reference: value} dict"
    provenance = json.loads((out / "lm-default" / "provenance.json").read_text())
    assert provenance["versions"]["backend"] == "strict", "the training ran on the stand-in"
    (profile,) = report["parts"]["profile"]["rows"]
    assert profile["kernels"] and profile["step_s"] > 0
    text = (out / "device_run.md").read_text()
    assert "## Training speed" in text and "| linear_backward |" in text and "## Molecules" in text


def test_an_unknown_part_is_refused_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "gpu" / "device_run.py"), "--backend", "strict",
                           "--parts", "env,warp", "--out", str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown part(s) ['warp']" in done.stderr
