"""The optimizer's flat layout (minitransformer/fast/engine/flat.py) changes no number.

With the fast set, Adam's first step lays every weight, gradient and moment out as a
view of a flat buffer. On the CPU the per-tensor kernels then run on those views, so a
run with the layout must equal one without it bit for bit (``MINITRANSFORMER_FLAT=0``),
through clipping, both kinds of weight decay, parameter groups, frozen tensors and
everything that rebinds a tensor (loading weights or an optimizer's state, a cast).
On a GPU (the tests marked ``gpu``) the one-launch Adam and clipping over the layout
(minitransformer/fast/engine/cuda_flat.py) equal the reference set's per-tensor chains.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from minitransformer import backend, kernels
from minitransformer import functional as F
from minitransformer.fast.engine import cuda_flat, flat
from minitransformer.fast import optimizer as fast_optimizer
from minitransformer.fast.optimizer import layout_of
from minitransformer.models import DecoderLM, DecoderLMConfig
from minitransformer.nn import Parameter
from minitransformer.optim import Adam, AdamW, clip_grad_norm

from cuda_helpers import close, dev

CONFIG = DecoderLMConfig(vocab_size=13, max_len=8, d_model=16, n_heads=2, n_layers=2, d_ff=32,
                         tie_embeddings=True)


def _model(seed=0):
    with backend.dtype_scope("float64"):
        return DecoderLM(dataclasses.replace(CONFIG, seed=seed))


def _batch(step):
    return backend.asarray(np.random.default_rng(100 + step).integers(0, CONFIG.vocab_size, (3, 8)))  # (3, 8)


def _train_step(model, opt, step, clip=0.05):
    """One step as the trainer takes it: zero, forward, loss, backward, clip, update."""
    ids = _batch(step)
    logits = model(ids)  # (3, 8, V)
    loss, cache = F.cross_entropy_forward(logits, ids)
    fast_optimizer.zero_grad(model, opt)
    model.backward(F.cross_entropy_backward(1.0, cache))
    clip_grad_norm(model, clip)
    opt.step()


def _trainable(opt) -> list:
    return [(n, p) for n, p in opt.params.items() if p.requires_grad]


def _weights(model) -> dict:
    return {n: backend.to_numpy(p.data).copy() for n, p in model.named_parameters()}


def _state(opt) -> dict:
    return {(n, k): backend.to_numpy(a).copy() for n, st in opt.state.items() for k, a in st.items()}


def _same_bits(what, a: dict, b: dict):
    assert a.keys() == b.keys(), f"{what}: different tensors"
    for key in a:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, f"{what} {key}: dtype or shape"
        if not np.array_equal(a[key], b[key]):
            err = np.abs(a[key].astype(np.float64) - b[key].astype(np.float64))
            where = np.unravel_index(err.argmax(), err.shape)
            raise AssertionError(f"{what} {key}: differs by up to {err.max():.3e} at {where}")


def _run(monkeypatch, flat_on: bool, make_opt, steps=4, between=None):
    """Weights and moments after ``steps`` fast-set steps, the layout on or off;
    ``between(model, opt, step)`` may change things before each step."""
    monkeypatch.setenv("MINITRANSFORMER_FLAT", "1" if flat_on else "0")
    with kernels.scope("fast"), backend.dtype_scope("float64"):
        model = _model()
        opt = make_opt(model)
        for step in range(steps):
            if between is not None:
                between(model, opt, step)
            _train_step(model, opt, step)
        assert (layout_of(opt) is not None) == flat_on
        return _weights(model), _state(opt), opt


OPTIMIZERS = {
    "adam": lambda m: Adam(m, lr=1e-2),
    "adam, L2 decay, exempt biases": lambda m: Adam(m, lr=1e-2, weight_decay=0.1, no_decay=lambda n, p: "b" in n),
    "adamw, groups of their own rate and decay": lambda m: AdamW(
        [{"params": list(m.named_parameters())[:3], "lr": 3e-2, "weight_decay": 0.3},
         {"params": list(m.named_parameters())[3:]}], lr=1e-2, weight_decay=0.1),
    "adamw": lambda m: AdamW(m, lr=1e-2, weight_decay=0.1),
}


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_the_layout_changes_no_bit(monkeypatch, name):
    on_w, on_s, _ = _run(monkeypatch, True, OPTIMIZERS[name])
    off_w, off_s, _ = _run(monkeypatch, False, OPTIMIZERS[name])
    _same_bits("weights", on_w, off_w)
    _same_bits("moments", on_s, off_s)


def test_every_tensor_is_a_view_of_its_segment(monkeypatch):
    _, _, opt = _run(monkeypatch, True, OPTIMIZERS["adamw"], steps=1)
    layout = layout_of(opt)
    assert layout.keys == ("m", "v") and len(layout.params) == len(opt.params) > 10
    for name, p, o, n in zip(layout.names, layout.params, layout.offsets, layout.sizes):
        assert o % flat.ALIGN == 0 and p.data.size == n
        for tensor, buffer in ((p.data, layout.data), (p.grad, layout.grad),
                               (opt.state[name]["m"], layout.state["m"]), (opt.state[name]["v"], layout.state["v"])):
            assert tensor.base is buffer and tensor.flags.c_contiguous, f"{name}: not a view of the buffer"
            assert np.array_equal(buffer[o:o + n], tensor.ravel())
    gaps = np.ones(layout.data.size, dtype=bool)
    for o, n in zip(layout.offsets, layout.sizes):
        gaps[o:o + n] = False
    assert gaps.any(), "the test model should leave alignment gaps"
    for buffer in (layout.data, layout.grad, layout.state["m"], layout.state["v"]):
        assert not buffer[gaps].any(), "a gap between segments is not zero"


def test_a_tied_weight_is_one_segment(monkeypatch):
    """The embedding shared with the output layer is laid out once (its gradient, the
    sum of both uses, is checked bit for bit by the tests above: CONFIG ties them)."""
    _, _, opt = _run(monkeypatch, True, OPTIMIZERS["adam"], steps=1)
    model_params = layout_of(opt).params
    assert len({id(p) for p in model_params}) == len(model_params)
    assert CONFIG.tie_embeddings and len(model_params) == len(_model().parameters())


def test_the_layout_is_kept_while_nothing_is_rebound(monkeypatch):
    layouts = []
    _run(monkeypatch, True, OPTIMIZERS["adam"], steps=4, between=lambda m, o, s: layouts.append(layout_of(o)))
    assert layouts[0] is None and layouts[1] is not None and layouts[1] is layouts[2] is layouts[3]


REBINDINGS = {  # (model, optimizer, the optimizer's state saved after step 0)
    "the model's weights loaded": lambda model, opt, saved: model.load_state_dict(_model(seed=1).state_dict()),
    "the optimizer's state of step 1 loaded": lambda model, opt, saved: opt.load_state_dict(saved),
    "a cast to float32 (the moments follow at the step)": lambda model, opt, saved: model.astype("float32"),
}


@pytest.mark.parametrize("what", REBINDINGS)
def test_a_rebound_tensor_gets_a_new_layout(monkeypatch, what):
    """After step 2 something rebinds tensors: the next step lays out the new arrays
    (the old views would be stale) and the run still equals the run without a layout."""
    seen, saved = [], []

    def rebind(model, opt, step):
        if step == 1:
            saved.append(opt.state_dict())
        if step == 2:
            REBINDINGS[what](model, opt, saved[-1])
        seen.append(layout_of(opt))

    on_w, on_s, opt = _run(monkeypatch, True, OPTIMIZERS["adamw"], between=rebind)
    assert seen[3] is not seen[2] and seen[3] is not None and layout_of(opt).intact(_trainable(opt), opt.state)
    off_w, off_s, _ = _run(monkeypatch, False, OPTIMIZERS["adamw"], between=rebind)
    _same_bits("weights", on_w, off_w)
    _same_bits("moments", on_s, off_s)


def test_freezing_and_unfreezing(monkeypatch):
    """A frozen tensor leaves the layout, keeps its weights and moments, and its gradient
    is still zeroed; unfrozen, it rejoins; all as without a layout."""
    def toggler(record):
        def toggle(model, opt, step):
            p = model.embed.tok.weight  # (V, D), tied to the output layer
            if step == 1:
                p.requires_grad = False
                p.grad.fill(7.0)  # stale: the next zeroing must clear it
            if step == 2:
                record["grad"] = backend.to_numpy(p.grad).copy()
                record["left"] = layout_of(opt) is None or all(q is not p for q in layout_of(opt).params)
            if step == 3:
                p.requires_grad = True
        return toggle

    on, off = {}, {}
    on_w, on_s, opt = _run(monkeypatch, True, OPTIMIZERS["adam"], between=toggler(on), steps=5)
    off_w, off_s, _ = _run(monkeypatch, False, OPTIMIZERS["adam"], between=toggler(off), steps=5)
    assert on["left"], "a frozen tensor stayed in the layout"
    assert len(layout_of(opt).params) == len(opt.params), "the unfrozen tensor did not rejoin"
    assert not (on["grad"] == 7.0).any(), "the frozen gradient was not zeroed"
    _same_bits("frozen gradient", {"g": on["grad"]}, {"g": off["grad"]})
    _same_bits("weights", on_w, off_w)
    _same_bits("moments", on_s, off_s)


def test_a_frozen_tensor_leaves_the_old_buffers(monkeypatch):
    """Rebuilt without a tensor frozen since, the new layout copies it out of the old
    buffers, so they are not kept alive by its views."""
    def freeze(model, opt, step):
        if step == 2:
            model.embed.tok.weight.requires_grad = False

    _, _, opt = _run(monkeypatch, True, OPTIMIZERS["adam"], between=freeze)
    p = opt.params["embed.tok.weight"]
    assert not layout_of(opt).holds(p) and p.data.base is None and p.grad.base is None
    assert all(a.base is None for a in opt.state["embed.tok.weight"].values())


def test_a_copy_lays_out_its_own(monkeypatch):
    """``copy.deepcopy`` of a model and its optimizer: the copy leaves the layout behind
    (copied views would be cut off from copied buffers), makes its own at its next
    step, and trains exactly as the original."""
    import copy
    monkeypatch.setenv("MINITRANSFORMER_FLAT", "1")
    with kernels.scope("fast"), backend.dtype_scope("float64"):
        model = _model()
        opt = OPTIMIZERS["adamw"](model)
        _train_step(model, opt, 0)
        model2, opt2 = copy.deepcopy((model, opt))
        assert layout_of(opt2) is None and layout_of(opt) is not None
        for step in (1, 2):
            _train_step(model, opt, step)
            _train_step(model2, opt2, step)
        assert layout_of(opt2) is not None and layout_of(opt2) is not layout_of(opt)
        assert layout_of(opt2).intact(_trainable(opt2), opt2.state)
    _same_bits("weights of the copy", _weights(model2), _weights(model))
    _same_bits("moments of the copy", _state(opt2), _state(opt))


def test_a_second_optimizer_over_the_same_tensors_keeps_its_own_arrays(monkeypatch):
    """Two optimizers over one model: the first keeps its layout, the second takes none
    (else each would take the tensors back at every step)."""
    monkeypatch.setenv("MINITRANSFORMER_FLAT", "1")
    with kernels.scope("fast"), backend.dtype_scope("float64"):
        model = _model()
        first, second = Adam(model, lr=1e-2), Adam(model, lr=1e-3)
        _train_step(model, first, 0)
        layout = layout_of(first)
        for step in (1, 2):
            _train_step(model, second, step)
            _train_step(model, first, step)
        assert layout_of(second) is None and layout_of(first) is layout


def test_zero_grad_also_clears_what_the_optimizer_does_not_hold(monkeypatch):
    """The trainer's zeroing: the optimizer's gradients in one fill, the model's
    others (here: a parameter left out of the optimizer) one by one."""
    monkeypatch.setenv("MINITRANSFORMER_FLAT", "1")
    with kernels.scope("fast"), backend.dtype_scope("float64"):
        model = _model()
        named = list(model.named_parameters())
        opt = Adam(named[1:], lr=1e-2)
        _train_step(model, opt, 0)
        for _, p in named:
            p.grad.fill(3.0)
        fast_optimizer.zero_grad(model, opt)
        assert layout_of(opt) is not None
        for name, p in named:
            assert not p.grad.any(), f"{name}: gradient not zeroed"


def test_zero_grad_leaves_a_gradient_outside_the_model_as_it_is(monkeypatch):
    """An optimizer may hold a tensor the model does not (a task's own weight): zeroing the
    model's gradients leaves that one's as it is, with the layout as without it."""
    monkeypatch.setenv("MINITRANSFORMER_FLAT", "1")
    with kernels.scope("fast"), backend.dtype_scope("float64"):
        model = _model()
        extra = Parameter(backend.asarray(np.ones(3)))  # (3,) not one of the model's
        opt = Adam(list(model.named_parameters()) + [("task.extra", extra)], lr=1e-2)
        _train_step(model, opt, 0)
        assert layout_of(opt) is not None
        extra.grad[...] = 5.0
        for p in model.parameters():
            p.grad.fill(3.0)
        fast_optimizer.zero_grad(model, opt)
        assert np.array_equal(backend.to_numpy(extra.grad), np.full(3, 5.0)), "task.extra: gradient zeroed"
        for name, p in model.named_parameters():
            assert not p.grad.any(), f"{name}: gradient not zeroed"


def test_an_optimizer_with_an_update_of_its_own_keeps_its_arrays(monkeypatch):
    """A subclass of Adam that overrides ``_update`` may rebind its arrays: it is not laid
    out, nor is one that says ``_flat_layout = False``, while AdamW (Adam's update,
    decoupled decay) is."""
    class Rebinding(Adam):
        def _update(self, name, p, state, lr):
            p.data = p.data - lr * p.grad  # (*p.shape) a new array each step

    class OptedOut(Adam):
        _flat_layout = False

    monkeypatch.setenv("MINITRANSFORMER_FLAT", "1")
    with kernels.scope("fast"), backend.dtype_scope("float64"):
        for cls, laid_out in ((Rebinding, False), (OptedOut, False), (AdamW, True)):
            model = _model()
            opt = cls(model, lr=1e-2)
            _train_step(model, opt, 0)
            assert (layout_of(opt) is not None) == laid_out, cls.__name__


def test_covering_asks_for_exactly_the_layouts_gradients(monkeypatch):
    _, _, opt = _run(monkeypatch, True, OPTIMIZERS["adam"], steps=1)
    params = list(layout_of(opt).params)
    assert flat.covering(params) is layout_of(opt)
    assert flat.covering(params[::-1]) is layout_of(opt)  # any order
    assert flat.covering(params[1:]) is None  # a subset: a sum over the buffer would be wrong
    params[1].data = params[1].data.copy()  # a weight rebound: the buffer no longer holds it
    assert flat.covering(params) is None
    params[1].data = layout_of(opt)._views[1][1]
    assert flat.covering(params) is layout_of(opt)
    params[0].grad = params[0].grad.copy()  # a gradient rebound
    assert flat.covering(params) is None


def test_the_deferred_finite_checks_over_the_layout(monkeypatch):
    """The trainer's checks without a host read: over the buffers where the optimizer's
    layout holds the whole model, with the answers of the per-tensor checks."""
    from minitransformer.train.divergence import drop_gradients_unless_finite, weights_finite
    _, _, opt = _run(monkeypatch, True, OPTIMIZERS["adam"], steps=1)
    model = type("Model", (), {"parameters": lambda self: list(opt.params.values())})()
    assert flat.covering(model.parameters()) is layout_of(opt)
    assert bool(weights_finite(model))
    p = layout_of(opt).params[2]
    p.data.flat[3] = np.nan
    assert not bool(weights_finite(model))
    p.data.flat[3] = 0.0
    for q in opt.params.values():
        q.grad.fill(2.0)
    drop_gradients_unless_finite(model, np.float64(1.0), np.float64(5.0))  # finite: kept
    assert all((q.grad == 2.0).all() for q in opt.params.values())
    drop_gradients_unless_finite(model, np.float64(np.nan), np.float64(5.0))  # a NaN loss: dropped
    assert not any(q.grad.any() for q in opt.params.values())


def test_no_layout_where_it_cannot_be_made(monkeypatch):
    def named(*dtypes):
        out = [(f"p{i}", Parameter(backend.xp.ones(3, dtype=dt))) for i, dt in enumerate(dtypes)]
        return out, {f"p{i}": {"m": backend.xp.zeros(3, dtype=dt)} for i, dt in enumerate(dtypes)}

    monkeypatch.setenv("MINITRANSFORMER_FLAT", "1")
    assert flat.flatten(None, *named("float64", "float64"), ("m",)) is not None
    assert flat.flatten(None, *named("float64", "float32"), ("m",)) is None  # mixed dtypes
    assert flat.flatten(None, [], {}, ("m",)) is None  # nothing to lay out
    host = named("float64")
    backend.use("strict")  # the CPU stand-in for CuPy
    try:
        assert flat.flatten(None, *host, ("m",)) is None  # arrays of another backend than the active one
        pairs, states = named("float32", "float32")
        layout = flat.flatten(None, pairs, states, ("m",))  # on the stand-in: made with xp only
        assert layout is not None and backend.to_numpy(layout.data).sum() == 6.0
        assert flat.flatten(layout, pairs, states, ("m",)) is layout
    finally:
        backend.use("numpy")
    monkeypatch.setenv("MINITRANSFORMER_FLAT", "0")
    assert flat.flatten(None, *named("float64"), ("m",)) is None  # switched off


def test_the_reference_set_keeps_separate_arrays(monkeypatch):
    monkeypatch.setenv("MINITRANSFORMER_FLAT", "1")
    with kernels.scope("reference"), backend.dtype_scope("float64"):
        model = _model()
        opt = Adam(model, lr=1e-2)
        _train_step(model, opt, 0)
    assert layout_of(opt) is None


@pytest.mark.parametrize("sizes", [[5, 0, 8192, 8193, 1, 20000], [0], [1]])
def test_the_chunk_table_covers_every_element_once(sizes):
    offsets = list(np.cumsum([0] + [-(-n // flat.ALIGN) * flat.ALIGN for n in sizes[:-1]]))
    seg, begin, end = cuda_flat.chunk_table(offsets, sizes)
    assert seg.dtype == np.int32 and begin.dtype == end.dtype == np.int64
    assert ((end - begin) >= 1).all() and ((end - begin) <= cuda_flat.CHUNK).all()
    for s, (o, n) in enumerate(zip(offsets, sizes)):
        mine = seg == s
        covered = np.concatenate([np.arange(b, e) for b, e in zip(begin[mine], end[mine])] or [np.zeros(0, int)])
        assert np.array_equal(np.sort(covered), np.arange(o, o + n)), f"segment {s} of {n}: chunks miss or repeat"


# ---------------------------------------------------------------------------
# On a GPU: the kernels over the layout against the reference set
# ---------------------------------------------------------------------------
def _flat_case(dtype):
    """Parameters of several sizes (one spans three chunks, one is empty) with a gradient
    for each of four steps; the first is frozen for steps 1-2, so the segments' step
    counts differ."""
    g = np.random.default_rng(5)
    shapes = [(300, 70), (70,), (1,), (0, 4), (5, 3, 2)]
    params = [(f"w{i}", Parameter(dev(g.standard_normal(s), dtype))) for i, s in enumerate(shapes)]
    grads = [[g.standard_normal(s) * 10 ** -i for i, s in enumerate(shapes)] for _ in range(4)]
    return params, grads


FLAT_OPTIMIZERS = {
    "adam, L2 decay, exempt vectors": lambda ps: Adam(
        ps, lr=3e-3, betas=(0.9, 0.98), weight_decay=0.1, no_decay=lambda n, p: p.data.ndim < 2),
    "adamw, two groups": lambda ps: AdamW(
        [{"params": ps[:2], "lr": 1e-2, "weight_decay": 0.3}, {"params": ps[2:]}], lr=3e-3, weight_decay=0.1),
}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("kind", FLAT_OPTIMIZERS)
def test_adam_over_the_flat_layout(on_gpu, launches, monkeypatch, dtype, kind):
    """Four steps of the fast set's one-launch Adam (fast/engine/cuda_flat.py) against the
    reference set's per-tensor update: weights and moments, each segment with its own
    step count, rate and decay, across a freeze and an optimizer state loaded."""
    monkeypatch.setenv("MINITRANSFORMER_FLAT", "1")
    out = {}
    for kernel_set in ("reference", "fast"):
        params, grads = _flat_case(dtype)
        opt = FLAT_OPTIMIZERS[kind](params)
        with kernels.scope(kernel_set):
            for step, gs in enumerate(grads):
                params[0][1].requires_grad = step not in (1, 2)
                if step == 3:
                    opt.load_state_dict(saved)  # new moments, other values: a new layout
                for (_, p), grad in zip(params, gs):
                    p.grad[...] = dev(grad, dtype)  # in place, as a backward pass writes
                opt.step()
                if step == 0:
                    saved = opt.state_dict()
        assert (layout_of(opt) is not None) == (kernel_set == "fast")
        out[kernel_set] = ({n: p.data for n, p in params}, opt.state)
    (w_r, s_r), (w_f, s_f) = out["reference"], out["fast"]
    for name in w_r:
        close(f"flat adam weights {name}", w_f[name], w_r[name], dtype)
        for key in ("m", "v"):
            close(f"flat adam {key} {name}", s_f[name][key], s_r[name][key], dtype)
    assert launches.get("adam_chunks") == 4 and "adam_update" not in launches


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_clip_over_the_flat_layout(on_gpu, launches, monkeypatch, dtype):
    """The gradients of a laid-out optimizer: the norm is one launch over the chunks and
    the scaling one over the buffer; the same numbers as the reference chain."""
    monkeypatch.setenv("MINITRANSFORMER_FLAT", "1")
    params, grads = _flat_case(dtype)
    opt = Adam(params, lr=1e-3)
    with kernels.scope("fast"):
        opt.step()  # lays the tensors out
    assert layout_of(opt) is not None
    for (_, p), grad in zip(params, grads[1]):
        p.grad[...] = dev(grad, dtype)
    expected = [dev(grad, dtype) for grad in grads[1]]
    with kernels.scope("reference"):
        copies = [Parameter(dev(np.zeros(g.shape), dtype)) for g in expected]
        for c, g in zip(copies, expected):
            c.grad = g
        norm_r = clip_grad_norm(copies, 1e-2)
    launches.clear()
    with kernels.scope("fast"):
        norm_f = clip_grad_norm(params, 1e-2)
    close("flat clip norm", norm_f, norm_r, dtype)
    for (name, p), c in zip(params, copies):
        close(f"flat clipped gradient {name}", p.grad, c.grad, dtype)
    assert launches == {"sum_squares_chunks": 1, "scale_by": 1}
