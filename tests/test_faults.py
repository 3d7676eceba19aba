"""Fault injection: a full disk, Ctrl-C and damaged files never lose a good file.

* A full disk (``ENOSPC``) part way through each kind of save (best.npz,
  last.npz, history.json), in the write or in the fsync: the previous file is
  byte-identical, no temporary file is left, the error says what happened, and the
  run resumes from its last good checkpoint once there is space again.
* KeyboardInterrupt at several points of training (in the loss, inside the
  optimizer's update, in a callback, while a checkpoint or history.json is being
  written): the files on disk are intact, and resuming gives exactly the weights of
  a run that was never interrupted.
* Truncated and bit-flipped checkpoints: ``load_checkpoint`` raises
  ``CheckpointError`` with one line (no other exception type), or, for a flip in a
  byte the format does not use, loads exactly the original contents.
"""
from __future__ import annotations

import errno
import os
import zipfile

import numpy as np
import pytest

import minitransformer.atomic as atomic
from minitransformer.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from minitransformer.models import DecoderLM, DecoderLMConfig
from minitransformer.optim import Adam
from minitransformer.train.tasks import LMTask
from minitransformer.train import TrainConfig, fit

PAD, BOS, EOS = 0, 1, 2
V = 11
FILES = ["best.npz", "history.csv", "history.json", "last.npz"]


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------
def data(n=16, seed=0):
    rng = np.random.default_rng(seed)
    return [[BOS] + [int(t) for t in rng.integers(3, V, size=rng.integers(2, 7))] + [EOS] for _ in range(n)]


def model(seed=0):
    return DecoderLM(DecoderLMConfig(vocab_size=V, max_len=12, d_model=8, n_heads=2, n_layers=1, d_ff=16,
                                     seed=seed, emb_dropout=0.1))


def config(out, epochs):
    return TrainConfig(epochs=epochs, batch_size=8, quiet=True, seed=0, out_dir=str(out), metric="score",
                       mode="max")


def score(trainer, epoch, metrics):
    """A metric that improves every epoch, so best.npz is written at every epoch end."""
    return {"score": float(epoch)}


def train(out, epochs, resume=None, m=None, callbacks=(score,), task=None):
    m = m or model()
    opt = Adam(m, lr=1e-2)
    tr = fit(m, task or LMTask(), opt, data(), data(4, seed=9), config=config(out, epochs),
             callbacks=list(callbacks), resume=resume)
    return tr, m, opt


def snapshot(folder):
    return {p.name: p.read_bytes() for p in folder.iterdir()}


def no_temp_files(folder):
    return [p.name for p in folder.iterdir() if p.name.startswith(".") or p.name.endswith(".tmp")] == []


def weights(m):
    return {k: v.copy() for k, v in m.state_dict().items()}


def assert_same_weights(a, b):
    assert sorted(a) == sorted(b)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


class _DiskFull:
    """Stands in for the ``os`` module inside minitransformer.atomic: the temporary file
    of ``target`` fails with ENOSPC after ``after`` bytes written (``where="write"``) or at
    its fsync (``where="fsync"``). Nothing else is touched."""

    def __init__(self, target, where="write", after=100):
        self.target, self.where, self.after = target, where, after
        self.current, self.fired = None, 0

    def open(self, name, flags, *args):  # atomic_write makes its temporary file with os.open
        self.current = os.path.basename(name)
        return os.open(name, flags, *args)

    def _hit(self):
        return self.current is not None and self.current.startswith(f".{self.target}.")

    def _fail(self):
        self.fired += 1
        raise OSError(errno.ENOSPC, "No space left on device")

    # os stand-in
    def __getattr__(self, name):
        return getattr(os, name)

    def fdopen(self, fd, *args, **kwargs):
        f = os.fdopen(fd, *args, **kwargs)
        return _FullFile(f, self) if self.where == "write" and self._hit() else f

    def fsync(self, fd):
        if self.where == "fsync" and self._hit():
            self._fail()
        return os.fsync(fd)


class _FullFile:
    """A file that runs out of space after ``disk.after`` bytes."""

    def __init__(self, f, disk):
        self._f, self._disk, self._written = f, disk, 0

    def write(self, data):
        room = self._disk.after - self._written
        if len(data) > room:
            self._f.write(data[:max(room, 0)])
            self._written = self._disk.after
            self._disk._fail()
        self._written += len(data)
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)


@pytest.fixture
def disk_full(monkeypatch):
    def install(target, where="write", after=100):
        disk = _DiskFull(target, where, after)
        monkeypatch.setattr(atomic, "os", disk)
        return disk
    yield install


# ---------------------------------------------------------------------------
# a full disk during each kind of save
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["write", "fsync"])
@pytest.mark.parametrize("target", FILES)
def test_full_disk_keeps_the_previous_file_and_resumes(tmp_path, disk_full, monkeypatch, target, where):
    out = tmp_path / "run"
    train(out, epochs=1)
    before = snapshot(out)
    assert sorted(before) == FILES

    disk = disk_full(target, where)
    with pytest.raises(OSError) as info:
        train(out, epochs=3, resume=out / "last.npz")
    assert info.value.errno == errno.ENOSPC and disk.fired >= 1
    msg = str(info.value)
    assert "\n" not in msg and target in msg and "intact" in msg and "resume from" in msg, msg
    after = snapshot(out)
    assert after[target] == before[target], f"{target} changed"
    if target not in ("history.json", "history.csv"):  # saved before the history files: epoch 2's checkpoints
        assert after["last.npz"] == before["last.npz"]
    assert no_temp_files(out)

    monkeypatch.undo()  # space again: resume from the last good checkpoint and finish
    tr, m, _ = train(out, epochs=3, resume=out / "last.npz")
    straight_tr, straight, _ = train(tmp_path / "straight", epochs=3)
    assert_same_weights(weights(m), weights(straight))
    assert tr.history[-1]["epoch"] == 3 and tr.stop_reason == "epochs"


def test_full_disk_on_a_first_save_leaves_nothing(tmp_path, disk_full):
    out = tmp_path / "run"
    disk_full("best.npz", "write", after=10)
    with pytest.raises(OSError, match="No space left"):
        train(out, epochs=1)
    assert sorted(snapshot(out)) == []


# ---------------------------------------------------------------------------
# Ctrl-C at several points of training
# ---------------------------------------------------------------------------
class InterruptingLM(LMTask):
    """Raises KeyboardInterrupt in its ``k``-th training loss."""

    def __init__(self, k):
        super().__init__()
        self.k, self.calls = k, 0

    def loss(self, model, batch, rng=None):
        self.calls += 1
        if self.calls == self.k:
            raise KeyboardInterrupt
        return super().loss(model, batch, rng)


def _interrupt_optimizer_mid_update(monkeypatch, at_step):
    """Ctrl-C inside Adam's update of step ``at_step``, after some parameters moved."""
    orig = Adam._update
    seen = {"n": 0}

    def update(self, name, p, state, lr):
        if self.t == at_step:
            seen["n"] += 1
            if seen["n"] == 3:
                raise KeyboardInterrupt
        return orig(self, name, p, state, lr)

    monkeypatch.setattr(Adam, "_update", update)


def _interrupt_callback(epoch_to_stop):
    def cb(trainer, epoch, metrics):
        if epoch + 1 == epoch_to_stop:
            raise KeyboardInterrupt
        return score(trainer, epoch, metrics)
    return cb


def _interrupt_write_of(monkeypatch, target):
    """Ctrl-C in the middle of writing ``target`` (its temporary file is half written)."""
    orig = atomic.atomic_write

    def write(path, fn, *args, **kwargs):
        if os.path.basename(path) == target:
            def half(f):
                f.write(b"PK\x03\x04 half" if "b" in f.mode else "[{\"epoch\": 1")
                raise KeyboardInterrupt
            return orig(path, half, *args, **kwargs)
        return orig(path, fn, *args, **kwargs)

    monkeypatch.setattr(atomic, "atomic_write", write)
    from minitransformer.checkpoint import files
    monkeypatch.setattr(files, "atomic_write", write)


# 16 examples / batch 8: 2 steps per epoch; each case interrupts in epoch 2 (after epoch 1's files)
@pytest.mark.parametrize("point", ["loss_step_3", "loss_step_4", "optimizer_step_3", "callback_epoch_2",
                                   "writing_best", "writing_last", "writing_history"])
def test_ctrl_c_keeps_the_files_and_resumes_exactly(tmp_path, monkeypatch, point):
    out = tmp_path / "run"
    train(out, epochs=1)
    before = snapshot(out)

    task, callbacks = None, [score]
    if point.startswith("loss_step_"):
        task = InterruptingLM(int(point[-1]) - 2)  # steps 3, 4 are the 1st, 2nd of this run
    elif point == "optimizer_step_3":
        _interrupt_optimizer_mid_update(monkeypatch, 3)
    elif point == "callback_epoch_2":
        callbacks = [_interrupt_callback(2)]
    else:
        _interrupt_write_of(monkeypatch, {"writing_best": "best.npz", "writing_last": "last.npz",
                                          "writing_history": "history.json"}[point])
    tr, _, _ = train(out, epochs=3, resume=out / "last.npz", task=task, callbacks=callbacks)
    assert tr.stop_reason == "interrupted"
    after = snapshot(out)
    assert no_temp_files(out)
    written = {"writing_last": ["best.npz"], "writing_history": ["best.npz", "last.npz"]}.get(point, [])
    for name in FILES:
        if name not in written:
            assert after[name] == before[name], f"{name} changed"
    for name in ("best.npz", "last.npz"):
        load_checkpoint(out / name)  # whole and finite

    monkeypatch.undo()
    tr, m, _ = train(out, epochs=3, resume=out / "last.npz")
    _, straight, _ = train(tmp_path / "straight", epochs=3)
    assert_same_weights(weights(m), weights(straight))


# ---------------------------------------------------------------------------
# damaged checkpoints: one CheckpointError line, never another exception
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def good_checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ck")
    m = model()
    opt = Adam(m, lr=1e-2)
    m.zero_grad()
    for p in m.parameters():
        p.grad += 0.01
    opt.step()
    path = save_checkpoint(folder / "good.npz", m, opt, vocab={"tokens": list("abcdefghijk")})
    return path, load_checkpoint(path)


def _structure_offsets(path) -> list[int]:
    """Byte offsets of the zip's bookkeeping: local headers with the .npy headers after
    them, the central directory and its end record."""
    size = path.stat().st_size
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        cd_start = min(size, min(i.header_offset for i in infos) + sum(i.compress_size for i in infos))
    offsets = set()
    for info in infos:
        local = 30 + len(info.filename.encode()) + len(info.extra)
        offsets.update(range(info.header_offset, min(size, info.header_offset + local + 128)))
    offsets.update(range(max(0, size - 22 - 2000), size))  # central directory and end record
    return sorted(o for o in offsets if o < size) + [cd_start]


def _load_or_refuse(path, original):
    try:
        ck = load_checkpoint(path)
    except CheckpointError as err:
        msg = str(err)
        assert msg and "\n" not in msg, f"not one line: {msg!r}"
        return "refused"
    # a byte the format does not use (a timestamp, an attribute): the contents are exact
    assert ck.meta == original.meta
    assert_same_weights(ck.weights, original.weights)
    assert_same_weights(ck.optim_arrays, original.optim_arrays)
    return "loaded"


def test_every_truncation_is_refused_with_one_line(good_checkpoint, tmp_path):
    path, original = good_checkpoint
    blob = path.read_bytes()
    rng = np.random.default_rng(0)
    cuts = sorted(set(rng.choice(_structure_offsets(path), 300, replace=False)) | set(rng.integers(0, len(blob), 150)))
    bad = tmp_path / "cut.npz"
    for n in cuts:
        bad.write_bytes(blob[:n])
        assert _load_or_refuse(bad, original) == "refused", f"a file cut to {n} of {len(blob)} bytes loaded"


def test_bit_flips_are_refused_with_one_line_or_load_the_exact_contents(good_checkpoint, tmp_path):
    path, original = good_checkpoint
    blob = path.read_bytes()
    rng = np.random.default_rng(1)
    structure = _structure_offsets(path)
    offsets = sorted(set(rng.choice(structure, 500, replace=False)) | set(rng.integers(0, len(blob), 200)))
    bad = tmp_path / "flip.npz"
    outcomes = {"refused": 0, "loaded": 0}
    for off in offsets:
        flipped = bytearray(blob)
        flipped[off] ^= 1 << int(rng.integers(0, 8))
        bad.write_bytes(bytes(flipped))
        outcomes[_load_or_refuse(bad, original)] += 1
    # most bytes matter; the rest (timestamps, file attributes, version fields) load unchanged
    assert outcomes["refused"] > 0.6 * len(offsets), outcomes


def test_json_nested_too_deep_is_one_line_not_a_recursion_error(good_checkpoint, tmp_path):
    """A checkpoint's __meta__ or a run folder's config.json nested 100,000 deep raised
    an 'unexpected RecursionError'. Now each is the one-line error of a damaged file."""
    from minitransformer.atomic import parse_json
    from minitransformer.cli.run_folders import check_resume
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ValueError, match="nested deeper than can be read"):
        parse_json(deep)
    path, _ = good_checkpoint
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["__meta__"] = np.frombuffer(deep.encode(), dtype=np.uint8)
    forged = tmp_path / "forged.npz"
    np.savez(forged, **arrays)
    with pytest.raises(CheckpointError, match="not valid JSON") as err:
        load_checkpoint(forged)
    assert "\n" not in str(err.value)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text(deep)
    with pytest.raises(ValueError, match="config.json is not readable JSON .*nested deeper"):
        check_resume(path, tmp_path / "run", {"preset": "default"}, None)


def test_a_full_disk_error_names_the_file_whoever_writes_it(tmp_path, monkeypatch):
    """`attention` on a full disk once named no file; the class-wide fix is in atomic_write."""
    real = os.fdopen

    class Full:
        def __init__(self, f):
            self.f, self.mode = f, f.mode

        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(os, "fdopen", lambda *a, **k: Full(real(*a, **k)))
    target = tmp_path / "attention_decoder_self.png"
    with pytest.raises(OSError) as err:
        atomic.write_bytes(target, b"\x89PNG")
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(target)
    assert not list(tmp_path.iterdir())


def test_atomic_write_checks_the_complete_file_before_it_replaces_the_target(tmp_path):
    """A download's checksum is checked on the written file; a failing check leaves the old file
    and no temporary one."""
    target = tmp_path / "data.bin"
    target.write_bytes(b"old")
    seen = []

    def refuse(tmp):
        seen.append(tmp.read_bytes())
        raise ValueError("checksum mismatch")

    with pytest.raises(ValueError, match="checksum mismatch"):
        atomic.atomic_write(target, lambda f: f.write(b"new"), check=refuse)
    assert seen == [b"new"] and target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["data.bin"]
    atomic.atomic_write(target, lambda f: f.write(b"new"), check=lambda tmp: None)
    assert target.read_bytes() == b"new"
