"""Fault injection: a full disk part way through writing a demo's output.

The demos wrote metrics.json, samples.smi and ``sample --out`` in place, so a full
disk left a truncated file where the good one had been. Every file now goes through
:mod:`minitransformer.atomic` (a temporary file, then a rename). Here the disk
"fills up" half way through the write of one named file, at both levels a write can
take (the atomic helper's temporary file, or ``Path.write_text``/``write_bytes`` in
place): the old file must be intact, no temporary file may remain, and the user sees
one line with exit status 1.
"""
import errno
import os
import pathlib
import shutil

import pytest

from minitransformer.cli import run_cli
from cli_helpers import one_line_error  # noqa: E402

pytest.importorskip("rdkit")
pytest.importorskip("matplotlib")

BASE = ["--quick", "--quiet", "--data", "druglike", "--pretrain-data", "none", "--samples", "10"]


def _no_space():
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


class _Proxy:
    """A module with some attributes replaced."""

    def __init__(self, real, **replaced):
        self._real = real
        self.__dict__.update(replaced)

    def __getattr__(self, name):
        return getattr(self._real, name)


class _FillsUp:
    """A file that takes the first half of the first write, then reports a full disk."""

    def __init__(self, f):
        self._f = f

    def write(self, data):
        self._f.write(data[: max(1, len(data) // 2)])
        self._f.flush()
        raise _no_space()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()
        return False

    def __getattr__(self, name):
        return getattr(self._f, name)


def disk_fills_up_writing(monkeypatch, name: str) -> list:
    """From now on, writing a file called ``name`` fails half way with ENOSPC; returns
    the list of paths whose write failed."""
    import minitransformer.atomic as atomic
    failed, temp_of = [], {}

    def open_(path, flags, *args):  # atomic_write makes its temporary file with os.open
        fd = os.open(path, flags, *args)
        temp_of[fd] = path
        return fd

    def fdopen(fd, *args, **kwargs):
        f = os.fdopen(fd, *args, **kwargs)
        path = temp_of.pop(fd, "")
        if os.path.basename(path).startswith(f".{name}."):  # atomic_write's temporary file for ``name``
            failed.append(path)
            return _FillsUp(f)
        return f

    monkeypatch.setattr(atomic, "os", _Proxy(os, fdopen=fdopen, open=open_))

    real_text, real_bytes = pathlib.Path.write_text, pathlib.Path.write_bytes

    def write_text(self, data, *args, **kwargs):  # an in-place write
        if self.name == name:
            failed.append(str(self))
            real_text(self, data[: len(data) // 2], *args, **kwargs)
            raise _no_space()
        return real_text(self, data, *args, **kwargs)

    def write_bytes(self, data):
        if self.name == name:
            failed.append(str(self))
            real_bytes(self, data[: len(data) // 2])
            raise _no_space()
        return real_bytes(self, data)
    monkeypatch.setattr(pathlib.Path, "write_text", write_text)
    monkeypatch.setattr(pathlib.Path, "write_bytes", write_bytes)
    return failed


def temporary_files(folder) -> list:
    return [p.name for p in pathlib.Path(folder).rglob("*") if p.name.endswith((".tmp", ".part"))]


@pytest.mark.parametrize("name", ["metrics.json", "samples.smi", "curves.png"])
def test_full_disk_while_writing_a_run_output_keeps_the_old_file(name, molecules, finished_run, tmp_path,
                                                                 capsys, monkeypatch):
    out = tmp_path / "run"
    shutil.copytree(finished_run, out)
    old = (out / name).read_bytes()
    failed = disk_fills_up_writing(monkeypatch, name)
    code = run_cli(molecules.main, BASE + ["--out", str(out), "--resume", str(out / "last.npz")])
    assert failed, f"the run never wrote {name}"
    assert code == 1, "a full disk is a runtime error"
    line = one_line_error(capsys)
    assert str(out / name) in line and "No space left on device" in line
    assert (out / name).read_bytes() == old, f"the old {name} must be intact"
    assert temporary_files(out) == [], "no temporary file may remain"


def test_full_disk_while_writing_sample_out_keeps_the_old_file(molecules, tiny_checkpoints, tmp_path, capsys,
                                                               monkeypatch):
    target = tmp_path / "samples.smi"
    target.write_text("CCO\nc1ccccc1\n")
    failed = disk_fills_up_writing(monkeypatch, "samples.smi")
    code = run_cli(molecules.main, ["sample", str(tiny_checkpoints["lm"]), "-n", "5",
                                    "--out", str(target), "--force"])
    assert failed and code == 1
    line = one_line_error(capsys)
    assert str(target) in line and "No space left on device" in line
    assert target.read_text() == "CCO\nc1ccccc1\n"
    assert temporary_files(tmp_path) == []
