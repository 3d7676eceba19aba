"""Chemistry on the host: SMILES in, molecules judged. Nothing here runs a model (``tests/test_structure.py``
holds it to that); what runs a trained model on molecules is :mod:`minitransformer.molecules`.

* :mod:`~minitransformer.chem.datasets` - reading, fetching, cleaning, splitting and tokenizing SMILES.
* :mod:`~minitransformer.chem.judge` - every generation metric (MOSES, GuacaMol) and the tables of them.
* :mod:`~minitransformer.chem.frechet` - the Fréchet ChemNet Distance and ChemNet.
* :mod:`~minitransformer.chem.grammar` - the SMILES grammar as a sampling constraint.
* :mod:`~minitransformer.chem.goals` - what a steered generator aims at: score components, PMO tasks.
* :mod:`~minitransformer.chem.descriptors` - RDKit's 2D descriptors of a molecule, put on one scale:
  extra inputs for a property model.
* :mod:`~minitransformer.chem.graph` - the molecule's graph as relations between the tokens of one
  writing (bonds apart, bond types, non-atom tokens): what an encoder's graph bias reads.
* ``_rdkit`` (RDKit, imported when first needed), ``workers`` (worker processes for RDKit work) and
  ``progress`` (how a long step reports) serve them all.

The tokenizer and the vocabulary need nothing beyond NumPy. Everything that looks at molecules needs
RDKit (a dependency of the package), imported only when first used.
"""
from minitransformer.chem.datasets.data import (CleanReport, LoadedSmiles, canonical, clean_smiles,
                                       druglike_path, load_source, randomize_smiles,
                                       read_smiles, split_in_order, split_random)
from minitransformer.chem.judge.distribution import kl_divergences, kl_score
from minitransformer.chem.datasets.download import (TOX21_CSV_SHA256, TOX21_GZ_MD5, TOX21_URL,
                                           ChecksumError, DownloadError, cache_dir,
                                           download_file, find_tox21, verify_gzip_csv)
from minitransformer.chem.judge.evaluation import evaluate_samples
from minitransformer.chem.judge.metrics import internal_diversity, novelty, uniqueness, validity
from minitransformer.chem.judge.similarity import morgan_bits, tanimoto_matrix
from minitransformer.chem.datasets.tokenizer import tokenize, uncovered_characters
from minitransformer.chem.datasets.vocab import Vocab

__all__ = [
    "tokenize", "uncovered_characters", "Vocab",
    "find_tox21", "download_file", "verify_gzip_csv", "cache_dir", "ChecksumError",
    "DownloadError", "TOX21_URL", "TOX21_CSV_SHA256", "TOX21_GZ_MD5",
    "druglike_path", "read_smiles", "load_source", "LoadedSmiles", "clean_smiles",
    "CleanReport", "split_in_order", "split_random", "randomize_smiles", "canonical",
    "validity", "uniqueness", "novelty", "internal_diversity", "evaluate_samples",
    "kl_score", "kl_divergences", "morgan_bits", "tanimoto_matrix",
]
