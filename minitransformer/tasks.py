"""The tasks live with the training loop that runs them, :mod:`minitransformer.train.tasks`;
this path, which the README and many programs use, keeps working."""
from minitransformer.train.tasks import LMTask, MLMTask, PropertyTask, Seq2SeqTask, pad_batch  # noqa: F401

__all__ = ["LMTask", "MLMTask", "PropertyTask", "Seq2SeqTask", "pad_batch"]
