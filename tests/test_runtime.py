"""Every run says what ran: the kernel set, whether its compiled kernels are active, the BLAS kernel."""
import json

import pytest

from minitransformer import kernels, runtime
from minitransformer.fast.engine import compiled


def test_describe_names_the_kernels_and_the_blas_library():
    d = runtime.describe()
    assert d["backend"] == "numpy" and d["kernels"] == kernels.name()
    assert d["blas"] and all(b["library"] for b in d["blas"]), d["blas"]
    assert json.loads(json.dumps(d)) == d, "provenance.json must hold it as it is"


def test_without_numba_the_line_says_the_fast_kernels_are_not_compiled(monkeypatch):
    monkeypatch.setattr(compiled, "AVAILABLE", False)
    with kernels.scope("fast"):
        d = runtime.describe()
        line = runtime.summary_line(d)
    assert d["compiled"] is False and "pip install numba" in d["compiled_note"]
    assert "NOT compiled" in line and "pip install numba" in line, line


def test_with_numba_the_line_says_compiled(monkeypatch):
    if not compiled.AVAILABLE:
        import pytest
        pytest.skip("Numba is not installed here")
    with kernels.scope("fast"):
        line = runtime.summary_line()
    assert "compiled (Numba" in line and "NOT" not in line, line


def test_the_reference_kernels_have_nothing_to_compile():
    with kernels.scope("reference"):
        d = runtime.describe()
    assert d["kernels"] == "reference" and d["compiled"] is False
    assert "compiled" not in runtime.summary_line(d).split("BLAS")[0].split("kernels:")[1]


def test_a_blas_pin_is_reported_with_what_to_do(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    d = runtime.describe()
    assert d["blas_pins"]["OPENBLAS_CORETYPE"] == "Haswell"
    assert "OPENBLAS_CORETYPE=Haswell" in runtime.summary_line(d) and "unset" in runtime.summary_line(d)
    monkeypatch.delenv("OPENBLAS_CORETYPE")
    monkeypatch.delenv("OPENBLAS_L2_SIZE", raising=False)
    assert "pinned" not in runtime.summary_line()


def test_provenance_records_the_runtime(tmp_path, capsys):
    from minitransformer.cli.provenance import write_provenance
    path = write_provenance(tmp_path, ["train", "lm"], 0, None)
    record = json.loads(path.read_text())
    assert record["versions"]["runtime"]["kernels"] == kernels.name()
    assert "kernels:" in capsys.readouterr().out, "the start of a training run prints what runs"


def test_the_attention_loop_is_reported_when_on():
    from minitransformer.fast import fused_attention
    from minitransformer.fast.engine import compiled
    if not compiled.AVAILABLE or kernels.name() != "fast":
        pytest.skip("needs Numba and the fast kernels")
    try:
        fused_attention.set_enabled(False)
        assert "attention loop" not in runtime.summary_line()
        fused_attention.set_enabled(True)
        assert "attention loop" in runtime.summary_line()
    finally:
        fused_attention.set_enabled(None)  # the default


def test_the_blas_thread_timeout_is_reported(monkeypatch):
    """How long idle OpenBLAS threads spin changes a step's speed by 1.1-1.2x: it is said."""
    d = runtime.describe()
    if not any(b.get("library") == "openblas" for b in d["blas"]) or d["backend"] == "cupy":
        pytest.skip("needs OpenBLAS on the CPU")
    monkeypatch.setenv("OPENBLAS_THREAD_TIMEOUT", "8")
    assert runtime.describe()["blas_thread_timeout"] == "8"
    assert "sleep after 2^8 cycles" in runtime.summary_line()
    monkeypatch.delenv("OPENBLAS_THREAD_TIMEOUT")
    line = runtime.summary_line()
    assert "OPENBLAS_THREAD_TIMEOUT unset" in line and "minitransformer command" in line
