"""The switch between the kernel sets: :func:`kernels.use`, :func:`kernels.scope`,
``MINITRANSFORMER_KERNELS``, ``minitransformer.functional`` following the switch,
and whole training steps that give the same loss and gradients under either set,
switched on one model that is never rebuilt."""
import os
import subprocess
import sys

import numpy as np
import pytest

import minitransformer
from minitransformer import backend, functional, kernels
from minitransformer.fast.attention import FastAttentionCache
from minitransformer.models import DecoderLM, DecoderLMConfig, Seq2Seq, Seq2SeqConfig
from minitransformer.nn.attention import AttentionCache
from minitransformer.nn.softmax import CrossEntropyLoss

REPO = os.path.dirname(os.path.dirname(os.path.abspath(minitransformer.__file__)))


@pytest.fixture(autouse=True)
def _restore_kernel_set():
    """Every test here ends on the kernel set it started with (the environment's)."""
    before = kernels.name()
    yield
    kernels.use(before)


def _tables():
    return functional.TABLES


# ---------------------------------------------------------------------------
# use, name, scope
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("kernel_set", kernels.KERNEL_SETS)
def test_use_sets_the_flag_the_layers_read(kernel_set):
    kernels.use(kernel_set)
    assert kernels.name() == kernel_set
    assert kernels.fast is (kernel_set == "fast")


def test_the_sets_differ_exactly_in_the_fast_twins():
    tables = _tables()
    differ = {n for n in functional.NAMES if tables["reference"][n] is not tables["fast"][n]}
    assert differ and all(tables["fast"][n].__module__.startswith("minitransformer.fast.") for n in differ)
    assert all(tables["reference"][n].__module__.startswith(("minitransformer.nn.", "minitransformer.optim."))
               for n in functional.NAMES)


@pytest.mark.parametrize("bad", ["Fast", "refernce", "", "numpy", None])
def test_use_rejects_an_unknown_set_and_changes_nothing(bad):
    kernels.use("reference")
    with pytest.raises(ValueError, match=r"unknown kernel set .*'reference'.*'fast'"):
        kernels.use(bad)
    assert kernels.name() == "reference" and not kernels.fast


def test_scope_switches_for_the_block_and_restores():
    kernels.use("fast")
    with kernels.scope("reference"):
        assert kernels.name() == "reference" and not kernels.fast
        with kernels.scope("fast"):  # nested
            assert kernels.name() == "fast"
        assert kernels.name() == "reference"
    assert kernels.name() == "fast" and kernels.fast


def test_scope_restores_after_an_error():
    kernels.use("reference")
    with pytest.raises(RuntimeError, match="inside"):
        with kernels.scope("fast"):
            raise RuntimeError("raised inside the scope")
    assert kernels.name() == "reference"


def test_scope_with_an_unknown_set_raises_before_switching():
    kernels.use("fast")
    with pytest.raises(ValueError, match="unknown kernel set"):
        with kernels.scope("slow"):
            pass  # pragma: no cover - not reached
    assert kernels.name() == "fast"


# ---------------------------------------------------------------------------
# MINITRANSFORMER_KERNELS
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("value, expected", [
    (None, "fast"), ("", "fast"), ("   ", "fast"), ("fast", "fast"), ("FAST", "fast"),
    ("reference", "reference"), (" Reference\n", "reference"),
])
def test_use_from_environment(monkeypatch, value, expected):
    kernels.use("reference" if expected == "fast" else "fast")  # start on the other set
    if value is None:
        monkeypatch.delenv("MINITRANSFORMER_KERNELS", raising=False)
    else:
        monkeypatch.setenv("MINITRANSFORMER_KERNELS", value)
    kernels.use_from_environment()
    assert kernels.name() == expected
    assert functional.softmax_forward is _tables()[expected]["softmax_forward"]


@pytest.mark.parametrize("value", ["fastest", "ref", "numpy", "reference,fast"])
def test_use_from_environment_rejects_a_bad_value(monkeypatch, value):
    kernels.use("reference")
    monkeypatch.setenv("MINITRANSFORMER_KERNELS", value)
    with pytest.raises(ValueError) as info:
        kernels.use_from_environment()
    message = str(info.value)
    for part in ("MINITRANSFORMER_KERNELS", repr(value.strip().lower()), "'reference'", "'fast'"):
        assert part in message, f"{part} missing from the error message: {message}"
    assert kernels.name() == "reference", "a bad value must leave the kernel set as it was"


def _python(code, value):
    env = {k: v for k, v in os.environ.items() if k != "MINITRANSFORMER_KERNELS"}
    if value is not None:
        env["MINITRANSFORMER_KERNELS"] = value
    env["PYTHONPATH"] = REPO + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("value, expected", [(None, "fast"), ("reference", "reference"), ("fast", "fast")])
def test_the_environment_is_read_at_import(value, expected):
    done = _python("import minitransformer.kernels as k; print(k.name())", value)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


def test_a_bad_environment_value_is_kept_for_the_command_to_refuse():
    """The import itself never fails on it (the command could not say it in one line then):
    the fast set is selected, the problem is kept, and the command refuses with it before any work
    (tests/cli/test_cli_errors.py)."""
    done = _python("import minitransformer; from minitransformer import kernels; "
                   "print(kernels.name()); print(kernels.ENVIRONMENT_PROBLEM)", "fastest")
    assert done.returncode == 0, done.stderr
    name, problem = done.stdout.strip().splitlines()
    assert name == "fast" and "MINITRANSFORMER_KERNELS='fastest' is not a kernel set" in problem
    assert "'reference'" in problem and "'fast'" in problem


# ---------------------------------------------------------------------------
# minitransformer.functional follows the switch
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("kernel_set", kernels.KERNEL_SETS)
def test_functional_follows_the_switch(kernel_set):
    kernels.use(kernel_set)
    table = _tables()[kernel_set]
    for name in functional.NAMES:
        assert getattr(functional, name) is table[name], f"functional.{name} is not the {kernel_set} kernel"
        assert name in dir(functional)


def test_a_name_imported_from_functional_keeps_its_kernel():
    """As documented: ``from minitransformer.functional import x`` binds the kernel of that moment."""
    kernels.use("fast")
    from minitransformer.functional import attention_forward
    kernels.use("reference")
    assert attention_forward is _tables()["fast"]["attention_forward"]
    assert functional.attention_forward is _tables()["reference"]["attention_forward"]


def test_functional_unknown_name():
    with pytest.raises(AttributeError, match="no attribute 'attention_fast'"):
        functional.attention_fast  # noqa: B018


# ---------------------------------------------------------------------------
# One model, two kernel sets: the same training step
# ---------------------------------------------------------------------------
V, PAD = 13, 0
LM_BATCH = np.array([[1, 5, 7, 3, 9, 12, 2],
                     [1, 4, 4, 2, 0, 0, 0],
                     [1, 10, 11, 6, 8, 2, 0]])
SRC_BATCH = np.array([[1, 3, 4, 5, 2, 0],
                      [1, 6, 2, 0, 0, 0],
                      [1, 7, 8, 9, 10, 2]])
SMALL = dict(d_model=16, n_heads=2, d_ff=24, max_len=12, emb_dropout=0.1, attn_dropout=0.1,
             resid_dropout=0.1, ff_dropout=0.1, seed=3)

# Tolerances of a whole step, relative to the largest entry of each gradient.
# gelu_tanh and relu: every fast kernel agrees with its reference to rounding.
STEP_RTOL = 1e-12
# Exact GELU: the fast table's documented bound allows |dy/dx - reference| up to
# 2e-8 |x| + 1e-10 per element (activations here have |x| < 10: < 2.1e-7), and
# the gradients of the layers below sum such differences; 1e-6 covers that bound.
STEP_RTOL_EXACT_GELU = 1e-6


def _perturb(model, seed):
    """Move every parameter (LayerNorm gains, zero biases) off its initial value."""
    g = np.random.default_rng(seed)
    for _, p in model.named_parameters():
        p.data = p.data + backend.asarray(g.standard_normal(tuple(p.shape)) * 0.1)


def _step(model, run):
    """One training step with dropout (the RNG rewound first, so both sets draw the same
    masks): forward, smoothed cross-entropy ignoring padding, backward. Returns the loss,
    every gradient (host copies) and the first attention layer's cache."""
    model.train()
    model.rng.load_state_dict({"seed": model.config.seed, "counter": 0})
    model.zero_grad()
    logits, targets = run(model)
    loss_fn = CrossEntropyLoss(ignore_index=PAD, label_smoothing=0.1)
    loss = loss_fn(logits, targets)
    model.backward(loss_fn.backward())
    grads = {name: np.array(backend.to_numpy(p.grad)) for name, p in model.named_parameters()}
    attn = next(m for m in model.modules() if type(m).__name__ == "MultiHeadAttention")
    return float(backend.to_numpy(loss)), grads, attn.cache["attn"]


def _lm(model):
    ids = backend.asarray(LM_BATCH)
    return model(ids[:, :-1]), ids[:, 1:]


def _seq2seq(model):
    src, tgt = backend.asarray(SRC_BATCH), backend.asarray(LM_BATCH)
    return model(src, tgt[:, :-1]), tgt[:, 1:]


def _build(kind, **opts):
    with backend.dtype_scope("float64"):
        if kind == "DecoderLM":
            model, run = DecoderLM(DecoderLMConfig(V, n_layers=2, **SMALL, **opts)), _lm
        else:
            model, run = Seq2Seq(Seq2SeqConfig(V, V, n_enc_layers=1, n_dec_layers=2, **SMALL, **opts)), _seq2seq
    _perturb(model, seed=5)
    return model, run


def _compare_steps(model, run, rtol, first="fast"):
    """The step under ``first``, then under the other set, on the same model (no rebuild)."""
    second = "reference" if first == "fast" else "fast"
    results = {}
    for kernel_set in (first, second):
        kernels.use(kernel_set)
        results[kernel_set] = _step(model, run)
    (loss_f, grads_f, cache_f), (loss_r, grads_r, cache_r) = results["fast"], results["reference"]
    # the switch took effect inside the existing layers
    assert isinstance(cache_f, FastAttentionCache) and isinstance(cache_r, AttentionCache)
    assert abs(loss_f - loss_r) <= rtol * abs(loss_r), f"loss: fast {loss_f!r}, reference {loss_r!r}"
    assert grads_f.keys() == grads_r.keys()
    worst = (0.0, None)
    for name in grads_r:
        f, r = grads_f[name], grads_r[name]
        scale = np.abs(r).max()
        assert scale > 0, f"{name}: zero gradient, the step does not reach it"
        err = np.abs(f - r).max() / scale
        worst = max(worst, (err, name))
        assert err <= rtol, (
            f"{name}: fast and reference gradients differ by {err:.3g} of the largest entry "
            f"(allowed {rtol:g}) at {np.unravel_index(np.argmax(np.abs(f - r)), r.shape)}")
    return worst


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("activation", ["gelu_tanh", "relu"])
@pytest.mark.parametrize("kind", ["DecoderLM", "Seq2Seq"])
def test_training_step_is_the_same_under_both_sets(kind, activation, norm):
    model, run = _build(kind, activation=activation, norm=norm, tie_embeddings=(norm == "pre"))
    _compare_steps(model, run, STEP_RTOL)


@pytest.mark.parametrize("kind", ["DecoderLM", "Seq2Seq"])
def test_training_step_with_exact_gelu_within_the_table_bound(kind):
    model, run = _build(kind, activation="gelu", norm="pre", pos="sinusoidal")
    _compare_steps(model, run, STEP_RTOL_EXACT_GELU)


def test_switching_back_and_forth_needs_no_rebuild():
    """reference -> fast -> reference on one model: the layers read the switch on every
    call, and each set gives its own result again."""
    model, run = _build("DecoderLM", activation="gelu_tanh")
    kernels.use("reference")
    loss_1, grads_1, cache_1 = _step(model, run)
    kernels.use("fast")
    _, _, cache_2 = _step(model, run)
    kernels.use("reference")
    loss_3, grads_3, cache_3 = _step(model, run)
    assert type(cache_1) is AttentionCache and type(cache_2) is FastAttentionCache and type(cache_3) is AttentionCache
    assert loss_1 == loss_3
    for name in grads_1:
        np.testing.assert_array_equal(grads_1[name], grads_3[name], err_msg=name)


def _split_step(model, run, forward_set, backward_set):
    """One step whose forward runs under ``forward_set`` and whose backward is called after
    switching to ``backward_set``: the loss and every gradient (host copies)."""
    model.train()
    model.rng.load_state_dict({"seed": model.config.seed, "counter": 0})
    model.zero_grad()
    kernels.use(forward_set)
    logits, targets = run(model)
    loss_fn = CrossEntropyLoss(ignore_index=PAD, label_smoothing=0.1)
    loss = loss_fn(logits, targets)
    kernels.use(backward_set)  # between the forward and its backward
    model.backward(loss_fn.backward())
    return float(backend.to_numpy(loss)), {n: np.array(backend.to_numpy(p.grad)) for n, p in model.named_parameters()}


@pytest.mark.parametrize("forward_set, backward_set", [("fast", "reference"), ("reference", "fast")])
@pytest.mark.parametrize("kind", ["DecoderLM", "Seq2Seq"])
def test_a_backward_after_a_switch_runs_the_set_that_made_the_cache(kind, forward_set, backward_set):
    """A forward under one set, then its backward after switching to the other,
    gives the gradients of a step run wholly under the forward's set (the fast caches carry
    their own types, and each layer sends a cache back through its own file; only the
    embedding's scatter-add, whose forward both sets share, may add in another order).
    Before, the reference backward was handed a fast cache and failed to unpack it."""
    model, run = _build(kind, activation="gelu_tanh", norm="pre", tie_embeddings=True)
    loss_split, grads_split = _split_step(model, run, forward_set, backward_set)
    loss_whole, grads_whole = _split_step(model, run, forward_set, forward_set)
    assert loss_split == loss_whole
    for name in grads_whole:
        split, whole = grads_split[name], grads_whole[name]
        err = np.abs(split - whole).max() / np.abs(whole).max()
        assert err <= STEP_RTOL, f"{name}: differs by {err:.3g} of its largest entry after the switch"
