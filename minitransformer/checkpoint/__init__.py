"""Safe checkpoints: one ``.npz`` file, never pickled, written atomically.

A checkpoint holds a model's weights, optionally its optimizer's state, and JSON
metadata: the format version, the model type and config (so the model can be
rebuilt), the vocabulary, the dropout RNG's state, a fingerprint of the data, and
whatever the trainer adds (epoch, step, best metric ...). The package has one
module per concept:

* :mod:`~minitransformer.checkpoint.contents`: :class:`Checkpoint` (a file's
  content once read) and the errors, :class:`CheckpointError` and
  :class:`NonFiniteCheckpoint`;
* :mod:`~minitransformer.checkpoint.files`: :func:`save_checkpoint` (refuses NaN
  and infinity, writes atomically) and :func:`load_checkpoint` (reads in an order
  that bounds memory, never unpickles);
* :mod:`~minitransformer.checkpoint.limits`: how large a file may claim to be
  (:data:`MAX_CHECKPOINT_BYTES`, :data:`MAX_COMPRESSION_RATIO`,
  :data:`MAX_PARAMETERS`) and :func:`declared_parameters`;
* :mod:`~minitransformer.checkpoint.fingerprint`: :func:`fingerprint_hashes` and
  :func:`check_fingerprint`, so that a resume with other data or another
  vocabulary is refused (:class:`FingerprintMismatch`), and :func:`model_sha256`, one digest
  of the model a checkpoint holds, the same for two files of it;
* :mod:`~minitransformer.checkpoint.restoring`: :func:`restore`,
  :func:`model_from_checkpoint` and :func:`average_checkpoints`;
* :mod:`~minitransformer.checkpoint.earlier_layouts`: the checkpoints of earlier
  versions (0.2.0's ``Encoder`` with its heads), read in today's layout as they are loaded.

A checkpoint from an unknown source is read in an order that bounds the memory it
can make us allocate, each step before the next:

1. the zip directory: every entry's declared uncompressed size, and their total,
   against :data:`MAX_CHECKPOINT_BYTES` and :data:`MAX_COMPRESSION_RATIO` times the
   file's size (a zip bomb is refused before one byte is inflated);
2. the metadata, and (in :func:`model_from_checkpoint`) the model config: the
   parameter count it implies (:func:`declared_parameters`) against
   :data:`MAX_PARAMETERS`, before the model is built;
3. each array's header: its shape and dtype must be plain numbers and account
   exactly for the entry's size, and (in :func:`model_from_checkpoint`) the
   weights' shapes must be the model's, before any array is read.

Any problem is one :class:`CheckpointError` line naming the file and what to do,
and leaves the model untouched. Everything is importable from here:
``from minitransformer.checkpoint import save_checkpoint, load_checkpoint``.

The limits are re-exported here for reading. Their home is
:mod:`minitransformer.checkpoint.limits`, and the checks read them there: to raise
one for a genuine file, set it on that module
(``minitransformer.checkpoint.limits.MAX_PARAMETERS = ...``), not on this package.
"""
from minitransformer.checkpoint.contents import (
    FORMAT_VERSION, Checkpoint, CheckpointError, NonFiniteCheckpoint, first_non_finite,
)
from minitransformer.checkpoint.limits import (
    MAX_CHECKPOINT_BYTES, MAX_COMPRESSION_RATIO, MAX_PARAMETERS, MAX_UNCOMPRESSED_FLOOR, declared_parameters,
)
from minitransformer.checkpoint.fingerprint import (
    FingerprintMismatch, check_fingerprint, fingerprint_hashes, model_sha256,
)
from minitransformer.checkpoint.files import load_checkpoint, save_checkpoint
from minitransformer.checkpoint.restoring import average_checkpoints, model_from_checkpoint, restore

__all__ = [
    "FORMAT_VERSION", "Checkpoint", "CheckpointError", "NonFiniteCheckpoint", "FingerprintMismatch",
    "save_checkpoint", "load_checkpoint", "restore", "model_from_checkpoint", "average_checkpoints",
    "fingerprint_hashes", "check_fingerprint", "model_sha256", "declared_parameters", "first_non_finite",
    "MAX_PARAMETERS", "MAX_CHECKPOINT_BYTES", "MAX_COMPRESSION_RATIO", "MAX_UNCOMPRESSED_FLOOR",
]
