"""minitransformer: a transformer library with handwritten backward passes.

No autograd: every layer has an explicit ``forward`` that keeps a small cache
and a handwritten ``backward``. Array math goes through
:mod:`minitransformer.backend` (NumPy on the CPU, CuPy on a GPU), and each layer
calls its plain reference kernel or that kernel's fast twin, as
:mod:`minitransformer.kernels` says (``MINITRANSFORMER_KERNELS``).

The library, from the bottom up:

* ``backend`` (``xp``: NumPy, CuPy or the strict stand-in of ``testing``), ``devices`` (the
  array libraries, and what matters only on a GPU), ``cpus`` (the cores and threads this process
  may use), ``checks`` (one way to check a setting), ``kernels`` (which kernel set runs),
  ``runtime`` (what runs: backend, kernels, BLAS) and ``atomic`` (files never half-written);
* ``nn`` (the layers and their reference kernels), ``fast`` (their fast twins),
  ``functional`` (both sets as tables of plain functions), ``optim`` (optimizers, schedules,
  clipping) and ``gradcheck`` (finite-difference checks of every backward);
* ``models`` (the transformer families and the recurrent models), ``generate`` (decoding),
  ``train`` (the training loop and its tasks; ``tasks`` names where they live),
  ``distributed`` (data-parallel training over MPI) and ``checkpoint`` (safe ``.npz`` files);
* ``chem`` (molecules on the host, judged as the field does), ``molecules`` (what a trained
  model does with them), ``roc_auc`` (ROC-AUC, the property models' metric), ``viz`` (attention pictures);
* ``cli`` (the ``minitransformer`` command), entered through ``console`` (and ``__main__``).
"""
__version__ = "0.2.0"


#: What ``import minitransformer`` makes available: the layers, the optimizers, both kernel sets and
#: the switch between them, each imported on first use (so that the command starts by importing
#: nothing heavy, and a Ctrl-C while it starts is one line: :mod:`minitransformer.console`).
_SUBMODULES = ("fast", "kernels", "nn", "optim")


def __getattr__(name: str):
    if name in _SUBMODULES:
        import importlib
        return importlib.import_module(f"minitransformer.{name}")
    raise AttributeError(f"module 'minitransformer' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBMODULES))
