"""Tests for minitransformer.train.tasks: collation, target shifting, what the loss scores.

The tasks are checked with small "recording" models that keep the inputs they
receive and return logits chosen by the test, so the expected loss can be
computed independently here in float64 NumPy.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from minitransformer import backend, devices
from minitransformer.testing.strict import HostSyncError
from minitransformer.models import (
    DecoderLM, DecoderLMConfig, EncoderConfig, MaskedLM, PropertyModel, PropertyModelConfig, Seq2Seq, Seq2SeqConfig,
)
from minitransformer.train.tasks import LMTask, MLMTask, Seq2SeqTask, pad_batch

PAD, BOS, EOS, MASK = 0, 1, 2, 3
V = 12


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def host(a):
    return np.asarray(backend.to_numpy(a))


def ref_ce(logits, targets, ignore):
    """Mean cross-entropy over non-ignored targets, float64 NumPy. Returns (loss, count)."""
    logits = np.asarray(logits, dtype=np.float64)
    targets = np.asarray(targets)
    keep = targets != ignore
    z = logits - logits.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    safe = np.where(keep, targets, 0)
    nll = -np.take_along_axis(logp, safe[..., None], axis=-1)[..., 0]
    return float(nll[keep].sum() / max(keep.sum(), 1)), int(keep.sum())


class RecordingModel:
    """Returns fixed pseudo-random logits for any input; records forward inputs and
    the gradient passed to backward. ``config`` gives the vocabulary sizes the tasks
    check the batch's ids against."""

    def __init__(self, vocab=V, seed=0):
        self.vocab, self.seed = vocab, seed
        self.inputs, self.dlogits, self.kwargs = None, None, None
        self.config = SimpleNamespace(vocab_size=vocab, src_vocab_size=vocab, tgt_vocab_size=vocab)

    def _logits(self, B, T):
        rng = np.random.default_rng(self.seed)
        return backend.asarray(rng.normal(size=(B, T, self.vocab)).astype(np.float32))

    def __call__(self, *inputs, **kwargs):
        self.inputs = [host(x) for x in inputs]
        self.kwargs = kwargs
        B, T = inputs[-1].shape
        self.last_logits = self._logits(B, T)
        return self.last_logits

    def backward(self, dlogits):
        self.dlogits = host(dlogits)


LM_EXAMPLES = [[BOS, 5, 6, 7, EOS], [BOS, 8, EOS], [BOS, 4, 4, 4, 4, 9, EOS]]
S2S_EXAMPLES = [([BOS, 5, 6, EOS], [BOS, 6, 5, EOS]),
                ([BOS, 7, 8, 9, 10, EOS], [BOS, 10, EOS]),
                ([BOS, 4, EOS], [BOS, 11, 4, 4, 4, 4, EOS])]


# ---------------------------------------------------------------------------
# collation
# ---------------------------------------------------------------------------
def test_pad_batch_right_pads_to_longest():
    out = pad_batch([[1, 2], [3], [4, 5, 6]], pad_id=0)
    assert out.dtype == np.int64 and out.shape == (3, 3)
    np.testing.assert_array_equal(out, [[1, 2, 0], [3, 0, 0], [4, 5, 6]])
    assert pad_batch([[7, 7]], pad_id=9).shape == (1, 2)  # no padding when all are as long


def test_lm_collate_pads_only_to_the_batch_maximum():
    task = LMTask(pad_id=PAD)
    batch = task.collate(LM_EXAMPLES[:2])
    assert isinstance(batch, np.ndarray) and batch.shape == (2, 5)
    np.testing.assert_array_equal(batch, [[BOS, 5, 6, 7, EOS], [BOS, 8, EOS, PAD, PAD]])
    assert task.collate(LM_EXAMPLES).shape == (3, 7)
    assert [task.length(e) for e in LM_EXAMPLES] == [5, 3, 7]


def test_seq2seq_collate_pads_source_and_target_separately():
    task = Seq2SeqTask(pad_id=PAD)
    src, tgt = task.collate(S2S_EXAMPLES[:2])
    np.testing.assert_array_equal(src, [[BOS, 5, 6, EOS, PAD, PAD], [BOS, 7, 8, 9, 10, EOS]])
    np.testing.assert_array_equal(tgt, [[BOS, 6, 5, EOS], [BOS, 10, EOS, PAD]])
    assert [task.length(e) for e in S2S_EXAMPLES] == [4, 6, 7]  # the longer side


# ---------------------------------------------------------------------------
# target shifting and the loss
# ---------------------------------------------------------------------------
def test_lm_loss_reads_prefix_and_scores_next_tokens(any_backend):
    task = LMTask(pad_id=PAD)
    model = RecordingModel()
    batch = task.collate(LM_EXAMPLES)  # (3, 7)
    loss, n_tok = task.loss(model, batch, np.random.default_rng(0))
    np.testing.assert_array_equal(model.inputs[0], batch[:, :-1])  # teacher forcing: the prefix
    targets = batch[:, 1:]
    expected, count = ref_ce(host(model.last_logits), targets, PAD)
    assert n_tok == count == 4 + 2 + 6  # every real token after BOS, EOS included, no padding
    assert float(loss) == pytest.approx(expected, rel=1e-5)

    task.backward(model)
    d = model.dlogits  # (3, 6, V)
    assert d.shape == (3, 6, V)
    assert np.all(d[targets == PAD] == 0)  # padding targets get no gradient
    # the fused gradient of a mean CE: (softmax - onehot) / n_tok on every scored row
    p = np.exp(host(model.last_logits).astype(np.float64))
    p /= p.sum(-1, keepdims=True)
    onehot = np.eye(V)[targets]
    keep = targets != PAD
    np.testing.assert_allclose(d[keep], ((p - onehot) / count)[keep], atol=1e-6)


def test_lm_loss_with_a_real_model_matches_manual_shift():
    cfg = DecoderLMConfig(vocab_size=V, max_len=16, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    model = DecoderLM(cfg).eval()
    task = LMTask(pad_id=PAD)
    batch = task.collate(LM_EXAMPLES)
    loss, _ = task.loss(model, batch)
    logits = host(model(backend.asarray(batch[:, :-1])))
    assert float(loss) == pytest.approx(ref_ce(logits, batch[:, 1:], PAD)[0], rel=1e-5)


def test_seq2seq_loss_feeds_source_and_shifted_target(any_backend):
    task = Seq2SeqTask(pad_id=PAD)
    model = RecordingModel(seed=3)
    src, tgt = task.collate(S2S_EXAMPLES)
    loss, n_tok = task.loss(model, (src, tgt), None)
    np.testing.assert_array_equal(model.inputs[0], src)  # the whole source
    np.testing.assert_array_equal(model.inputs[1], tgt[:, :-1])  # the target prefix (BOS first)
    expected, count = ref_ce(host(model.last_logits), tgt[:, 1:], PAD)
    assert n_tok == count == 3 + 2 + 6
    assert float(loss) == pytest.approx(expected, rel=1e-5)
    task.backward(model)
    assert np.all(model.dlogits[tgt[:, 1:] == PAD] == 0)


def test_seq2seq_loss_with_a_real_model():
    cfg = Seq2SeqConfig(src_vocab_size=V, tgt_vocab_size=V, max_len=16, d_model=16, n_heads=2,
                        n_enc_layers=1, n_dec_layers=1, d_ff=32)
    model = Seq2Seq(cfg).eval()
    task = Seq2SeqTask(pad_id=PAD)
    src, tgt = task.collate(S2S_EXAMPLES)
    loss, _ = task.loss(model, (src, tgt))
    logits = host(model(backend.asarray(src), backend.asarray(tgt[:, :-1])))
    assert float(loss) == pytest.approx(ref_ce(logits, tgt[:, 1:], PAD)[0], rel=1e-5)


def test_label_smoothing_matches_reference():
    """(1 - eps) * NLL of the target + eps / (V - 1) * NLL of every other class, averaged
    over non-padding targets."""
    eps = 0.1
    batch = LMTask().collate(LM_EXAMPLES)
    model = RecordingModel()
    plain, _ = LMTask(pad_id=PAD).loss(model, batch)
    smooth, _ = LMTask(pad_id=PAD, label_smoothing=eps).loss(model, batch)
    logits = host(model.last_logits).astype(np.float64)
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    targets = batch[:, 1:]
    keep = targets != PAD
    nll_t = -np.take_along_axis(logp, targets[..., None], -1)[..., 0]
    nll_rest = -logp.sum(-1) - nll_t
    expected = ((1 - eps) * nll_t + eps / (V - 1) * nll_rest)[keep].mean()
    assert float(smooth) == pytest.approx(expected, rel=1e-5)
    assert float(plain) == pytest.approx(nll_t[keep].mean(), rel=1e-5)


@pytest.mark.parametrize("task_cls, examples", [(LMTask, LM_EXAMPLES), (Seq2SeqTask, S2S_EXAMPLES)])
def test_evaluate_counts_tokens_and_accuracy(task_cls, examples):
    """A model whose logits put all mass on the true next token scores accuracy 1 and
    near-zero loss; evaluate counts only non-padding targets."""
    task = task_cls(pad_id=PAD)
    batches = [task.collate(examples[:2]), task.collate(examples[2:])]
    targets_seq = [(b if task_cls is LMTask else b[1])[:, 1:] for b in batches]
    calls = iter(targets_seq)  # evaluate runs the model once per batch, in order

    def oracle(*inputs):
        targets = next(calls)
        assert inputs[-1].shape == targets.shape  # the model reads the prefix x[:, :-1]
        return backend.asarray(np.where(np.eye(V, dtype=bool)[targets], 30.0, 0.0).astype(np.float32))

    oracle.config = RecordingModel().config  # the vocabulary sizes the task checks ids against
    metrics = task.evaluate(oracle, batches)
    assert metrics["val_tokens"] == sum(int((t != PAD).sum()) for t in targets_seq)
    assert metrics["val_acc"] == 1.0
    assert metrics["val_loss"] < 1e-6


# ---------------------------------------------------------------------------
# MLM
# ---------------------------------------------------------------------------
def _mlm_batch():
    rng = np.random.default_rng(7)
    rows = [[BOS] + list(rng.integers(4, V, size=n)) + [EOS] for n in (30, 24, 30, 12)]
    return MLMTask(mask_id=MASK, vocab_size=V).collate(rows)


def test_mlm_scores_only_selected_positions(any_backend):
    task = MLMTask(mask_id=MASK, vocab_size=V, pad_id=PAD, special_ids=(PAD, BOS, EOS), p=0.3)
    batch = _mlm_batch()
    model = RecordingModel(seed=5)
    loss, n_tok = task.loss(model, batch, np.random.default_rng(11))
    assert model.kwargs == {}  # the MaskedLM has no head to choose
    corrupted = model.inputs[0]
    # the same generator state reproduces the corruption exactly
    corrupted2, targets = task._corrupt(batch, np.random.default_rng(11))
    np.testing.assert_array_equal(corrupted, corrupted2)
    selected = targets != MLMTask.IGNORE
    assert 0 < n_tok == int(selected.sum()) < int((batch != PAD).sum())
    np.testing.assert_array_equal(targets[selected], batch[selected])  # targets are the originals
    assert not np.any(selected & np.isin(batch, [PAD, BOS, EOS]))  # specials are never selected
    np.testing.assert_array_equal(corrupted[~selected], batch[~selected])  # the rest is untouched
    assert np.mean(corrupted[selected] == MASK) > 0.5  # most selected tokens become MASK

    logits = host(model.last_logits)
    expected, count = ref_ce(logits, targets, MLMTask.IGNORE)
    assert count == n_tok
    assert float(loss) == pytest.approx(expected, rel=1e-5)

    task.backward(model)
    assert np.all(model.dlogits[~selected] == 0)  # unselected positions get no gradient
    assert np.all(np.abs(model.dlogits[selected]).sum(-1) > 0)


def test_mlm_loss_ignores_logits_at_unselected_positions():
    task = MLMTask(mask_id=MASK, vocab_size=V, special_ids=(PAD, BOS, EOS))
    batch = _mlm_batch()
    _, targets = task._corrupt(batch, np.random.default_rng(1))
    selected = targets != MLMTask.IGNORE

    class Fixed(RecordingModel):
        def __init__(self, noise):
            super().__init__()
            self.noise = noise

        def _logits(self, B, T):
            base = np.random.default_rng(0).normal(size=(B, T, V))
            base[~selected] += self.noise * np.random.default_rng(99).normal(size=base[~selected].shape)
            return backend.asarray(base.astype(np.float32))

    l0, _ = task.loss(Fixed(0.0), batch, np.random.default_rng(1))
    l1, _ = task.loss(Fixed(100.0), batch, np.random.default_rng(1))
    assert float(l0) == float(l1)


def test_mlm_corruption_differs_per_generator_and_evaluate_is_repeatable():
    task = MLMTask(mask_id=MASK, vocab_size=V, special_ids=(PAD, BOS, EOS))
    batch = _mlm_batch()
    c1, _ = task._corrupt(batch, np.random.default_rng(1))
    c2, _ = task._corrupt(batch, np.random.default_rng(2))
    assert not np.array_equal(c1, c2)
    model = MaskedLM(EncoderConfig(vocab_size=V, max_len=40, d_model=16, n_heads=2, n_layers=1, d_ff=32)).eval()
    m1 = task.evaluate(model, [batch])
    m2 = task.evaluate(model, [batch])
    assert m1 == m2 and m1["val_tokens"] > 0


def test_mlm_with_a_real_encoder_matches_manual_loss():
    cfg = EncoderConfig(vocab_size=V, max_len=40, d_model=16, n_heads=2, n_layers=1, d_ff=32)
    model = MaskedLM(cfg).eval()
    task = MLMTask(mask_id=MASK, vocab_size=V, special_ids=(PAD, BOS, EOS))
    batch = _mlm_batch()
    loss, n_tok = task.loss(model, batch, np.random.default_rng(4))
    corrupted, targets = task._corrupt(batch, np.random.default_rng(4))
    logits = host(model(backend.asarray(corrupted)))
    expected, count = ref_ce(logits, targets, MLMTask.IGNORE)
    assert n_tok == count
    assert float(loss) == pytest.approx(expected, rel=1e-5)


# ---------------------------------------------------------------------------
# PropertyTask: multi-label masked BCE through the pooled head, whole model
# ---------------------------------------------------------------------------
def test_property_task_whole_model_gradient_with_missing_labels(float64):
    from minitransformer.train.tasks import PropertyTask
    model = PropertyModel(PropertyModelConfig(vocab_size=V, max_len=8, d_model=8, n_heads=2, n_layers=2, d_ff=16,
                                              n_outputs=3, pad_id=PAD, seed=3))
    model.eval()
    nan = np.nan
    examples = [([4, 5, 6, 7], [1.0, nan, 0.0]), ([4, 8, 9], [nan, nan, 1.0]), ([4, 10], [0.0, 1.0, nan])]
    task = PropertyTask(pad_id=PAD, pos_weight=[2.0, 1.0, 0.5])
    batch = task.collate(examples)
    assert batch[0].shape == (3, 4) and np.isnan(batch[1]).sum() == 4

    def loss_value():
        loss, n = task.loss(model, batch)
        assert n == 5, "five labels are present"
        return float(loss)

    loss_value()
    model.zero_grad()
    task.backward(model)
    rng = np.random.default_rng(0)
    worst = (0.0, None)
    for name, p in model.named_parameters():
        flat = p.data.reshape(-1)
        for i in rng.choice(flat.size, size=min(3, flat.size), replace=False):
            old = float(flat[i])
            flat[i] = old + 1e-6
            up = loss_value()
            flat[i] = old - 1e-6
            down = loss_value()
            flat[i] = old
            numeric = (up - down) / 2e-6
            analytic = float(host(p.grad).reshape(-1)[i])
            # relative error, with an absolute floor: the key bias's true gradient is exactly 0
            # (softmax ignores a shift shared by all keys), and differencing leaves ~1e-10 noise
            err = abs(numeric - analytic) / max(1e-4, abs(numeric) + abs(analytic))
            if err > worst[0]:
                worst = (err, f"{name}[{i}]: analytic {analytic:.6g}, numeric {numeric:.6g}")
    assert worst[0] < 1e-5, f"largest relative error {worst[0]:.2e} at {worst[1]}"


def test_property_task_evaluate_reports_loss_and_auc():
    from minitransformer.train.tasks import PropertyTask
    model = PropertyModel(PropertyModelConfig(vocab_size=V, max_len=8, d_model=8, n_heads=2, n_layers=1, d_ff=16,
                                              n_outputs=2, pad_id=PAD, seed=0))
    model.eval()
    task = PropertyTask(pad_id=PAD)
    examples = [([4 + i % 8, 4 + i // 8, 4 + 3 * i % 8], [float(i % 2), np.nan if i == 3 else float(i % 3 == 0)])
                for i in range(12)]  # 12 distinct molecules: no tied scores
    metrics = task.evaluate(model, [task.collate(examples[:6]), task.collate(examples[6:])])
    assert set(metrics) == {"val_loss", "val_auc"}
    # recomputed here: the logits one molecule at a time, BCE over the 23 present labels, AUC by counting pairs
    z = np.array([host(model(backend.asarray([ids])))[0] for ids, _ in examples], dtype=np.float64)  # (12, 2)
    y = np.array([labels for _, labels in examples])  # (12, 2), one NaN
    present = ~np.isnan(y)
    bce = np.maximum(z, 0) - z * np.nan_to_num(y) + np.log1p(np.exp(-np.abs(z)))  # (12, 2)
    assert metrics["val_loss"] == pytest.approx(bce[present].mean(), rel=1e-5)
    aucs = []
    for k in range(2):
        pos, neg = z[present[:, k] & (y[:, k] == 1), k], z[present[:, k] & (y[:, k] == 0), k]
        aucs.append(np.mean([(p > q) + 0.5 * (p == q) for p in pos for q in neg]))
    assert metrics["val_auc"] == pytest.approx(np.mean(aucs), abs=1e-9)


# ---------------------------------------------------------------------------
# A training step never waits for the device (the strict backend proves it)
# ---------------------------------------------------------------------------
def _step_cases():
    from minitransformer.train.tasks import PropertyTask
    small = dict(max_len=16, d_model=16, n_heads=2, d_ff=32, emb_dropout=0.1, attn_dropout=0.1,
                 resid_dropout=0.1, ff_dropout=0.1)  # every kind of dropout draws its masks
    lm = DecoderLM(DecoderLMConfig(vocab_size=V, n_layers=2, tie_embeddings=True, **small))
    s2s = Seq2Seq(Seq2SeqConfig(src_vocab_size=V, tgt_vocab_size=V, n_enc_layers=1, n_dec_layers=1, **small))
    mlm = MaskedLM(EncoderConfig(vocab_size=V, n_layers=1, **small))
    prop = PropertyModel(PropertyModelConfig(vocab_size=V, n_layers=1, n_outputs=3, **small))
    nan = np.nan
    prop_examples = [([4, 5, 6], [1.0, nan, 0.0]), ([4, 7], [nan, 0.0, 1.0]), ([4, 8, 9, 10], [0.0, 1.0, 1.0])]
    # relative positions: the bias's lookup and scatter-add must not read the device either
    lm_rel = DecoderLM(DecoderLMConfig(vocab_size=V, n_layers=2, pos="relative", **small))
    s2s_rel = Seq2Seq(Seq2SeqConfig(src_vocab_size=V, tgt_vocab_size=V, n_enc_layers=1, n_dec_layers=1,
                                    pos="relative", **small))
    return [("LMTask", lm, LMTask(pad_id=PAD, label_smoothing=0.1), LM_EXAMPLES),
            ("Seq2SeqTask", s2s, Seq2SeqTask(pad_id=PAD), S2S_EXAMPLES),
            ("MLMTask", mlm, MLMTask(mask_id=MASK, vocab_size=V, special_ids=(PAD, BOS, EOS)), LM_EXAMPLES),
            ("PropertyTask", prop, PropertyTask(pad_id=PAD, pos_weight=[2.0, 1.0, 1.0]), prop_examples),
            ("LMTask, relative", lm_rel, LMTask(pad_id=PAD), LM_EXAMPLES),
            ("Seq2SeqTask, relative", s2s_rel, Seq2SeqTask(pad_id=PAD), S2S_EXAMPLES)]


@pytest.mark.parametrize("case", range(6))
def test_training_step_never_reads_the_device(case):
    """Loss, backward, clipping on the device and an Adam step under forbid_host_sync:
    the strict backend raises at any device-to-host read (float(), .item(), a boolean
    mask index ...), as CuPy would stall there."""
    from minitransformer.optim import Adam, clip_grad_norm
    backend.use("strict")
    name, model, task, examples = _step_cases()[case]
    model.train()
    optimizer = Adam(model, lr=1e-3)
    batch = task.collate(examples)  # host arrays, as the trainer makes them
    for step in range(2):  # the second step also covers Adam's moments being non-zero
        with devices.forbid_host_sync():
            loss, n_tokens = task.loss(model, batch, np.random.default_rng(step))
            model.zero_grad()
            task.backward(model)
            norm = clip_grad_norm(model, 1.0)
            optimizer.step()
        assert np.isfinite(float(loss)) and np.isfinite(float(norm)), f"{name}: step {step} not finite"
        assert n_tokens > 0, f"{name}: nothing scored"


def test_forbid_host_sync_catches_each_kind_of_read():
    backend.use("strict")
    a = backend.asarray(np.arange(6.0))
    reads = {"float": lambda: float(a[0]), "item": lambda: a[0].item(), "bool": lambda: bool(a[0] > 1),
             "int": lambda: int(a[1]), "to_numpy": lambda: backend.to_numpy(a), "get": lambda: a.get(),
             "mask index": lambda: a[a > 2], "nonzero": lambda: backend.xp.flatnonzero(a)}
    for what, read in reads.items():
        with devices.forbid_host_sync(), pytest.raises(HostSyncError):
            read()
        read()  # allowed again outside the block


@pytest.mark.parametrize("task_name", ["LMTask", "Seq2SeqTask", "MLMTask", "PropertyTask"])
def test_bad_batch_values_are_caught_on_the_host_before_the_copy(task_name):
    """On a GPU backend the device never checks values, so the host must: an id
    outside the vocabulary (or a label outside [0, 1]) fails with a clear error."""
    backend.use("strict")
    name, model, task, examples = {c[0]: c for c in _step_cases()}[task_name]
    if name == "PropertyTask":
        bad_examples = [([4, 5], [1.0, 2.0, nan]) for nan in [np.nan]]
        match = "labels must lie in \\[0, 1\\]"
    elif name == "Seq2SeqTask":
        bad_examples = [([BOS, V + 3, EOS], [BOS, 5, EOS])]
        match = f"token id {V + 3} is out of range"
    else:
        bad_examples = [[BOS, 5, V, EOS]]
        match = f"token id {V} is out of range"
    with pytest.raises(ValueError, match=match):
        task.loss(model, task.collate(bad_examples), np.random.default_rng(0))


# ---------------------------------------------------------------------------
# evaluate never reports a loss of nothing as 0.0
# ---------------------------------------------------------------------------
def test_evaluate_with_no_scored_tokens_raises():
    model = DecoderLM(DecoderLMConfig(vocab_size=V, max_len=16, d_model=16, n_heads=2, n_layers=1, d_ff=32))
    task = LMTask(pad_id=PAD)
    batch = task.collate([[BOS, PAD, PAD], [BOS, PAD]])  # every target is padding
    with pytest.raises(ValueError, match="no scored tokens"):
        task.evaluate(model, [batch])
    with pytest.raises(ValueError, match="no scored tokens"):
        task.evaluate(model, [])


# ---------------------------------------------------------------------------
# degenerate shapes: a clear error at the task, never a crash deep in the model
# ---------------------------------------------------------------------------
def test_pad_batch_of_no_sequences_is_a_clear_error():
    with pytest.raises(ValueError, match="no sequences"):
        pad_batch([], PAD)


@pytest.mark.parametrize("examples, match", [
    ([[BOS]], "example 0 has 1 token"),
    ([[BOS, 5, EOS], []], "example 1 has 0 tokens"),
    ([[BOS], [BOS]], "example 0 has 1 token"),
], ids=["bos_only", "empty", "all_bos_only"])
def test_lm_examples_without_a_target_are_refused(examples, match):
    """Before, a batch of BOS-only examples (T=1) crashed inside the model's id check."""
    with pytest.raises(ValueError, match=f"LMTask: {match} .*at least 2"):
        LMTask().collate(examples)


@pytest.mark.parametrize("shape", [(0, 5), (2, 1), (2, 0)])
def test_lm_loss_refuses_a_batch_without_targets(shape):
    with pytest.raises(ValueError, match=r"LMTask: the batch has shape .*\(B >= 1, T >= 2\)"):
        LMTask().loss(RecordingModel(), np.ones(shape, np.int64))


@pytest.mark.parametrize("examples, match", [
    ([([], [BOS, 5, EOS])], "example 0 has an empty source"),
    ([([4, 5], [BOS])], "example 0 has a target of 1 token"),
], ids=["empty_source", "bos_only_target"])
def test_seq2seq_examples_that_cannot_be_scored_are_refused(examples, match):
    with pytest.raises(ValueError, match=f"Seq2SeqTask: {match}"):
        Seq2SeqTask().collate(examples)


def test_seq2seq_loss_refuses_an_empty_source_batch():
    with pytest.raises(ValueError, match=r"Seq2SeqTask: the source batch has shape \(1, 0\)"):
        Seq2SeqTask().loss(RecordingModel(), (np.zeros((1, 0), np.int64), np.ones((1, 3), np.int64)))


def test_mlm_and_property_examples_need_tokens():
    from minitransformer.train.tasks import PropertyTask
    mlm = MLMTask(mask_id=MASK, vocab_size=V, special_ids=(PAD, BOS, EOS))
    with pytest.raises(ValueError, match="MLMTask: example 1 has 0 tokens"):
        mlm.collate([[BOS, 5], []])
    with pytest.raises(ValueError, match="PropertyTask: example 0 has 0 tokens"):
        PropertyTask().collate([([], [1.0])])


def test_property_labels_of_different_lengths_are_a_clear_error():
    from minitransformer.train.tasks import PropertyTask
    with pytest.raises(ValueError, match=r"PropertyTask: example 1 has 1 label\(s\), example 0 has 2"):
        PropertyTask().collate([([BOS, 4], [1.0, 0.0]), ([BOS, 5], [1.0])])
