"""``xp`` keeps the names it has read (a plain attribute lookup afterwards), and forgets
them when the backend changes: a name read before a switch must follow the switch."""
import numpy as np

from minitransformer import backend


def test_a_name_read_before_a_switch_follows_it():
    assert type(backend.xp.zeros(3)) is np.ndarray  # read, and kept, under NumPy
    backend.use("strict")
    try:
        on_strict = backend.xp.zeros(3)
        assert type(on_strict) is not np.ndarray, "xp.zeros still NumPy's after use('strict')"
        assert backend.is_device_array(on_strict)
    finally:
        backend.use("numpy")
    assert type(backend.xp.zeros(3)) is np.ndarray, "xp.zeros still the stand-in's after use('numpy')"


def test_kept_names_are_the_modules_own():
    backend.xp.einsum  # noqa: B018 - read once, now kept
    assert backend.xp.einsum is np.einsum and backend.xp.float32 is np.float32
