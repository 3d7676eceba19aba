"""End-to-end: ``minitransformer train lm`` (run as its demo, ``demos/molecules.py``, runs it) writes
every output, with sane metrics; its recipe, its time plan and its summary."""
import json
import math

import pytest

pytest.importorskip("rdkit")
pytest.importorskip("matplotlib")


WRITTEN = []  # files the quick run wrote through minitransformer.atomic


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, load_demo, atomic_spy):
    out = tmp_path_factory.mktemp("molecules")
    demo = load_demo("molecules")
    # RDKit's drug-like set ships with RDKit, so this runs without Tox21 or a network.
    with atomic_spy() as written:
        code = demo.main(["--quick", "--data", "druglike", "--out", str(out), "--samples", "60", "--quiet",
                          "--plot-attention", "--pretrain-data", "druglike"])
    assert code == 0
    WRITTEN[:] = written
    return demo, out


def test_every_output_is_written_atomically(quick_run):
    """No file of the run is written in place (a full disk cannot truncate it)."""
    _, out = quick_run
    on_disk = {p.relative_to(out).name for p in out.rglob("*") if p.is_file() and p.name != ".lock"}  # the run folder's lock: O_EXCL, not a file of results
    assert on_disk <= set(WRITTEN), f"written in place: {sorted(on_disk - set(WRITTEN))}"


def test_quick_run_writes_every_output(quick_run):
    _, out = quick_run
    for name in ("metrics.json", "history.json", "history.csv", "provenance.json", "config.json", "best.npz",
                 "last.npz", "samples.smi", "curves.png", "attention_decoder_self.png",
                 "attention_decoder_self_molecule.png", "pretrain/history.json", "pretrain/last.npz"):
        path = out / name
        assert path.exists() and path.stat().st_size > 0, f"missing or empty output: {name}"
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    if json.loads((out / "metrics.json").read_text())["bare"]["n_valid"] > 0:  # a 2-epoch model may draw none
        assert (out / "molecules.png").read_bytes()[:4] == b"\x89PNG"
    assert len((out / "samples.smi").read_text().splitlines()) == 60  # the bare model's
    assert len((out / "samples_valence.smi").read_text().splitlines()) == 60  # drawn under the valence grammar


def test_quick_run_metrics_are_fractions(quick_run):
    _, out = quick_run
    m = json.loads((out / "metrics.json").read_text())
    for key in ("test_acc_token", "test_rec_ref"):
        assert 0.0 <= m[key] <= 1.0, f"{key} = {m[key]} is not in [0, 1]"
    for label in ("bare", "valence"):  # the bare model's samples and the constrained sampler's, both judged
        s = m[label]
        for key in ("validity", "uniqueness", "novelty", "intdiv1", "intdiv2", "kl_score", "kl_score_heldout"):
            if s[key] is None:  # a 2-epoch model may draw no valid molecule, or fewer than two (KL)
                assert s["n_valid"] == 0 or key.startswith("kl_"), f"{label} {key} is None with {s['n_valid']} valid"
                assert s["notes"][key], f"{label} {key} is None without a note saying why"
                continue
            assert 0.0 <= s[key] <= 1.0, f"{label} {key} = {s[key]} is not in [0, 1]"
        if s["n_valid"]:
            assert 0.0 <= s["novelty_vs_all_training"] <= s["novelty"], "pretraining molecules only lower novelty"
        assert s["n_samples"] == 60 and set(s["fcd"]) == {"heldout"}
    assert m["valence"]["validity"] == 1.0, "the valence grammar leaves no invalid sample"
    for key in ("test_nll_token", "test_nll_mol_ref", "wall_time_s"):
        assert math.isfinite(m[key]) and m[key] > 0, f"{key} = {m[key]}"
    history = json.loads((out / "history.json").read_text())
    assert len(history) == m["epochs"] >= 1
    assert all("val_nll_mol_ref" in h and "val_rec_ref" in h for h in history)


def test_sample_command_reads_the_checkpoint(quick_run, tmp_path):
    demo, out = quick_run
    target = tmp_path / "more.smi"
    assert demo.main(["sample", str(out / "best.npz"), "-n", "7", "--out", str(target)]) == 0
    assert len(target.read_text().splitlines()) == 7


def test_history_csv_holds_both_phases_and_provenance_says_what_ran(quick_run):
    import csv
    _, out = quick_run
    rows = list(csv.DictReader((out / "history.csv").open()))
    m = json.loads((out / "metrics.json").read_text())
    phases = [r["phase"] for r in rows]
    assert phases == ["pretrain"] * phases.count("pretrain") + ["train"] * m["epochs"] and "pretrain" in phases
    assert all(float(r["train_loss"]) > 0 and float(r["tokens_per_s"]) > 0 for r in rows)
    p = json.loads((out / "provenance.json").read_text())
    assert p["command"][:3] == ["minitransformer", "train", "lm"] and "--quick" in p["command"]
    assert p["versions"]["numpy"] and p["versions"]["rdkit"] and p["seed"] == 0
    assert len(p["data"]["file_sha256"]) == 64 and p["data"]["argument"] == "druglike"


def test_bad_data_path_is_a_clear_error(tmp_path, load_demo, capsys):
    from minitransformer.cli import run_cli
    demo = load_demo("molecules")
    # checked while parsing the command line, before any work: one line, exit status 2
    assert run_cli(demo.main, ["--quick", "--data", str(tmp_path / "nope.csv"), "--out", str(tmp_path / "o"),
                               "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "nope.csv" in err and len(err.strip().splitlines()) == 1
    bad = tmp_path / "bad.csv"
    bad.write_text("name,value\na,1\n")
    with pytest.raises(ValueError, match="name"):
        demo.main(["--quick", "--data", str(bad), "--out", str(tmp_path / "o2"), "--quiet"])


def test_resuming_the_second_phase_skips_pretraining(quick_run, capsys):
    demo, out = quick_run
    capsys.readouterr()
    code = demo.main(["--quick", "--data", "druglike", "--out", str(out), "--samples", "10", "--quiet",
                      "--pretrain-data", "druglike", "--resume", str(out / "last.npz")])
    assert code == 0
    printed = capsys.readouterr().out
    assert "pretraining on" not in printed, "a finished phase 1 must not run again on resume"
    summary = printed[printed.index("\n====="):]
    assert "FCD floor" in summary and max(len(line) for line in summary.splitlines()) <= 100, summary


def test_a_summary_table_fits_a_terminal_of_100_columns_whatever_its_names_and_values():
    from minitransformer.cli.outputs import table_lines
    rows = [("short", "1"), ("a name of many words that would not fit its column on one line " * 2, "0.5 | 0.7"),
            ("value", "term " * 60), ("unbroken", "x" * 150)]
    lines = table_lines(rows, footer="outputs in " + "folder/" * 30)
    assert max(len(line) for line in lines) <= 100
    text = " ".join(" ".join(lines).split())
    assert "0.5 | 0.7" in text and text.count("term") == 60 and "x" * 60 in text.replace(" ", "")


def _recipe(argv):
    from minitransformer.cli.main import build_parser
    from minitransformer.cli.train_lm import resolve_recipe
    return resolve_recipe(build_parser().parse_args(["train", "lm", *argv]))


def test_default_preset_pretrains_on_moses_and_samples_under_the_valence_grammar():
    r = _recipe([])
    assert r.pretrain_data == "moses" and r.grammar == "valence" and r.pretrain_limit == 200_000
    assert (r.augment, r.pretrain_augment, r.pretrain_mix, r.epochs) == (1.0, 1.0, 1000, 60)
    assert r.loss_norm == "epoch" and _recipe(["--loss-norm", "batch"]).loss_norm == "batch"
    assert _recipe(["--preset", "moses"]).loss_norm == "batch"  # the other presets as they were measured
    assert _recipe(["--augment", "0", "--pretrain-augment", "0"]).pretrain_augment == 0.0
    assert _recipe(["--grammar", "off"]).grammar is None and _recipe(["--grammar"]).grammar == "syntax"
    assert _recipe(["--preset", "tomczak"]).grammar == "valence" and _recipe(["--quick"]).pretrain_data == \
        "druglike"  # a quick run never fetches MOSES


def test_model_size_options_change_the_default_model_and_are_refused_where_fixed():
    r = _recipe(["--d-model", "192", "--n-layers", "6"])
    assert (r.model.d_model, r.model.n_heads, r.model.d_ff, r.model.n_layers) == (192, 6, 768, 6)
    with pytest.raises(ValueError, match="multiple of 32"):
        _recipe(["--d-model", "100"])
    with pytest.raises(ValueError, match="tomczak preset's model is fixed"):
        _recipe(["--preset", "tomczak", "--n-layers", "2"])


def test_without_moses_phase1_falls_back_to_druglike_unless_the_user_named_it(monkeypatch, capsys):
    import minitransformer.chem.datasets.lm_data as lm_data
    from minitransformer.chem.datasets.download import DownloadError
    from minitransformer.cli.train_lm import DRUGLIKE_PHASE1, phase1_molecules
    real = lm_data.pretraining_smiles

    def offline(data, **kw):
        if data == "moses":
            raise DownloadError("could not download molsets-0.3.1-py3-none-any.whl. Offline? Put the files ...")
        return real(data, **kw)
    monkeypatch.setattr(lm_data, "pretraining_smiles", offline)
    held_out = ["CCO", "c1ccccc1O"]
    r, extra = phase1_molecules(_recipe([]), held_out)
    assert len(extra) > 9000 and {k: getattr(r, k) for k in DRUGLIKE_PHASE1} == DRUGLIKE_PHASE1
    assert "MOSES is not available (could not download molsets-0.3.1-py3-none-any.whl)" in capsys.readouterr().out
    with pytest.raises(DownloadError):
        phase1_molecules(_recipe(["--pretrain-data", "moses"]), held_out)


@pytest.mark.parametrize("argv", [["train", "lm", "--pretrain-minutes", "14", "--max-minutes", "14.5"],
                                  ["train", "property", "--pretrain", "--pretrain-minutes", "15",
                                   "--max-minutes", "15.5"]])
def test_a_pretraining_budget_that_leaves_no_fine_tuning_is_refused_before_work(argv, tmp_path, capsys):
    from minitransformer.cli import run_cli
    from minitransformer.cli.main import main
    out = tmp_path / "run"
    assert run_cli(main, [*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "leaves the fine-tuning less than a minute" in err and "raise --max-minutes" in err and "\n" not in err
    assert not out.exists()  # refused before any work


def test_the_default_run_plans_its_phases_in_minutes_unless_a_count_is_given():
    assert _recipe([]).time_budget == 15 * 60
    assert _recipe(["--max-minutes", "20"]).time_budget == 20 * 60  # the whole run's budget
    assert _recipe(["--max-minutes", "0"]).time_budget is None
    for fixed in (["--epochs", "5"], ["--pretrain-limit", "1000"], ["--pretrain-minutes", "3"],
                  ["--pretrain-data", "druglike"], ["--quick"], ["--preset", "moses"]):
        assert _recipe(fixed).time_budget is None, fixed


def test_the_time_plan_measures_the_runs_own_model_on_this_machine(capsys):
    """The plan with its real speed probe: training steps of the run's model and random writing, timed."""
    from types import SimpleNamespace
    import minitransformer.cli.lm_time_plan as lm_time_plan
    import minitransformer.cli.train_lm as train_lm
    from minitransformer.chem import Vocab
    train = ["CCO", "c1ccccc1O", "CC(=O)NC1=CC=CC=C1"] * 40
    vocab = Vocab.build(train)
    probe = lm_time_plan.probe_speed(train_lm.make_model(_recipe([]), vocab), _recipe([]), train, vocab, 0, 1,
                                     train_lm.MAX_LEN)
    assert 100 < probe.tokens_per_s < 1e8 and 0 < probe.write_s < 0.1 and 0 < probe.canon_s < 0.1, probe
    assert 1 <= probe.stretch < 2, probe  # these, written at random in Kekule form, take as many tokens or more
    data = SimpleNamespace(train=train, vocab=vocab, encode=lambda s: [vocab.encode(x) for x in s])
    # a budget of a day: the plan must fit however busy the machine that runs the suite is (the probe read
    # 2,036 tokens/s on a 2-core VM running three other jobs, about 1/17 of its idle speed, and 322 with a
    # whole second suite beside this one, where two hours no longer held the judging and 20 epochs)
    r = lm_time_plan.time_planned(_recipe(["--max-minutes", "1440"]), data, None, 1.0,
                                  train_lm.make_model, train_lm.MAX_LEN)
    said = capsys.readouterr().out
    assert said.startswith("time plan at ") and f"(up to {r.pretrain_limit:,} molecules)" in said
    assert 20 <= r.epochs <= 60 and 0 < r.max_time < 1440 * 60


def test_the_time_plan_sets_the_counts_from_the_measured_speed_and_a_resume_keeps_them(monkeypatch, tmp_path,
                                                                                      capsys):
    from types import SimpleNamespace
    import minitransformer.cli.lm_time_plan as lm_time_plan
    import minitransformer.cli.train_lm as train_lm
    from minitransformer.checkpoint import save_checkpoint
    from minitransformer.chem import Vocab
    train = ["CCO", "c1ccccc1O", "CC(=O)N"] * 100
    vocab = Vocab.build(train)
    data = SimpleNamespace(train=train, vocab=vocab, encode=lambda s: [vocab.encode(x) for x in s])
    monkeypatch.setattr(lm_time_plan, "probe_speed", lambda *args: lm_time_plan.Probe(30_000.0, 0.0, 0.0, 1.0))
    r = lm_time_plan.time_planned(_recipe([]), data, None, 10.0, train_lm.make_model, train_lm.MAX_LEN)
    said = capsys.readouterr().out
    assert "time plan at 30,000 tokens/s" in said and f"(up to {r.pretrain_limit:,} molecules)" in said
    assert r.epochs == 60 and r.pretrain_limit > 100_000
    # a small vocabulary makes the weights a little fewer than the default's, so the machine reads a little slower
    share = train_lm.make_model(_recipe([]), vocab).num_parameters() / lm_time_plan.JUDGE_MODEL_WEIGHTS
    assert 0.99 < share < 1
    assert r.max_time == pytest.approx(15 * 60 - 40 * 36_000 / (30_000 * share))  # the judging is reserved
    # a resumed run keeps the plan its checkpoint records, whatever the machine measures now
    model = train_lm.make_model(r, vocab)
    path = save_checkpoint(tmp_path / "last.npz", model, vocab=vocab, extra={"run": {"settings": r.record()}})
    monkeypatch.setattr(lm_time_plan, "probe_speed", lambda *args: lm_time_plan.Probe(10_000.0, 0.0, 0.0, 1.0))
    again = lm_time_plan.time_planned(_recipe([]), data, path, 10.0, train_lm.make_model, train_lm.MAX_LEN)
    assert (again.pretrain_limit, again.epochs, again.max_time) == (r.pretrain_limit, r.epochs, r.max_time)


def test_the_judging_reserve_grows_with_the_samples_and_the_grammar_and_a_budget_that_cannot_hold_them_is_refused(
        monkeypatch):
    """--samples and --grammar change what the end of the run costs: the reserve follows them (the preset's 2,000
    keep its judge_time), and a --samples the budget cannot hold is refused before any training."""
    from types import SimpleNamespace
    import minitransformer.cli.lm_time_plan as lm_time_plan
    import minitransformer.cli.train_lm as train_lm
    from minitransformer.chem import Vocab
    speed = 30_000.0
    preset = _recipe([])
    assert lm_time_plan.judging_seconds(preset, speed) == pytest.approx(preset.judge_time * 36_000 / speed)
    more, fewer, bare = (_recipe(a) for a in (["--samples", "20000"], ["--samples", "500"], ["--grammar", "off"]))
    reserve = {k: lm_time_plan.judging_seconds(r, speed) for k, r in
               (("more", more), ("fewer", fewer), ("bare", bare), ("preset", preset))}
    assert reserve["more"] > 6 * reserve["preset"] and reserve["fewer"] < reserve["bare"] < reserve["preset"]
    train = ["CCO", "c1ccccc1O", "CC(=O)N"] * 100
    vocab = Vocab.build(train)
    data = SimpleNamespace(train=train, vocab=vocab, encode=lambda s: [vocab.encode(x) for x in s])
    monkeypatch.setattr(lm_time_plan, "probe_speed", lambda *args: lm_time_plan.Probe(speed, 0.0, 0.0, 1.0))
    r = lm_time_plan.time_planned(more, data, None, 10.0, train_lm.make_model,
                                  train_lm.MAX_LEN)
    weights = train_lm.make_model(more, vocab).num_parameters()
    assert weights < lm_time_plan.JUDGE_MODEL_WEIGHTS
    # training ends early enough to judge them all
    assert r.max_time == pytest.approx(15 * 60 - lm_time_plan.judging_seconds(more, speed, weights))
    with pytest.raises(ValueError, match="--samples") as err:
        lm_time_plan.time_planned(_recipe(["--samples", "20000", "--max-minutes", "4"]), data,
                                  None, 10.0, train_lm.make_model, train_lm.MAX_LEN)
    assert "drawing and judging 20,000 samples" in str(err.value)


def test_a_planned_run_resumes_with_another_budget_keeping_its_counts(monkeypatch, tmp_path):
    """Only the time budget may change on --resume: the plan's molecules and epochs stay, the training's end moves
    by as much as the budget did, --max-minutes 0 lifts the limits, and check_resume lets all of them pass."""
    from types import SimpleNamespace
    import minitransformer.cli.lm_time_plan as lm_time_plan
    import minitransformer.cli.train_lm as train_lm
    from minitransformer.checkpoint import save_checkpoint
    from minitransformer.chem import Vocab
    from minitransformer.cli.run_folders import check_resume
    train = ["CCO", "c1ccccc1O", "CC(=O)N"] * 100
    vocab = Vocab.build(train)
    data = SimpleNamespace(train=train, vocab=vocab, encode=lambda s: [vocab.encode(x) for x in s])
    monkeypatch.setattr(lm_time_plan, "probe_speed", lambda *args: lm_time_plan.Probe(30_000.0, 0.0, 0.0, 1.0))
    r = lm_time_plan.time_planned(_recipe(["--max-minutes", "10"]), data, None, 10.0, train_lm.make_model,
                                  train_lm.MAX_LEN)
    path = save_checkpoint(tmp_path / "last.npz", train_lm.make_model(r, vocab), vocab=vocab,
                           extra={"run": {"settings": r.record()}})
    for minutes in ("25", "6", "0"):
        again = lm_time_plan.time_planned(_recipe(["--max-minutes", minutes]), data, path, 10.0,
                                          train_lm.make_model, train_lm.MAX_LEN) if minutes != "0" else \
            lm_time_plan.kept_plan(_recipe(["--max-minutes", "0"]), r.record())
        assert (again.pretrain_limit, again.epochs) == (r.pretrain_limit, r.epochs), minutes
        if minutes == "0":
            assert again.max_time is None and again.pretrain_max_time is None
        else:
            assert again.max_time == pytest.approx(r.max_time + (float(minutes) - 10) * 60)
            assert again.pretrain_max_time <= again.max_time - 60
        check_resume(path, tmp_path, {"settings": again.record()}, vocab)  # nothing else differs: no refusal
    # more samples on resume: the training ends earlier by the judging's extra reserve, or is refused
    more = lm_time_plan.kept_plan(_recipe(["--max-minutes", "10", "--samples", "4000"]), r.record(), 30_000.0)
    extra = (lm_time_plan.judging_seconds(_recipe(["--samples", "4000"]), 30_000.0)
             - lm_time_plan.judging_seconds(_recipe([]), 30_000.0))
    assert extra > 0 and more.max_time == pytest.approx(r.max_time - extra) and more.epochs == r.epochs
    with pytest.raises(ValueError, match="draw fewer --samples"):
        lm_time_plan.kept_plan(_recipe(["--max-minutes", "10", "--samples", "200000"]), r.record(), 30_000.0)
    # a limit given again to a run last trained without one is refused: its plan no longer knows its end
    lifted = lm_time_plan.kept_plan(_recipe(["--max-minutes", "0"]), r.record())
    with pytest.raises(ValueError, match="resume it with --max-minutes 0"):
        lm_time_plan.kept_plan(_recipe(["--max-minutes", "30"]), lifted.record())
    assert lm_time_plan.trained_speed({"trainer": {"history": [{"tokens_per_s": 10.0}, {"tokens_per_s": 30.0}]}}) == 20


def test_a_model_too_large_for_the_memory_is_refused_before_the_time_plan_trains_it(monkeypatch):
    from types import SimpleNamespace
    import minitransformer.cli.lm_time_plan as lm_time_plan
    import minitransformer.cli.train_lm as train_lm
    from minitransformer import runtime
    from minitransformer.chem import Vocab
    train = ["CCO", "c1ccccc1O", "CC(=O)N"] * 100
    vocab = Vocab.build(train)
    data = SimpleNamespace(train=train, vocab=vocab, encode=lambda s: [vocab.encode(x) for x in s])
    monkeypatch.setattr(runtime, "available_memory", lambda: 10_000)
    monkeypatch.setattr(lm_time_plan, "probe_speed", lambda *a: pytest.fail("the probe trained a model too large"))
    with pytest.raises(ValueError, match="weights: training them takes at least"):
        lm_time_plan.time_planned(_recipe([]), data, None, 1.0, train_lm.make_model,
                                  train_lm.MAX_LEN)


def test_average_option_sets_the_running_average_of_the_main_phase(tmp_path, load_demo):
    assert _recipe(["--average", "0.99"]).average == 0.99 and _recipe(["--average", "0"]).average is None
    out = tmp_path / "run"
    code = load_demo("molecules").main(["--quick", "--data", "druglike", "--out", str(out), "--samples", "20",
                                        "--quiet", "--pretrain-data", "druglike", "--average", "0.9",
                                        "--grammar", "off"])
    assert code == 0
    rows = json.loads((out / "history.json").read_text())
    assert all("val_nll_token" in r and "val_nll_token_trained" in r for r in rows)
    assert not any("_trained" in k for r in json.loads((out / "pretrain" / "history.json").read_text()) for k in r)
    from minitransformer.checkpoint import load_checkpoint
    last, best = load_checkpoint(out / "last.npz"), load_checkpoint(out / "best.npz")
    assert last.average_arrays and last.meta["average"]["decay"] == 0.9
    assert best.meta["average_applied"] is True and "average_applied" not in last.meta


def test_the_default_marks_ring_closings_and_keeps_the_grammar_samples():
    marked = _recipe([])
    assert marked.rings == "marked" and marked.grammar == "valence"
    assert _recipe(["--rings", "paired"]).rings == "paired" and _recipe(["--preset", "moses"]).rings == "paired"
    assert _recipe(["--rings", "marked", "--grammar", "syntax"]).grammar == "syntax"


def test_rings_by_size_train_a_generator_whose_samples_never_leave_a_ring_open(tmp_path, load_demo, capsys):
    from minitransformer.cli import run_cli
    assert _recipe(["--rings", "sizes"]).rings == "sizes" and _recipe(["--rings", "sizes"]).grammar is None
    demo = load_demo("molecules")
    assert run_cli(demo.main, ["--rings", "sizes", "--grammar", "valence", "--out", str(tmp_path / "no")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--grammar valence reads ring labels in pairs" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "no").exists()
    out = tmp_path / "run"
    code = demo.main(["--quick", "--data", "druglike", "--out", str(out), "--samples", "200", "--quiet",
                      "--pretrain-data", "druglike", "--rings", "sizes"])
    assert code == 0
    from minitransformer.checkpoint import load_checkpoint
    from minitransformer.chem.datasets.vocab import Vocab
    vocab = Vocab.from_json(load_checkpoint(out / "best.npz").vocab)
    assert vocab.rings == "sizes"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["grammar"] is None
    samples = (out / "samples.smi").read_text().splitlines()
    from minitransformer.chem.judge.failures import failure_counts
    assert failure_counts(samples)["unclosed ring"] == 0
    assert any(c.isdigit() for s in samples for c in s)  # rings were drawn, and read back as paired labels


def test_weight_decay_option_overrides_adamw_and_is_refused_where_the_preset_has_no_adamw(tmp_path, capsys):
    from minitransformer.cli import run_cli
    from minitransformer.cli.main import main
    assert _recipe(["--weight-decay", "0.1"]).weight_decay == 0.1 and _recipe([]).weight_decay == 0.01
    assert run_cli(main, ["train", "lm", "--preset", "tomczak", "--weight-decay", "0.1",
                          "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert "--weight-decay sets AdamW's decay" in err and "adamax" in err and len(err.splitlines()) == 1
    for bad in ("-1", "2"):
        assert run_cli(main, ["train", "lm", "--weight-decay", bad, "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "o").exists()


def test_a_smaller_model_does_not_shrink_the_judging_reserve_a_larger_one_keeps_its_own():
    """Judging runs at the machine's speed: a model with half the weights trains up to twice as fast on the same
    machine, and its reserve stays the default model's; a larger model's lower speed is taken as it is."""
    from minitransformer.cli.lm_time_plan import JUDGE_MODEL_WEIGHTS, judging_seconds
    r, speed = _recipe([]), 30_000.0
    base = judging_seconds(r, speed)
    assert judging_seconds(r, speed, JUDGE_MODEL_WEIGHTS) == pytest.approx(base)
    assert judging_seconds(r, 2 * speed, JUDGE_MODEL_WEIGHTS // 2) == pytest.approx(base)
    assert judging_seconds(r, 2 * speed) == pytest.approx(base / 2)  # without the weights: what the plan did
    assert judging_seconds(r, speed / 2, 2 * JUDGE_MODEL_WEIGHTS) == pytest.approx(2 * base)
