"""Chemistry data layer: SMILES tokens, vocabulary, data sets, and sample metrics.

Independent of the neural-network code (``tests/test_structure.py`` holds it to that);
plain Python and NumPy on the host. What runs a trained model on molecules is the
layer above, :mod:`minitransformer.molecules`.

* :mod:`~minitransformer.chem.tokenizer` - lossless regex tokenizer for SMILES.
* :mod:`~minitransformer.chem.vocab` - :class:`Vocab`, token <-> id with PAD/BOS/EOS/UNK.
* :mod:`~minitransformer.chem.download` - find or fetch-and-verify ``tox21.csv.gz``.
* :mod:`~minitransformer.chem.data` - read, clean, split and randomize SMILES.
* :mod:`~minitransformer.chem.similarity` - Morgan bit matrices and Tanimoto by matmul.
* :mod:`~minitransformer.chem.distribution` - GuacaMol-style KL-divergence score.
* :mod:`~minitransformer.chem.metrics` - validity, uniqueness, novelty, IntDiv, all-in-one.

The tokenizer and the vocabulary need nothing beyond NumPy. Everything that
looks at molecules needs RDKit, which is imported only when first used; without
it those functions raise ImportError with the hint
``pip install rdkit`` (a dependency of the package).
"""
from minitransformer.chem.data import (CleanReport, LoadedSmiles, canonical, clean_smiles,
                                       druglike_path, load_source, randomize_smiles,
                                       read_smiles, split_in_order, split_random)
from minitransformer.chem.distribution import kl_divergences, kl_score
from minitransformer.chem.download import (TOX21_CSV_SHA256, TOX21_GZ_MD5, TOX21_URL,
                                           ChecksumError, DownloadError, cache_dir,
                                           download_file, find_tox21, verify_gzip_csv)
from minitransformer.chem.evaluation import evaluate_samples
from minitransformer.chem.metrics import internal_diversity, novelty, uniqueness, validity
from minitransformer.chem.similarity import morgan_bits, tanimoto_matrix
from minitransformer.chem.tokenizer import tokenize, uncovered_characters
from minitransformer.chem.vocab import Vocab

__all__ = [
    "tokenize", "uncovered_characters", "Vocab",
    "find_tox21", "download_file", "verify_gzip_csv", "cache_dir", "ChecksumError",
    "DownloadError", "TOX21_URL", "TOX21_CSV_SHA256", "TOX21_GZ_MD5",
    "druglike_path", "read_smiles", "load_source", "LoadedSmiles", "clean_smiles",
    "CleanReport", "split_in_order", "split_random", "randomize_smiles", "canonical",
    "validity", "uniqueness", "novelty", "internal_diversity", "evaluate_samples",
    "kl_score", "kl_divergences", "morgan_bits", "tanimoto_matrix",
]
