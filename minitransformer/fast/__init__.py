"""The fast kernel set: twins of the reference kernels, each file named after its
reference (``fast/linear.py`` is the twin of ``nn/linear.py``, ``fast/optimizer.py``
of ``optim/optimizer.py``), with the same signatures, written for speed. The layers
call them while ``minitransformer.kernels.fast`` is set (the default); the whole set,
as a table, is :data:`minitransformer.functional.FAST`.

The twins: ``linear``, ``elementwise`` (GELU through a table), ``embedding`` (the
scatter-add as a sort and a segmented sum), ``softmax`` (and cross-entropy),
``layernorm``, ``attention``, ``graph_bias`` (the lookup written in place, its sums by
``bincount``), ``lstm``, ``optimizer`` (Adam and AdamW) and ``clip``
(the global-norm clipping on a GPU).

This package sits below :mod:`minitransformer.nn`: it imports nothing from it (the
argument checks both sets share live in :mod:`minitransformer.backend`), so the
layers can name their twins directly. Its machinery is the ``engine`` folder
(:mod:`minitransformer.fast.engine`: the thread pool, the Numba kernels, BLAS from
compiled loops, the GPU's fused kernels, the flat optimizer layout);
``fused_attention`` is an opt-in variant of the attention twin, ``decode_attention``
its loop for a decoding step, and ``decode`` the twin of the sampling draw of
:mod:`minitransformer.generate.decode`.
"""
