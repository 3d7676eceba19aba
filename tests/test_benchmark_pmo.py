"""benchmarks/pmo.py runs PMO's protocol end to end on a tiny prior: the budget is kept, the AUC is the
oracle's, and the table sits beside the published rows."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(os.environ.get("MINITRANSFORMER_KERNELS", "fast") == "reference",
                                reason="the benchmark script is checked once, in the fast-kernel pass")


def _tiny_prior(tmp_path):
    from minitransformer.checkpoint import save_checkpoint
    from minitransformer.chem import Vocab
    from minitransformer.models import DecoderLM, DecoderLMConfig
    vocab = Vocab.build(["CCO", "c1ccccc1", "CC(=O)N", "CCCl", "C#N", "CCN(C)C=O"])
    prior = DecoderLM(DecoderLMConfig(len(vocab), n_layers=1, d_model=16, n_heads=2, d_ff=32, max_len=24,
                                      pad_id=vocab.pad_id, bos_id=vocab.bos_id, eos_id=vocab.eos_id, seed=0))
    save_checkpoint(tmp_path / "prior.npz", prior, vocab=vocab)
    return tmp_path / "prior.npz"


def _pmo(tmp_path, *argv):
    small = ["--budget", "40", "--batch-size", "16", "--patience", "3", "--max-steps", "30", "--threads", "1"]
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / "pmo.py"), "--prior", str(tmp_path / "prior.npz"),
                           *small, *argv], capture_output=True, text=True, timeout=600, cwd=tmp_path)


def test_the_pmo_benchmark_runs_a_small_budget(tmp_path):
    """With augmented memory (the replay baseline shares every other line)."""
    pytest.importorskip("rdkit")
    from minitransformer.chem.goals.pmo_tasks import get_task
    _tiny_prior(tmp_path)
    out = tmp_path / "pmo.json"
    done = _pmo(tmp_path, "--tasks", "qed,isomers_c7h8n2o2", "--json", str(out), "--memory", "augmented")
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.read_text())
    assert [r["task"] for r in report["runs"]] == ["isomers_c7h8n2o2", "qed"]  # PMO's order
    for r in report["runs"]:
        assert 0 < r["calls"] <= 40 and r["stop"] in ("budget", "patience", "max_steps")
        assert 0.0 <= r["auc_top10"] <= r["top10_mean"] <= r["top1"] <= 1.0
        assert r["curve"] == [], "the top-10 mean is logged every 100 calls: none within 40"
        # so the AUC is the trapezoid from (0, 0) to the last point, held flat to the budget
        top = r["top10_mean"]
        assert r["auc_top10"] == pytest.approx((r["calls"] * top / 2 + (40 - r["calls"]) * top) / 40, abs=1e-12)
        truth = get_task(r["task"])([c for c, _ in r["best"]])  # the oracle's own scores of the best molecules
        assert np.allclose([s for _, s in r["best"]], truth, atol=1e-12) and top == pytest.approx(np.mean(truth))
    assert str(tmp_path) not in report["command"] and " prior.npz" in report["command"], \
        "a results file records no path of the machine: " + report["command"]
    assert str(tmp_path) not in out.read_text() and report["pmo_settings"]["prior"] == "prior.npz", \
        "nor do its settings: " + str(report["pmo_settings"])
    assert "REINVENT (PMO)" in report["table"] and "GP BO" in report["table"]
    cells = [[c.strip() for c in row.split("|")] for row in report["table"].splitlines() if row.startswith("|")]
    qed = next(row for row in cells if row[1] == "qed")
    assert qed[4:8] == ["0.941 ± 0.000", "0.941", "0.940", "0.937"], \
        "PMO's published qed means: REINVENT (± its SD), Graph GA, SELFIES-REINVENT, GP BO"
    fair, isomer = report["table"].split("tasks with an isomer term")
    assert "qed" in fair and "isomers_c7h8n2o2" not in fair and "isomers_c7h8n2o2" in isomer
    assert "at or above REINVENT's published mean on" in fair


@pytest.mark.parametrize("argv, message", [(["--budget", "0"], "--budget must be at least 1, got 0"),
                                           (["--batch-size", "0"], "--batch-size must be a whole number >= 1"),
                                           (["--seeds", "0,0"], "give each seed once")])
def test_settings_no_run_can_use_are_refused_in_one_line(tmp_path, argv, message):
    _tiny_prior(tmp_path)
    done = _pmo(tmp_path, "--tasks", "qed", *argv)
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_two_processes_give_the_runs_of_one_and_a_resumed_run_does_only_the_rest(tmp_path):
    pytest.importorskip("rdkit")
    _tiny_prior(tmp_path)
    one, two = tmp_path / "one.json", tmp_path / "two.json"
    assert _pmo(tmp_path, "--tasks", "qed", "--seeds", "0,1", "--json", str(one)).returncode == 0
    done = _pmo(tmp_path, "--tasks", "qed", "--seeds", "0", "--json", str(two), "--processes", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    done = _pmo(tmp_path, "--tasks", "qed", "--seeds", "0,1", "--json", str(two), "--processes", "2", "--resume")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "1 runs to do (1 read back" in done.stdout
    a, b = (json.loads(p.read_text())["runs"] for p in (one, two))
    assert [(r["seed"], r["auc_top10"], r["best"]) for r in a] == [(r["seed"], r["auc_top10"], r["best"]) for r in b]
    shown = json.loads(two.read_text())["table"]
    assert "± " in shown, "the spread over two seeds"
    by_seed = [r["auc_top10"] for r in b]  # one task: each seed's sum is its AUC
    assert f"sum by seed (0: {by_seed[0]:.3f}, 1: {by_seed[1]:.3f}): {sum(by_seed) / 2:.3f} ± " in shown
    refused = _pmo(tmp_path, "--tasks", "qed", "--seeds", "0,1", "--json", str(two), "--resume", "--sigma", "60")
    assert refused.returncode == 2 and "other sigma" in refused.stderr


def test_runs_made_in_parts_merge_into_the_table_of_one_run(tmp_path):
    pytest.importorskip("rdkit")
    _tiny_prior(tmp_path)
    whole, part0, part1, merged = (tmp_path / f"{n}.json" for n in ("whole", "part0", "part1", "merged"))
    assert _pmo(tmp_path, "--tasks", "qed", "--seeds", "0,1", "--json", str(whole)).returncode == 0
    assert _pmo(tmp_path, "--tasks", "qed", "--seeds", "0", "--json", str(part0)).returncode == 0
    assert _pmo(tmp_path, "--tasks", "qed", "--seeds", "1", "--json", str(part1)).returncode == 0
    wall = {r["seed"]: r["wall_s"] for r in json.loads(whole.read_text())["runs"]}
    for part in (part0, part1):  # the table shows each run's wall time: a measurement, the same only by chance
        saved = json.loads(part.read_text())
        saved["runs"] = [{**r, "wall_s": wall[r["seed"]]} for r in saved["runs"]]
        part.write_text(json.dumps(saved))
    done = _pmo(tmp_path, "--tasks", "qed", "--seeds", "0,1", "--json", str(merged), "--merge", str(part0), str(part1))
    assert done.returncode == 0, done.stderr[-2000:]
    assert "0 runs to do (2 read back)" in done.stdout
    a, b = (json.loads(p.read_text()) for p in (whole, merged))
    assert [(r["seed"], r["auc_top10"], r["best"]) for r in a["runs"]] == \
        [(r["seed"], r["auc_top10"], r["best"]) for r in b["runs"]]
    assert a["table"] == b["table"]
    twice = _pmo(tmp_path, "--tasks", "qed", "--json", str(tmp_path / "x.json"), "--merge", str(part0), str(whole))
    assert twice.returncode == 2 and "qed seed 0 is in both" in twice.stderr
    other = _pmo(tmp_path, "--tasks", "qed", "--json", str(tmp_path / "y.json"), "--sigma", "60", "--merge", str(part1))
    assert other.returncode == 2 and "other sigma" in other.stderr
    junk = tmp_path / "junk.json"
    junk.write_text("not a results file")
    refused = _pmo(tmp_path, "--tasks", "qed", "--json", str(tmp_path / "z.json"), "--merge", str(junk))
    assert refused.returncode == 2 and "is not a results file of pmo.py" in refused.stderr
    assert "Traceback" not in refused.stderr


DAMAGES = {
    "a list at the top": lambda f, r: [f],
    "runs not a list": lambda f, r: {**f, "runs": {"qed": r}},
    "settings not an object": lambda f, r: {**f, "pmo_settings": [1, 2]},
    "a run not an object": lambda f, r: {**f, "runs": ["qed"]},
    "no task": lambda f, r: {**f, "runs": [{k: v for k, v in r.items() if k != "task"}]},
    "an unknown task": lambda f, r: {**f, "runs": [{**r, "task": "tea"}]},
    "a NaN AUC": lambda f, r: {**f, "runs": [{**r, "auc_top10": float("nan")}]},
    "an AUC above 1": lambda f, r: {**f, "runs": [{**r, "auc_top10": 7.5}]},
    "calls as text": lambda f, r: {**f, "runs": [{**r, "calls": "many"}]},
    "a seed of true": lambda f, r: {**f, "runs": [{**r, "seed": True}]},
    "no wall time": lambda f, r: {**f, "runs": [{k: v for k, v in r.items() if k != "wall_s"}]},
    "calls beyond a float": lambda f, r: {**f, "runs": [{**r, "calls": 10 ** 400}]},
}


def test_a_damaged_results_file_is_refused_in_one_line_for_resume_and_merge(tmp_path):
    """Every field the table reads is checked: a damaged file is one line and exit 2, never a traceback, and a NaN
    never enters the table."""
    pytest.importorskip("rdkit")
    _tiny_prior(tmp_path)
    good = tmp_path / "good.json"
    assert _pmo(tmp_path, "--tasks", "qed", "--json", str(good)).returncode == 0
    saved = json.loads(good.read_text())
    for name, damage in DAMAGES.items():
        bad = tmp_path / "bad.json"
        bad.write_text(json.dumps(damage(saved, saved["runs"][0])))
        for argv in (["--json", str(bad), "--resume"], ["--json", str(tmp_path / "new.json"), "--merge", str(bad)]):
            done = _pmo(tmp_path, "--tasks", "qed", "--seeds", "0,1", *argv)
            assert done.returncode == 2, (name, done.stderr[-1500:])
            errors = [line for line in done.stderr.splitlines() if not line.startswith("warning: load average")]
            assert "Traceback" not in done.stderr and len(errors) == 1, (name, done.stderr[-1500:])
            assert errors[0].startswith("pmo.py: error: ") and str(bad) in errors[0], name
    assert not (tmp_path / "new.json").exists()


def test_stopping_the_benchmark_stops_its_worker_processes(tmp_path):
    """A worker outlives a killed parent only until its watcher notices (about a second)."""
    import signal
    import time
    script = tmp_path / "parent.py"
    script.write_text(f"""
import multiprocessing, os, sys, time
sys.path.insert(0, {str(ROOT / 'benchmarks')!r})
from concurrent.futures import ProcessPoolExecutor
from pmo import exit_with_parent

def work(path):
    open(path, "w").write(str(os.getpid()))
    time.sleep(120)

if __name__ == "__main__":
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=exit_with_parent,
                             initargs=(os.getpid(),)) as pool:
        pool.submit(work, {str(tmp_path / 'worker.pid')!r}).result()
""")
    parent = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path)
    pid_file = tmp_path / "worker.pid"
    for _ in range(600):
        if pid_file.exists() and pid_file.read_text():
            break
        time.sleep(0.1)
    worker = int(pid_file.read_text())
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=30)
    status = Path(f"/proc/{worker}/status")
    for _ in range(100):
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            return
        if status.exists() and "\nState:\tZ" in status.read_text():
            return  # exited; its new parent has not reaped it yet
        time.sleep(0.1)
    os.kill(worker, signal.SIGKILL)
    pytest.fail("the worker ran on after its parent was killed")


def test_a_retrained_prior_with_the_same_weights_resumes_and_other_weights_are_refused(tmp_path):
    """A results file names its prior by the weights a run reads: a prior trained again (the same
    weights, another file: its record of the run differs) continues the file; other weights do not, and
    a file that names only the checkpoint's bytes (written before the weights were named) is matched by them."""
    pytest.importorskip("rdkit")
    from minitransformer.checkpoint import save_checkpoint
    from minitransformer.molecules.sampling import load_generator
    _tiny_prior(tmp_path)
    first = tmp_path / "first.json"
    assert _pmo(tmp_path, "--tasks", "qed", "--seeds", "0", "--json", str(first)).returncode == 0
    older = json.loads(first.read_text())
    del older["prior_weights_sha256"]  # as written before the weights were named
    prior, vocab = load_generator(tmp_path / "prior.npz")
    save_checkpoint(tmp_path / "prior.npz", prior, vocab=vocab, extra={"trained": "again"})  # other bytes
    done = _pmo(tmp_path, "--tasks", "qed", "--seeds", "0,1", "--json", str(first), "--resume")
    assert done.returncode == 0 and "1 runs to do (1 read back)" in done.stdout, done.stderr[-2000:]
    (tmp_path / "older.json").write_text(json.dumps(older))
    refused = _pmo(tmp_path, "--tasks", "qed", "--json", str(tmp_path / "o.json"), "--merge", str(tmp_path / "older.json"))
    assert refused.returncode == 2 and "other prior" in refused.stderr, "the file's bytes changed"
    older["prior_sha256"] = json.loads(first.read_text())["prior_sha256"]
    (tmp_path / "older.json").write_text(json.dumps(older))
    kept = _pmo(tmp_path, "--tasks", "qed", "--json", str(tmp_path / "o.json"), "--merge", str(tmp_path / "older.json"))
    assert kept.returncode == 0 and "0 runs to do (1 read back)" in kept.stdout, kept.stderr[-2000:]
    _, weight = next(prior.named_parameters())
    weight.data[...] += 1e-3  # other weights
    save_checkpoint(tmp_path / "prior.npz", prior, vocab=vocab)
    refused = _pmo(tmp_path, "--tasks", "qed", "--seeds", "0,1", "--json", str(first), "--resume")
    assert refused.returncode == 2 and "other prior" in refused.stderr
