"""The torch-file reader: plain tensors come back as arrays; every other Python object is refused.

The files are written here without PyTorch: a stand-in ``torch`` module (inserted in
``sys.modules`` for the test only) gives the pickler the names ``torch._utils._rebuild_tensor_v2``
and ``torch.FloatStorage``, laid out exactly as ``torch.save``'s legacy format lays them out.
"""
import collections
import io
import os
import pickle
import struct
import sys
import types
import zipfile

import numpy as np
import pytest

from minitransformer.chem.frechet.torch_file import MAGIC_NUMBER, PROTOCOL_VERSION, TorchFileError, read_torch_tensors


class _Tensor:
    def __init__(self, key, array, offset=0, size=None, stride=None, storage_numel=None):
        self.key, self.array, self.offset = key, array, offset
        self.size = tuple(array.shape) if size is None else size
        self.stride = tuple(int(s) // array.itemsize for s in array.strides) if stride is None else stride
        self.numel = array.size if storage_numel is None else storage_numel


@pytest.fixture
def fake_torch(monkeypatch):
    """Stand-in modules so that the pickler can name torch's globals."""
    torch, utils = types.ModuleType("torch"), types.ModuleType("torch._utils")

    def _rebuild_tensor_v2(*args):
        raise AssertionError("never called")
    _rebuild_tensor_v2.__module__ = "torch._utils"
    _rebuild_tensor_v2.__qualname__ = "_rebuild_tensor_v2"
    utils._rebuild_tensor_v2 = _rebuild_tensor_v2
    for name in ("FloatStorage", "DoubleStorage"):
        cls = type(name, (), {"__module__": "torch", "__qualname__": name})
        setattr(torch, name, cls)
    torch._utils = utils
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch._utils", utils)
    return torch


def _legacy_bytes(torch, obj, tensors, storage_bytes=None) -> bytes:
    """``obj`` (holding :class:`_Tensor` objects) in the legacy torch.save layout."""
    rebuild = sys.modules["torch._utils"]._rebuild_tensor_v2

    class Writer(pickle.Pickler):
        def persistent_id(self, thing):
            if isinstance(thing, tuple) and thing and thing[0] == "STORAGE":
                _, t = thing
                kind = torch.FloatStorage if t.array.dtype == np.float32 else torch.DoubleStorage
                return ("storage", kind, t.key, "cpu", t.numel, None)
            return None

        def reducer_override(self, thing):
            if isinstance(thing, _Tensor):
                return rebuild, (("STORAGE", thing), thing.offset, thing.size, thing.stride, False,
                                 collections.OrderedDict())
            return NotImplemented

    out = io.BytesIO()
    for head in (MAGIC_NUMBER, PROTOCOL_VERSION, {"protocol_version": 1001, "little_endian": True,
                                                  "type_sizes": {"short": 2, "int": 4, "long": 4}}):
        pickle.dump(head, out, protocol=2)
    Writer(out, protocol=2).dump(obj)
    pickle.dump([t.key for t in tensors], out, protocol=2)
    for t in tensors:
        out.write(struct.pack("<q", t.numel))
        out.write((storage_bytes or {}).get(t.key, t.array.tobytes()))
    return out.getvalue()


def test_a_state_dict_round_trips_without_torch(fake_torch, tmp_path):
    w = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = np.array([0.5, -1.5], dtype=np.float64)
    tensors = [_Tensor("k1", w), _Tensor("k2", b)]
    obj = [("Conv1d", (collections.OrderedDict([("weight", tensors[0]), ("bias", tensors[1])]),
                       {"stride": 2, "dilation": (1,)}, {"activation": "selu"}))]
    path = tmp_path / "m.pt"
    path.write_bytes(_legacy_bytes(fake_torch, obj, tensors))
    kind, (state, kwargs, other) = read_torch_tensors(path)[0]
    assert kind == "Conv1d" and kwargs == {"stride": 2, "dilation": (1,)} and other == {"activation": "selu"}
    assert isinstance(state, collections.OrderedDict) and list(state) == ["weight", "bias"]
    assert state["weight"].dtype == np.float32 and np.array_equal(state["weight"], w)
    assert state["bias"].dtype == np.float64 and np.array_equal(state["bias"], b)
    assert state["weight"].flags.writeable and state["weight"].flags.c_contiguous


CALLED = []


def _record_call(*args):
    CALLED.append(args)


class _Evil:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (self.target, ("print('pwned')",))


@pytest.mark.parametrize("target, name", [(_record_call, r"\S*_record_call"), (eval, r"(__builtin__|builtins)\.eval"),
                                          (os.system, r"(posix|nt|os)\.system")])
def test_any_other_global_is_refused_before_it_is_called(fake_torch, tmp_path, capfd, target, name):
    path = tmp_path / "evil.pt"
    path.write_bytes(_legacy_bytes(fake_torch, [_Evil(target)], []))
    with pytest.raises(TorchFileError, match=f"refused to load the global {name}"):
        read_torch_tensors(path)
    assert CALLED == [] and "pwned" not in capfd.readouterr().out


@pytest.mark.parametrize("case, message", [
    ("truncated", "ends early"),
    ("not contiguous", "not contiguous"),
    ("outside", "reaches outside its storage"),
    ("zip", "zip-based torch file"),
    ("garbage", "not a readable torch.save file"),
])
def test_bad_files_are_refused_with_the_reason(fake_torch, tmp_path, case, message):
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    path = tmp_path / f"{case}.pt"
    if case == "truncated":
        path.write_bytes(_legacy_bytes(fake_torch, {"w": _Tensor("k", w)}, [_Tensor("k", w)])[:-5])
    elif case == "not contiguous":
        t = _Tensor("k", w, size=(3, 2), stride=(1, 3))
        path.write_bytes(_legacy_bytes(fake_torch, {"w": t}, [t]))
    elif case == "outside":
        t = _Tensor("k", w, offset=4)
        path.write_bytes(_legacy_bytes(fake_torch, {"w": t}, [t]))
    elif case == "zip":
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("archive/data.pkl", b"")
    else:
        path.write_bytes(b"\x80\x02garbage")
    with pytest.raises(TorchFileError, match=message):
        read_torch_tensors(path)


def test_the_published_chemnet_file_reads(chemnet):
    """(The session fixture has read and checked the real file; its layers came out whole.)"""
    assert chemnet.w["conv1"].shape == (32, 35, 4) and chemnet.w["lstm2_W_hh"].shape == (2048, 512)
    assert chemnet.w["lstm2_W_hh"].dtype == np.float32 and float(abs(chemnet.w["lstm2_W_hh"]).sum()) > 0
