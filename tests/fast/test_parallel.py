"""minitransformer.fast.engine.parallel: pieces cover the work exactly once, results do not depend
on the thread count, errors surface, BLAS's thread count comes back, and the
attention and GELU kernels that use it give the same numbers on 1 and 2 threads."""
import numpy as np
import pytest

from minitransformer import backend
from minitransformer.fast.engine import parallel
from minitransformer.fast.attention import attention_backward, attention_forward
from minitransformer.fast import fused_attention
from minitransformer.nn.attention import causal_mask
from minitransformer.fast.elementwise import gelu_forward


@pytest.fixture
def two_threads():
    """Use a pool of 2 for the test, then go back to what was set before."""
    before = parallel.threads()
    parallel.set_threads(2)
    yield
    parallel.set_threads(before)


@pytest.mark.parametrize("n, item_bytes", [(1, 10), (7, 1), (64, 1 << 16), (5, 1 << 30), (32, 3)])
def test_batch_slices_cover_the_range_once_in_order(n, item_bytes, two_threads):
    slices = parallel.batch_slices(n, item_bytes)
    covered = [i for sl in slices for i in range(n)[sl]]
    assert covered == list(range(n)), f"slices {slices} do not cover range({n}) exactly once in order"
    if n * item_bytes >= parallel.BLOCK_BYTES:
        assert len(slices) >= min(n, parallel.threads()), f"{len(slices)} pieces for {parallel.threads()} threads"
    else:
        assert len(slices) == 1, f"work below one block was cut into {len(slices)} pieces"
    largest = max(sl.stop - sl.start for sl in slices)
    assert largest == 1 or largest * item_bytes <= 2 * parallel.BLOCK_BYTES, f"piece of {largest} items"


@pytest.mark.parametrize("uses_blas", [False, True])
def test_parallel_for_runs_every_piece_once(uses_blas, two_threads):
    out = np.zeros(1000)
    pieces = parallel.batch_slices(1000, 4096)

    def fill(sl):
        out[sl] += np.arange(1000)[sl] ** 2

    parallel.parallel_for(fill, pieces, uses_blas=uses_blas)
    assert np.array_equal(out, np.arange(1000) ** 2), "a piece ran twice or not at all"


def test_parallel_for_raises_a_piece_error(two_threads):
    def fail(i):
        if i == 3:
            raise ValueError("piece 3 failed")

    with pytest.raises(ValueError, match="piece 3 failed"):
        parallel.parallel_for(fail, range(8))


def test_nested_parallel_for_runs_inline(two_threads):
    """A piece that itself calls parallel_for must not wait on the (busy) pool."""
    out = np.zeros((4, 8))

    def row(i):
        def cell(j):
            out[i, j] = 10 * i + j
        parallel.parallel_for(cell, range(8))

    parallel.parallel_for(row, range(4))
    assert np.array_equal(out, 10 * np.arange(4)[:, None] + np.arange(8)), "nested pieces lost"


def test_blas_thread_count_is_restored(two_threads):
    setter = parallel._blas_setter()
    if setter is None:
        pytest.skip("NumPy's BLAS is not OpenBLAS with openblas_set_num_threads_local")
    before = setter(3)  # 3 from now on; returns what was set
    try:
        parallel.parallel_for(lambda i: np.ones((64, 64)) @ np.ones((64, 64)), range(4), uses_blas=True)
        assert setter(before) == 3, "parallel_for(uses_blas=True) left BLAS's thread count changed"
    finally:
        setter(before)


def test_thread_settings_are_checked(monkeypatch):
    with pytest.raises(ValueError, match="positive integer"):
        parallel.set_threads(0)
    monkeypatch.setenv("MINITRANSFORMER_THREADS", "two")
    with pytest.raises(ValueError, match="MINITRANSFORMER_THREADS='two'"):
        parallel._default_threads()
    monkeypatch.setenv("MINITRANSFORMER_THREADS", "3")
    assert parallel._default_threads() == 3


def test_spinning_blas_threads_mean_one_thread(monkeypatch):
    """Without a short OPENBLAS_THREAD_TIMEOUT the pool would lose its cores: default 1."""
    monkeypatch.delenv("MINITRANSFORMER_THREADS", raising=False)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT", raising=False)
    assert parallel._default_threads() == 1
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "28")  # OpenBLAS's default: 0.1 s of spinning
    assert parallel._default_threads() == 1
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "22")
    assert parallel._default_threads() == (2 if parallel._blas_setter() is not None else 1)


def _attention_run(rng, mask, drop):
    B, H, T, dh = 12, 3, 40, 8
    q, k, v, do = (backend.asarray(rng.standard_normal((B, H, T, dh)), dtype=np.float32) for _ in range(4))
    dropout = None if not drop else backend.asarray(
        (rng.random((B, H, T, T)) > 0.2) / 0.8, dtype=np.float32)
    out, cache = attention_forward(q, k, v, mask=mask, dropout_mask=dropout)
    grads = attention_backward(do, cache)[:3]
    return [backend.to_numpy(a) for a in (out, cache.p, *grads)]


@pytest.mark.parametrize("mask_kind", ["none", "causal", "per-sequence"])
@pytest.mark.parametrize("drop", [False, True])
def test_attention_is_identical_on_one_and_two_threads(mask_kind, drop, any_backend, two_threads, monkeypatch):
    """Pieces (including small ones, forced here) give bit-for-bit the serial numbers. (The twin's
    pieces: with two threads on one OpenMP pool, attention would take its compiled loop instead.)"""
    monkeypatch.setattr(fused_attention, "enabled", lambda: False)
    rng = np.random.default_rng(0)
    mask = {"none": None, "causal": causal_mask(40),
            "per-sequence": backend.asarray(rng.random((12, 1, 40, 40)) > 0.3)}[mask_kind]
    runs = []
    for threads, block in ((1, 1 << 40), (2, 1 << 12)):  # one piece, then many small ones
        monkeypatch.setattr(parallel, "BLOCK_BYTES", block)
        parallel.set_threads(threads)
        runs.append(_attention_run(np.random.default_rng(1), mask, drop))
    for name, a, b in zip(("out", "p", "dq", "dk", "dv"), *runs):
        assert np.array_equal(a, b), (
            f"attention {name} differs between 1 piece and many: max |diff| "
            f"{np.max(np.abs(a - b)):.3g} at {np.unravel_index(np.argmax(np.abs(a - b)), a.shape)}")


def test_gelu_is_identical_on_one_and_two_threads(any_backend, two_threads):
    x = backend.asarray(np.random.default_rng(0).standard_normal((3, 1000, 300)) * 4, dtype=np.float32)
    runs = []
    for threads in (1, 2):
        parallel.set_threads(threads)
        runs.append([backend.to_numpy(a) for a in gelu_forward(x)])
    for name, a, b in zip(("y", "dy/dx"), *runs):
        assert np.array_equal(a, b), f"GELU {name} differs between 1 and 2 threads: max |diff| {np.max(np.abs(a - b)):.3g}"


def test_callers_on_several_threads_leave_blas_as_it_was(two_threads):
    """Two user threads running parallel sections at once must not leave BLAS on one
    thread (each section saves and restores the count; they take turns)."""
    import threading
    setter = parallel._blas_setter()
    if setter is None:
        pytest.skip("NumPy's BLAS is not OpenBLAS with openblas_set_num_threads_local")
    before = setter(2)
    try:
        def user():
            for _ in range(20):
                parallel.parallel_for(lambda i: np.ones((32, 32)) @ np.ones((32, 32)), range(4), uses_blas=True)
        workers = [threading.Thread(target=user) for _ in range(2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        assert setter(before) == 2, "concurrent parallel sections left BLAS's thread count changed"
    finally:
        setter(before)


def test_a_failing_piece_lets_the_others_finish(two_threads):
    import time
    done = np.zeros(6, dtype=bool)

    def piece(i):
        if i == 0:
            raise RuntimeError("piece 0 failed")
        time.sleep(0.01)
        done[i] = True

    with pytest.raises(RuntimeError, match="piece 0 failed"):
        parallel.parallel_for(piece, range(6))
    assert done[1:].all(), "parallel_for returned while pieces were still running"


def test_the_benchmarks_use_the_librarys_blas_timeouts():
    """benchmarks/blas_threads.py repeats the two timeouts (it must not import NumPy): same values."""
    import importlib.util
    from pathlib import Path
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "blas_threads.py"
    spec = importlib.util.spec_from_file_location("blas_threads_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.TIMEOUTS == {"train": str(parallel.TRAINING_THREAD_TIMEOUT),
                               "decode": str(parallel.DECODING_THREAD_TIMEOUT)}
    assert parallel.TRAINING_THREAD_TIMEOUT <= 22 and parallel.DECODING_THREAD_TIMEOUT <= 22  # the pool's rule
