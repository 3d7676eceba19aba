"""The fused GPU kernels (minitransformer/fast/engine/cuda.py) equal their references.

The tests marked ``gpu`` run the fast twins on CuPy (where they take the CUDA kernels)
and the reference kernels on CuPy, on the same inputs, in float64 and float32;
``tests/conftest.py`` skips them without a GPU. The others run anywhere: the kernels
stay off on NumPy and on the strict stand-in, and the CUDA source compiles with
``nvcc`` (where it is installed), so a syntax error shows before a GPU run.
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from minitransformer import backend, kernels
from minitransformer import functional as F
from minitransformer.fast.engine import cuda, cuda_flat

from cuda_helpers import MODEL_TOLERANCE, close, dev

SOURCES = {"cuda": cuda, "cuda_flat": cuda_flat}  # each module: its SOURCE and KERNELS, one RawModule

# ---------------------------------------------------------------------------
# Anywhere: off the GPU nothing here runs; the source compiles
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["numpy", "strict"])
def test_the_kernels_stay_off_without_cupy(name):
    backend.use(name)
    x = backend.xp.ones((3, 4), dtype=np.float32)
    assert not cuda.usable(x)


def test_the_environment_turns_them_off(monkeypatch):
    monkeypatch.setenv("MINITRANSFORMER_CUDA_KERNELS", "0")
    assert not cuda.enabled()
    monkeypatch.setenv("MINITRANSFORMER_CUDA_KERNELS", "1")
    assert cuda.enabled()


@pytest.mark.parametrize("module", SOURCES)
def test_the_cuda_source_compiles(tmp_path, module):
    """Every kernel, in float and double, through nvcc (the GPU compiles with NVRTC)."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not installed")
    module = SOURCES[module]
    names = [f"{k}<{t}>" for k in module.KERNELS for t in ("float", "double")]
    src = tmp_path / "kernels.cu"
    src.write_text(module.SOURCE + "\nvoid* kernels[] = {" + ", ".join(f"(void*){n}" for n in names) + "};\n")
    done = subprocess.run([nvcc, "-arch=sm_80", "-c", str(src), "-o", str(tmp_path / "k.o")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"nvcc failed:\n{done.stderr[-3000:]}"


def _find_nvrtc():
    """libnvrtc (and its builtins, loaded first) from the system or a pip wheel of CUDA, or None."""
    import ctypes
    import ctypes.util
    import glob
    import os
    import sys
    dirs = [d for p in sys.path if os.path.isdir(p) for d in glob.glob(os.path.join(p, "nvidia", "*", "lib"))]
    dirs += glob.glob("/usr/local/cuda*/lib64")
    for d in dirs:
        libs = sorted(glob.glob(os.path.join(d, "libnvrtc.so*")))
        builtins = sorted(glob.glob(os.path.join(d, "libnvrtc-builtins.so*")))
        if libs:
            for b in builtins:
                ctypes.CDLL(b, mode=ctypes.RTLD_GLOBAL)
            return ctypes.CDLL(libs[0])
    found = ctypes.util.find_library("nvrtc")
    return ctypes.CDLL(found) if found else None


@pytest.mark.parametrize("module", SOURCES)
def test_the_cuda_source_compiles_with_nvrtc(module):
    """As CuPy compiles it on the GPU: NVRTC, without the C library's headers (nvcc
    includes them, so a name like INFINITY passes nvcc and fails here)."""
    import ctypes
    lib = _find_nvrtc()
    if lib is None:
        pytest.skip("NVRTC is not installed")
    module = SOURCES[module]
    prog = ctypes.c_void_p()
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), module.SOURCE.encode(), b"cuda.cu", 0, None, None) == 0
    for name in (f"{k}<{t}>" for k in module.KERNELS for t in ("float", "double")):
        assert lib.nvrtcAddNameExpression(prog, name.encode()) == 0
    options = (ctypes.c_char_p * 1)(b"--gpu-architecture=compute_80")
    result = lib.nvrtcCompileProgram(prog, 1, options)
    size = ctypes.c_size_t()
    lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    lib.nvrtcGetProgramLog(prog, log)
    lib.nvrtcDestroyProgram(ctypes.byref(prog))
    assert result == 0, f"NVRTC failed:\n{log.value.decode()[-3000:]}"


# ---------------------------------------------------------------------------
# On a GPU: each kernel against its reference
# ---------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("shape", [(7, 5), (1,), (0, 3), (300, 257)])
@pytest.mark.parametrize("decay", [(0.0, False), (0.1, False), (0.1, True)])
def test_adam_update(on_gpu, launches, dtype, shape, decay):
    g = np.random.default_rng(sum(shape) + int(10 * decay[0]) + decay[1])
    weight_decay, decoupled = decay
    p, grad = g.standard_normal(shape), g.standard_normal(shape) * 1e-2
    m, v = g.standard_normal(shape) * 1e-3, g.random(shape) * 1e-4
    for step in (1, 7):
        args = dict(step=step, lr=3e-3, beta1=0.9, beta2=0.98, eps=1e-8, weight_decay=weight_decay,
                    decoupled=decoupled)
        ref = F.REFERENCE["adam_update"](dev(p, dtype), dev(grad, dtype), dev(m, dtype), dev(v, dtype), **args)
        arrays = [dev(a, dtype) for a in (p, grad, m, v)]
        out = F.FAST["adam_update"](*arrays, **args)
        assert out[0] is arrays[0] and out[1] is arrays[2] and out[2] is arrays[3], "not in place"
        for name, a, b in zip(("param", "m", "v"), out, ref):
            close(f"adam step {step} {name}", a, b, dtype)
    assert launches.get("adam_update", 0) == (2 if np.prod(shape) else 0)


def _layernorm_case(g, lead, D, offset=0.0, constant_rows=False):
    x = g.standard_normal(lead + (D,)) + offset
    if constant_rows and x.size:
        x.reshape(-1, D)[::2] = 0.7
    return x, g.standard_normal(D), g.standard_normal(D), g.standard_normal(lead + (D,))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("lead, D", [((2, 3), 5), ((4097,), 256), ((3, 70), 33), ((5,), 1), ((0,), 8), ((64, 2), 96)])
@pytest.mark.parametrize("eps", [1e-5, 0.5])
def test_layernorm_forward_and_backward(on_gpu, launches, dtype, lead, D, eps):
    g = np.random.default_rng(D + len(lead))
    x, w, b, dy = _layernorm_case(g, lead, D, offset=3.0, constant_rows=True)
    xd, wd, bd, dyd = (dev(a, dtype) for a in (x, w, b, dy))
    y_f, cache_f = F.FAST["layernorm_forward"](xd, wd, bd, eps=eps)
    y_r, cache_r = F.REFERENCE["layernorm_forward"](xd, wd, bd, eps=eps)
    dx_f, dw_f, db_f = F.FAST["layernorm_backward"](dyd, cache_f)
    dx_r, dw_r, db_r = F.REFERENCE["layernorm_backward"](dyd, cache_r)
    assert dw_f.dtype == dw_r.dtype == np.dtype(dtype) and dx_f.dtype == np.dtype(dtype)
    expected = 1 if x.size else 0
    assert launches.get("layernorm_forward", 0) == expected and launches.get("layernorm_backward_dx", 0) == expected
    if not x.size:  # no rows: empty outputs, and parameter gradients of zeros
        assert y_f.shape == x.shape and dx_f.shape == x.shape and not backend.to_numpy(dw_f).any()
        assert not backend.to_numpy(db_f).any()
        return
    # The scales are those of the terms each output is computed from (as in
    # test_fast_layernorm.py): xhat = (x - mu) rstd is a difference of terms of size |x|,
    # times rstd (0 up to the rounding of the mean on a constant row, where the float32
    # reference rounds and these float64 sums do not); dx carries xhat's error times the
    # row terms; dw and db are sums of N terms.
    rstd = float(backend.to_numpy(cache_r.rstd).max())
    xhat_scale = np.abs(x).max() * rstd
    close("layernorm xhat", cache_f.xhat, cache_r.xhat, dtype, scale=xhat_scale)
    close("layernorm y", y_f, y_r, dtype, scale=xhat_scale * np.abs(w).max() + np.abs(b).max())
    close("layernorm rstd", cache_f.rstd, cache_r.rstd, dtype)
    rows = x.size // D
    close("layernorm dx", dx_f, dx_r, dtype, scale=np.abs(dy).max() * np.abs(w).max() * rstd * (1 + xhat_scale))
    close("layernorm dw", dw_f, dw_r, dtype, scale=rows * np.abs(dy).max() * xhat_scale)
    close("layernorm db", db_f, db_r, dtype, scale=rows * np.abs(dy).max())


@pytest.mark.gpu
def test_layernorm_of_a_strided_input(on_gpu, launches):
    """A strided (non-contiguous) input and upstream gradient are read through contiguous copies."""
    g = np.random.default_rng(3)
    x = backend.asarray(g.standard_normal((40, 6, 3)))[..., :2]  # (40, 6, 2), strided
    dy = backend.asarray(g.standard_normal((40, 6, 3)))[..., 1:]  # (40, 6, 2), strided
    w, b = backend.asarray(g.standard_normal(2)), backend.asarray(g.standard_normal(2))
    assert not x.flags.c_contiguous and not dy.flags.c_contiguous
    y_f, cache_f = F.FAST["layernorm_forward"](x, w, b)
    y_r, cache_r = F.REFERENCE["layernorm_forward"](x, w, b)
    close("strided layernorm y", y_f, y_r, "float64")
    for name, a, b_ in zip(("dx", "dw", "db"), F.FAST["layernorm_backward"](dy, cache_f),
                           F.REFERENCE["layernorm_backward"](dy, cache_r)):
        close(f"strided layernorm {name}", a, b_, "float64", scale=240.0)
    assert launches.get("layernorm_forward") == 1 and launches.get("layernorm_backward_dx") == 1


@pytest.mark.gpu
def test_layernorm_backward_of_more_row_blocks_than_a_grid_holds(on_gpu, launches):
    """4,194,368 rows are 65,537 blocks of 64: more than grid y's 65,535 (the kernel loops).
    The oracle is the reference run in float64 on the same float32 inputs: the float32
    reference's own rounding (sums of 4.2M terms, and a dx that cancels) is larger than the
    fast kernel's, whose sums are float64. The features sit about 1 apart, so no row has
    a near-zero variance, whose dx would be ill-conditioned in any float32 code."""
    N, D = 4_194_368, 4
    g = np.random.default_rng(4)
    x32 = (g.standard_normal((N, D)) * 0.3 + np.arange(D)).astype("float32")   # (N, D)
    dy32 = g.standard_normal((N, D)).astype("float32")                         # (N, D)
    w32 = np.array([1.5, -0.5, 0.7, 1.1], dtype="float32")                    # (D,)
    b32 = np.array([0.1, 0.2, 0.0, -0.1], dtype="float32")                    # (D,)
    _, cache_f = F.FAST["layernorm_forward"](*(dev(a, "float32") for a in (x32, w32, b32)))
    _, cache_r = F.REFERENCE["layernorm_forward"](*(dev(a, "float64") for a in (x32, w32, b32)))
    dx_f, dw_f, db_f = F.FAST["layernorm_backward"](dev(dy32, "float32"), cache_f)
    dx_r, dw_r, db_r = F.REFERENCE["layernorm_backward"](dev(dy32, "float64"), cache_r)
    assert dx_f.dtype == dw_f.dtype == db_f.dtype == np.float32
    close("dx", dx_f, dx_r, "float32")
    close("dw", dw_f, dw_r, "float32")
    close("db", db_f, db_r, "float32")
    assert launches.get("layernorm_backward_params") == 1


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gelu_exact(on_gpu, launches, dtype):
    g = np.random.default_rng(5)
    x = np.concatenate([g.standard_normal(5000) * 3, [0.0, -0.0, 1e4, -1e4, 40.0, -40.0, 6.5, -6.5]])
    xd = dev(x.reshape(4, -1), dtype)
    y_f, dydx_f = F.FAST["gelu_forward"](xd)
    y_r, dydx_r = F.REFERENCE["gelu_forward"](xd)
    close("gelu y", y_f, y_r, dtype)
    close("gelu dy/dx", dydx_f, dydx_r, dtype)
    assert launches.get("gelu_exact") == 1


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("masked", ["none", "causal", "rows"])
@pytest.mark.parametrize("dropout", [False, True])
def test_attention_softmax(on_gpu, launches, dtype, masked, dropout):
    """Attention forward and backward (the softmax kernels), with no mask, a causal mask,
    and rows with every key masked (which give zeros, not NaN)."""
    g = np.random.default_rng(7)
    B, H, T, d = 3, 2, 37, 16
    q, k, v, dout = (dev(g.standard_normal((B, H, T, d)) * 2, dtype) for _ in range(4))
    mask = None
    if masked == "causal":
        mask = F.causal_mask(T)
    elif masked == "rows":
        keep = g.random((B, 1, T, T)) < 0.6
        keep[0, 0, 3] = False  # a fully masked row
        keep[2, 0, :, 5] = False  # a key nobody sees
        mask = backend.asarray(keep)
    drop = dev((g.random((B, H, T, T)) >= 0.2) / 0.8, dtype) if dropout else None
    out_f, cache_f = F.FAST["attention_forward"](q, k, v, mask=mask, dropout_mask=drop)
    out_r, cache_r = F.REFERENCE["attention_forward"](q, k, v, mask=mask, dropout_mask=drop)
    close("attention out", out_f, out_r, dtype)
    close("attention p", cache_f.p, cache_r.p, dtype, scale=1.0)
    if masked == "rows":
        p = backend.to_numpy(cache_f.p)
        assert (p[0, :, 3] == 0).all() and (p[2, :, :, 5] == 0).all()
        assert (p[~backend.to_numpy(mask).repeat(H, axis=1)] == 0).all(), "a masked key has probability > 0"
    grads_f = F.FAST["attention_backward"](dout, cache_f)[:3]
    grads_r = F.REFERENCE["attention_backward"](dout, cache_r)[:3]
    for name, a, b in zip(("dq", "dk", "dv"), grads_f, grads_r):
        close(f"attention {name}", a, b, dtype)
    assert launches.get("softmax_rows") == 1 and launches.get("softmax_backward_rows") == 1


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("max_norm", [None, 1e-3, 1e6])
def test_clip_grad_norm(on_gpu, launches, dtype, max_norm):
    """The fused clipping (fast/clip.py) against the reference chain: the norm, the
    scaled gradients; below the threshold they keep their values."""
    from minitransformer.nn import Parameter
    from minitransformer.optim import clip_grad_norm
    shapes = [(300, 70), (70,), (1,), (0, 4), (5, 3, 2)]
    results = {}
    for kernel_set in ("reference", "fast"):
        params = []
        for shape in shapes:
            p = Parameter(dev(np.zeros(shape), dtype))
            p.grad = dev(np.random.default_rng(sum(shape)).standard_normal(shape), dtype)
            params.append(p)
        with kernels.scope(kernel_set):
            norm = clip_grad_norm(params, max_norm)
        results[kernel_set] = (norm, [p.grad for p in params])
    (norm_r, grads_r), (norm_f, grads_f) = results["reference"], results["fast"]
    assert norm_f.shape == () and norm_f.dtype == norm_r.dtype
    close("clip norm", norm_f, norm_r, dtype)
    for shape, a, b in zip(shapes, grads_f, grads_r):
        close(f"clipped gradient {shape}", a, b, dtype)
    assert launches.get("sum_squares") == len(shapes)
    assert launches.get("scale_by", 0) == (0 if max_norm is None else len(shapes) - 1)  # the empty one: none


@pytest.mark.gpu
def test_clip_leaves_a_nan_gradient_untouched(on_gpu, launches):
    from minitransformer.nn import Parameter
    from minitransformer.optim import clip_grad_norm
    p, q = Parameter(dev(np.zeros(3), "float32")), Parameter(dev(np.zeros(2), "float32"))
    p.grad, q.grad = dev([1.0, np.nan, 2.0], "float32"), dev([3.0, 4.0], "float32")
    with kernels.scope("fast"):
        norm = clip_grad_norm([("p", p), ("q", q)], 1.0)
    assert np.isnan(float(norm))
    assert backend.to_numpy(q.grad).tolist() == [3.0, 4.0] and np.isnan(backend.to_numpy(p.grad)[1])
    assert launches.get("sum_squares") == 2  # the fused path ran (its scaling by 1 leaves them as they are)


def _same_nan(name, fast, ref):
    a, b = backend.to_numpy(fast), backend.to_numpy(ref)
    assert (np.isnan(a) == np.isnan(b)).all(), (f"{name}: NaN at {np.argwhere(np.isnan(a) != np.isnan(b))[:3].tolist()}"
                                                " in one set and not the other")
    assert np.allclose(a[~np.isnan(a)], b[~np.isnan(b)], rtol=1e-12, atol=1e-12), f"{name}: values differ"


@pytest.mark.gpu
def test_attention_softmax_of_nan_and_infinite_logits(on_gpu, launches):
    """A row with a NaN logit is NaN, as in the reference (a query of NaN must not vanish
    into zeros); a +inf logit makes its row NaN there too; a row of -inf gives zeros."""
    g = np.random.default_rng(8)
    q, k, v = (g.standard_normal((1, 2, 5, 4)) for _ in range(3))
    q[0, 0, 1] = np.nan  # every logit of row (0, 0, 1) is NaN
    q[0, 1, 2, 0] = np.inf  # row (0, 1, 2): inf and -inf logits, NaN after the shift
    bias = np.zeros((1, 2, 5, 5))
    bias[0, 1, 4] = -np.inf  # row (0, 1, 4): every logit -inf, zeros
    q, k, v, bias = (backend.asarray(a) for a in (q, k, v, bias))
    out_f, cache_f = F.FAST["attention_forward"](q, k, v, bias=bias)
    out_r, cache_r = F.REFERENCE["attention_forward"](q, k, v, bias=bias)
    _same_nan("p", cache_f.p, cache_r.p)
    _same_nan("out", out_f, out_r)
    assert np.isnan(backend.to_numpy(cache_f.p)[0, 0, 1]).all()
    assert (backend.to_numpy(cache_f.p)[0, 1, 4] == 0).all()
    assert launches.get("softmax_rows") == 1


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_attention_with_a_bias(on_gpu, launches, dtype):
    """The additive bias (relative positions) on the GPU path, with its gradient."""
    g = np.random.default_rng(9)
    q, k, v, dout = (dev(g.standard_normal((2, 3, 6, 4)), dtype) for _ in range(4))
    bias = dev(g.standard_normal((1, 3, 6, 6)), dtype)
    out_f, cache_f = F.FAST["attention_forward"](q, k, v, bias=bias, mask=F.causal_mask(6))
    out_r, cache_r = F.REFERENCE["attention_forward"](q, k, v, bias=bias, mask=F.causal_mask(6))
    close("biased attention out", out_f, out_r, dtype)
    for name, a, b in zip(("dq", "dk", "dv", "dbias"), F.FAST["attention_backward"](dout, cache_f),
                          F.REFERENCE["attention_backward"](dout, cache_r)):
        close(f"biased attention {name}", a, b, dtype)
    assert launches.get("softmax_rows") == 1 and launches.get("softmax_backward_rows") == 1


@pytest.mark.gpu
@pytest.mark.parametrize("values", [[1e20], [3e38, 3e38], [np.inf, 1.0]])
def test_clip_of_a_float32_gradient_whose_norm_overflows(on_gpu, values):
    """Its sum of squares beyond float32's range: the norm is inf in both sets, and the
    gradients are left as they are (the divergence signal is the same in both)."""
    from minitransformer.nn import Parameter
    from minitransformer.optim import clip_grad_norm
    out = {}
    for kernel_set in ("reference", "fast"):
        p = Parameter(dev(np.zeros(len(values)), "float32"))
        p.grad = dev(values, "float32")
        with kernels.scope(kernel_set):
            out[kernel_set] = (float(clip_grad_norm([p], 1.0)), backend.to_numpy(p.grad).tolist())
    assert out["fast"] == out["reference"] and out["fast"][0] == np.inf
    assert out["fast"][1] == np.float32(values).tolist()


def _three_steps(kernel_set: str) -> dict:
    """Weights after three float64 Adam steps of a small model with ``kernel_set``."""
    from minitransformer.models import DecoderLM, DecoderLMConfig
    from minitransformer.optim import Adam
    with kernels.scope(kernel_set), backend.dtype_scope("float64"):
        model = DecoderLM(DecoderLMConfig(vocab_size=11, max_len=8, d_model=16, n_heads=2, n_layers=2, d_ff=32))
        opt = Adam(model, lr=1e-2, weight_decay=0.01)
        ids = backend.asarray(np.random.default_rng(1).integers(0, 11, (3, 8)))
        for _ in range(3):
            logits = model(ids)  # (3, 8, 11)
            loss, cache = F.cross_entropy_forward(logits, ids)
            model.zero_grad()
            model.backward(F.cross_entropy_backward(1.0, cache))
            opt.step()
        return {n: backend.to_numpy(p.data) for n, p in model.named_parameters()}


def test_three_steps_agree_on_the_cpu():
    """The check below, on NumPy: the two sets agree there too (and the helper runs)."""
    ref, fast = _three_steps("reference"), _three_steps("fast")
    assert ref.keys() == fast.keys() and len(ref) > 10
    for name in ref:
        close(f"weights {name}", fast[name], ref[name], "float64", scale=1.0, tol=MODEL_TOLERANCE)


@pytest.mark.gpu
def test_a_training_step_equals_the_reference_set(on_gpu, launches):
    """Three whole float64 steps of a small model on the GPU: the fast set (the fused
    kernels) and the reference set end at the same weights."""
    ref = _three_steps("reference")
    fast = _three_steps("fast")
    for name in ref:
        close(f"weights {name}", fast[name], ref[name], "float64", scale=1.0, tol=MODEL_TOLERANCE)
    assert {"adam_chunks", "layernorm_forward", "layernorm_backward_dx", "gelu_exact", "softmax_rows",
            "softmax_backward_rows"} <= set(launches)
    assert launches["adam_chunks"] == 3 and "adam_update" not in launches  # one launch a step: the flat layout
