"""minitransformer: a transformer library with handwritten backward passes.

No autograd: every layer has an explicit ``forward`` that keeps a small cache
and a handwritten ``backward``. Array math goes through
:mod:`minitransformer.backend` (NumPy on the CPU, CuPy on a GPU).
"""
__version__ = "0.1.0"
