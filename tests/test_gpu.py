"""CuPy against NumPy: the same kernels and models give the same numbers on the GPU.

Every test here is marked ``gpu``; ``tests/conftest.py`` skips them when CuPy or a
GPU is missing (CI has neither). Run them with ``pytest -m gpu`` on a GPU machine.
"""
import numpy as np
import pytest

from minitransformer import backend, devices, kernels
from minitransformer import functional as F

pytestmark = pytest.mark.gpu


def _run(name, fn):
    """``fn()`` in float64 on backend ``name``: on NumPy with the reference kernels (the
    oracle; the CPU's fast GELU is a table within 1e-8 of it), on CuPy with the
    selected set (the fast one, with the fused kernels of fast/engine/cuda.py, by default)."""
    backend.use(name)
    try:
        with backend.dtype_scope("float64"), kernels.scope("reference" if name == "numpy" else kernels.name()):
            out = fn()
        return [backend.to_numpy(o) for o in out]
    finally:
        backend.use("numpy")


def _compare(fn, rtol=1e-9, atol=1e-10):
    cpu, gpu = _run("numpy", fn), _run("cupy", fn)
    for i, (a, b) in enumerate(zip(cpu, gpu)):
        err = np.abs(a - b).max() if a.size else 0.0
        assert np.allclose(a, b, rtol=rtol, atol=atol), f"output {i}: max |cpu - gpu| = {err:.3e}"


def _host(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape)


def test_attention_matches_numpy():
    def fn():
        q, k, v = (backend.asarray(_host(s, 2, 3, 5, 4)) for s in (1, 2, 3))
        mask = F.combine_masks(F.causal_mask(5), backend.asarray(np.array([1, 1, 1, 0, 1], bool))[None, None, None])
        out, cache = F.attention_forward(q, k, v, mask)
        return (out, *F.attention_backward(backend.asarray(_host(4, 2, 3, 5, 4)), cache)[:3])
    _compare(fn)


def test_cross_entropy_and_embedding_match_numpy():
    def fn():
        logits = backend.asarray(_host(5, 3, 4, 9))
        targets = backend.asarray(np.array([[1, 2, 0, 0], [3, 3, 8, 0], [6, 5, 4, 7]]))
        loss, cache = F.cross_entropy_forward(logits, targets, ignore_index=0, label_smoothing=0.1)
        W = backend.asarray(_host(6, 9, 5))
        emb, ecache = F.embedding_forward(targets, W)
        return loss, F.cross_entropy_backward(1.0, cache), F.embedding_backward(emb, ecache)
    _compare(fn)


def test_relative_position_bias_matches_numpy():
    """The lookup (fancy indexing) and its scatter-add (cupy.add.at), and attention
    with the bias, on the GPU."""
    def fn():
        pos = backend.xp.arange(6)
        table = backend.asarray(_host(7, 3, 5))  # (H, 2M+1), M = 2
        bias, cache = F.relative_bias_forward(table, pos, pos, 2, True)
        dtable = F.relative_bias_backward(backend.asarray(_host(8, 3, 6, 6)), cache)
        q, k, v = (backend.asarray(_host(s, 2, 3, 6, 4)) for s in (1, 2, 3))
        out, acache = F.attention_forward(q, k, v, F.causal_mask(6), bias=bias[None])
        return (bias, dtable, out, *F.attention_backward(backend.asarray(_host(4, 2, 3, 6, 4)), acache))
    _compare(fn)


def test_decoder_lm_gradients_match_numpy():
    from minitransformer.models import DecoderLM, DecoderLMConfig

    def fn():
        model = DecoderLM(DecoderLMConfig(vocab_size=11, max_len=8, d_model=8, n_heads=2, n_layers=2,
                                          d_ff=16, tie_embeddings=True))
        ids = backend.asarray(np.array([[1, 4, 5, 6, 2, 0], [1, 7, 8, 2, 0, 0]]))
        logits = model(ids)
        loss, cache = F.cross_entropy_forward(logits[:, :-1], ids[:, 1:], ignore_index=0)
        model.backward(xp_pad(F.cross_entropy_backward(1.0, cache), logits.shape))
        return [logits, loss] + [p.grad for p in model.parameters()]
    _compare(fn)


def xp_pad(d, shape):
    """Place the (B, T-1, V) gradient into a (B, T, V) array of zeros."""
    out = backend.xp.zeros(shape, dtype=d.dtype)
    out[:, :-1] = d
    return out


def test_lm_training_step_does_not_synchronise_on_the_gpu():
    """CuPy's own check (cupyx.allow_synchronize(False), through forbid_host_sync)
    around a whole training step; tests/train/test_train_tasks.py proves the same on the strict
    stand-in for every task without a GPU."""
    from minitransformer.models import DecoderLM, DecoderLMConfig
    from minitransformer.optim import Adam, clip_grad_norm
    from minitransformer.train.tasks import LMTask

    backend.use("cupy")
    try:
        model = DecoderLM(DecoderLMConfig(vocab_size=11, max_len=8, d_model=8, n_heads=2, n_layers=2, d_ff=16,
                                          attn_dropout=0.1, resid_dropout=0.1))
        task, optimizer = LMTask(pad_id=0), Adam(model, lr=1e-3)
        batch = task.collate([[1, 4, 5, 6, 2], [1, 7, 8, 2]])
        for step in range(2):
            with devices.forbid_host_sync():
                loss, _ = task.loss(model, batch, np.random.default_rng(step))
                model.zero_grad()
                task.backward(model)
                clip_grad_norm(model, 1.0)
                optimizer.step()
            assert np.isfinite(float(loss))
    finally:
        backend.use("numpy")


def test_nccl_all_reduce_with_one_rank_keeps_the_gradients():
    """minitransformer.distributed on CuPy sums the flat gradient buffer with NCCL; with
    one rank the sum is the buffer itself, so the gradients come back unchanged."""
    pytest.importorskip("mpi4py")
    from minitransformer import distributed
    from minitransformer.models import DecoderLM, DecoderLMConfig
    from minitransformer.train.tasks import LMTask

    backend.use("cupy")
    try:
        dp = distributed.DataParallel()
        assert dp.size == 1 and dp._nccl is not None
        model = DecoderLM(DecoderLMConfig(vocab_size=11, max_len=8, d_model=8, n_heads=2, n_layers=1, d_ff=16))
        task = LMTask(pad_id=0)
        task.loss(model, task.collate([[1, 4, 5, 6, 2], [1, 7, 8, 2]]))
        model.zero_grad()
        task.backward(model)
        before = {n: backend.to_numpy(p.grad).copy() for n, p in model.named_parameters()}
        dp.allreduce_gradients(model)
        for n, p in model.named_parameters():
            np.testing.assert_array_equal(backend.to_numpy(p.grad), before[n], err_msg=n)
    finally:
        backend.use("numpy")
