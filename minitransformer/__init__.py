"""minitransformer: a transformer library with handwritten backward passes.

No autograd: every layer has an explicit ``forward`` that keeps a small cache
and a handwritten ``backward``. Array math goes through
:mod:`minitransformer.backend` (NumPy on the CPU, CuPy on a GPU), and each layer
calls its plain reference kernel or that kernel's fast twin, as
:mod:`minitransformer.kernels` says (``MINITRANSFORMER_KERNELS``).
"""
__version__ = "0.2.0"


# What ``import minitransformer`` has always made available: the layers, the optimizers,
# both kernel sets and the switch between them.
from minitransformer import fast, kernels, nn, optim  # noqa: E402, F401
