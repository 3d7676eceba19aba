"""Vocab: deterministic ordering, encode/decode, padding, and JSON round trip."""
import json

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from minitransformer.chem.datasets.vocab import Vocab


def test_special_tokens_have_fixed_ids():
    v = Vocab([])
    assert (v.pad_id, v.bos_id, v.eos_id, v.unk_id) == (0, 1, 2, 3)
    assert v.tokens == [Vocab.PAD, Vocab.BOS, Vocab.EOS, Vocab.UNK] == ["<pad>", "<bos>", "<eos>", "<unk>"]
    assert len(v) == 4


def test_build_orders_by_count_then_first_appearance():
    # counts: c 6, C 2, 1 2, O 1.  C and 1 tie; C appears first.
    v = Vocab.build(["CCO", "c1ccccc1"])
    assert v.tokens[4:] == ["c", "C", "1", "O"], v.tokens
    assert Vocab.build(["CCO", "c1ccccc1"]) == v, "build must be deterministic"


def test_build_min_count_drops_rare_tokens():
    v = Vocab.build(["CCO", "CCN", "CC[nH]"], min_count=2)
    assert v.tokens[4:] == ["C"], v.tokens
    assert v.encode("CCO", bos=False, eos=False) == [v.token_to_id("C")] * 2 + [v.unk_id]
    with pytest.raises(ValueError):
        Vocab.build(["C"], min_count=0)


def test_encode_frames_with_bos_eos_and_maps_unknown_to_unk():
    v = Vocab.build(["CCO"])
    c, o = v.token_to_id("C"), v.token_to_id("O")
    assert v.encode("CCO") == [v.bos_id, c, c, o, v.eos_id]
    assert v.encode("CCO", bos=False) == [c, c, o, v.eos_id]
    assert v.encode("CCO", eos=False) == [v.bos_id, c, c, o]
    assert v.encode("CBrO", bos=False, eos=False) == [c, v.unk_id, o]


def test_encode_batch_pads_and_reports_lengths():
    v = Vocab.build(["CCO", "C"])
    ids, lengths = v.encode_batch(["CCO", "C", ""])
    assert ids.dtype == np.int64 and lengths.dtype == np.int64
    assert ids.shape == (3, 5), ids.shape
    np.testing.assert_array_equal(lengths, [5, 3, 2])
    np.testing.assert_array_equal(ids[1], v.encode("C") + [v.pad_id] * 2)
    np.testing.assert_array_equal(ids[2], [v.bos_id, v.eos_id, 0, 0, 0])
    wide, _ = v.encode_batch(["C"], pad_to=8)
    assert wide.shape == (1, 8)
    with pytest.raises(ValueError, match="pad_to"):
        v.encode_batch(["CCO"], pad_to=3)
    empty, empty_lengths = v.encode_batch([])
    assert empty.shape == (0, 0) and empty_lengths.shape == (0,)


def test_decode_skips_bos_pad_stops_at_eos_and_writes_unk_so_that_it_never_parses():
    from minitransformer.chem.datasets.data import canonical
    v = Vocab.build(["CCO"])
    c, o = v.token_to_id("C"), v.token_to_id("O")
    assert v.decode([v.bos_id, c, v.pad_id, o, v.eos_id, c, c]) == "CO"
    assert v.decode(np.array([c, v.unk_id, o])) == "C<unk>O"
    assert canonical(v.decode([c, v.unk_id, o])) is None, "an unknown token makes the sample invalid, not CO"
    assert v.decode([c, v.unk_id, o], unk="?") == "C?O"
    assert v.decode([]) == ""
    with pytest.raises(IndexError, match="outside the vocabulary"):
        v.decode([len(v)])


def test_decode_inverts_encode_on_batches():
    data = ["CC(=O)Oc1ccccc1C(=O)O", "c1cc[nH]c1", "[Na+].[Cl-]", "C%12CCCC%12"]
    v = Vocab.build(data)
    ids, _ = v.encode_batch(data)
    assert [v.decode(row) for row in ids] == data


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=30), min_size=1, max_size=5))
def test_round_trip_any_text_in_the_training_data(texts):
    v = Vocab.build(texts)
    for text in texts:
        assert v.decode(v.encode(text)) == text


def test_json_round_trip():
    v = Vocab.build(["CC(=O)Oc1ccccc1C(=O)O", "c1cc[nH]c1", "BrCCl"])
    text = json.dumps(v.to_json())
    back = Vocab.from_json(json.loads(text))
    assert back == v and back.tokens == v.tokens
    assert Vocab.from_json(text) == v, "from_json also accepts the JSON text"


@pytest.mark.parametrize("bad", [
    {"tokens": ["<pad>", "<bos>", "<eos>", "<unk>"]},
    {"format": "minitransformer.chem.Vocab", "version": 99, "tokens": []},
    {"format": "minitransformer.chem.Vocab", "version": 1, "tokens": ["C", "<pad>"]},
])
def test_from_json_rejects_malformed_input(bad):
    with pytest.raises(ValueError):
        Vocab.from_json(bad)


def test_constructor_rejects_duplicates_and_specials():
    with pytest.raises(ValueError, match="twice"):
        Vocab(["C", "C"])
    with pytest.raises(ValueError):
        Vocab(["<unk>"])
    with pytest.raises(ValueError):
        Vocab([""])
    assert "C" in Vocab(["C"]) and "N" not in Vocab(["C"])


# ---------------------------------------------------------------- extra specials
def test_extras_sit_after_unk_and_frame_classifier_inputs():
    v = Vocab.build(["CCO", "c1ccccc1"], extras=(Vocab.CLS, Vocab.MASK))
    assert v.tokens[:6] == ["<pad>", "<bos>", "<eos>", "<unk>", "<cls>", "<mask>"], v.tokens
    assert (v.cls_id, v.mask_id, v.n_specials) == (4, 5, 6)
    assert v.special_ids == [0, 1, 2, 3, 4, 5]
    c = v.token_to_id("C")
    assert c >= 6
    assert v.encode("CC", cls=True) == [v.cls_id, c, c, v.eos_id]
    ids, _ = v.encode_batch(["CC", "C"], cls=True, eos=False)
    np.testing.assert_array_equal(ids, [[v.cls_id, c, c], [v.cls_id, c, v.pad_id]])
    # <cls> is skipped like <bos>; <mask> renders like <unk>
    assert v.decode([v.cls_id, c, v.mask_id, c, v.eos_id]) == "C<unk>C"


def test_plain_vocab_has_no_extras_and_says_how_to_get_them():
    v = Vocab.build(["CCO"])
    assert v.n_specials == 4 and v.tokens[4:] == ["C", "O"]
    with pytest.raises(ValueError, match="extras"):
        v.mask_id
    with pytest.raises(ValueError, match="unknown extra special"):
        Vocab(["C"], extras=("<sep>",))


def test_extras_round_trip_through_json_and_version_1_still_loads():
    v = Vocab.build(["CCO", "CN"], extras=(Vocab.CLS, Vocab.MASK))
    back = Vocab.from_json(json.dumps(v.to_json()))
    assert back == v and back.mask_id == 5
    assert back != Vocab.build(["CCO", "CN"])
    old = {"format": "minitransformer.chem.Vocab", "version": 1, "tokens": ["<pad>", "<bos>", "<eos>", "<unk>", "C"]}
    assert Vocab.from_json(old).tokens == old["tokens"]
