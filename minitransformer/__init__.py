"""minitransformer: a transformer library with handwritten backward passes.

No autograd: every layer has an explicit ``forward`` that keeps a small cache
and a handwritten ``backward``. Array math goes through
:mod:`minitransformer.backend` (NumPy on the CPU, CuPy on a GPU).
"""
import os as _os
import sys as _sys

if "numpy" not in _sys.modules:  # only OpenBLAS's loading reads this: see minitransformer/parallel.py
    _os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "22")

__version__ = "0.1.0"
