"""The fast set's machinery, which its twins share: ``parallel`` (the CPU thread pool that fast
attention and GELU hand their blocks to), ``compiled`` (the optional Numba kernels), ``elementary``
(exp and the normal CDF written out for those kernels' loops), ``blas`` (BLAS called from compiled
loops: attention's and the linear layer's products), ``cuda`` (the GPU's fused kernels), ``flat``
(an optimizer's tensors as views of flat buffers) and ``cuda_flat`` (one GPU launch over that
layout). None of it is a twin of a reference file: the twins, named after the files of the book,
sit one folder up.
"""

# blas, on import, asks for OpenMP's threads where the loops can call BLAS (its notes); imported here
# so that the choice is made before any compiled loop starts Numba's threads, whatever is imported first
from minitransformer.fast.engine import blas  # noqa: E402,F401
