"""Molecules in: reading, fetching, cleaning, splitting and tokenizing SMILES.

* ``smiles_files`` - the one reader of SMILES files; ``user_files`` its policy for a user's samples.
* ``data`` - data sets (Tox21, RDKit's drug-like set, a file): read, clean, split, randomize.
* ``download`` (Tox21), ``moses`` and ``moses_tokens`` (MOSES) - find, fetch once, verify, read fast.
* ``standardize`` - one clean, neutral, organic molecule per row.
* ``tokenizer`` and ``vocab`` - SMILES tokens and their ids.
* ``ring_sizes`` - a writing of SMILES with each ring bond written once, by its ring's size (no ring left open).
* ``ring_marks`` - SMILES whose closing ring labels are tokens of their own (a ring is open by a count, not a parity).
* ``lm_data``, ``seq2seq_data``, ``properties`` - the data of ``train lm``, ``train seq2seq``, ``train property``.
* ``recombined`` - heavier drug-like molecules, made once by joining halves of MOSES molecules at BRICS bonds.
"""
