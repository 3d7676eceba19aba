"""What a trained model does with molecules: the layer above :mod:`minitransformer.chem`.

:mod:`minitransformer.chem` reads, cleans, writes and judges SMILES on the host and
knows nothing of models; the modules here run one:

* :mod:`~minitransformer.molecules.canonicalization`: a seq2seq model writes a SMILES
  in RDKit's canonical form (greedy or beam), judged by exact match;
* :mod:`~minitransformer.molecules.predicting`: an encoder predicts the Tox21 assays
  of SMILES, averaged over random writings of each;
* :mod:`~minitransformer.molecules.likelihood`: a language model's NLL and next-token
  accuracy over held-out molecules;
* :mod:`~minitransformer.molecules.sampling`: new molecules from a trained generator, the
  sample sets ``sample`` and ``train lm`` draw;
* :mod:`~minitransformer.molecules.steering`: a copy of a generator fine-tuned toward a score
  (REINVENT), with :mod:`~minitransformer.molecules.objective_spec`, the score as a user writes it.
"""
