"""minitransformer: a transformer library with handwritten backward passes.

No autograd: every layer has an explicit ``forward`` that keeps a small cache
and a handwritten ``backward``. Array math goes through
:mod:`minitransformer.backend` (NumPy on the CPU, CuPy on a GPU), and the layers
call their kernels through :mod:`minitransformer.kernels` (the plain reference
set, or the fast set: ``MINITRANSFORMER_KERNELS``).
"""
__version__ = "0.1.0"

from minitransformer import kernels as _kernels  # noqa: E402 (after the version, for setup.cfg)
from minitransformer.fast import FAST_KERNELS as _FAST  # noqa: E402
from minitransformer.nn import REFERENCE_KERNELS as _NN  # noqa: E402
from minitransformer.optim.optimizer import adam_update as _adam_update  # noqa: E402

_REFERENCE = {**_NN, "adam_update": _adam_update}
_kernels.register("reference", _REFERENCE)
_kernels.register("fast", {**_REFERENCE, **_FAST})  # a kernel without a fast version: the reference one
_kernels.use_from_environment(at_import=True)
