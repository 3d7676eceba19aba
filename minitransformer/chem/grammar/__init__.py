"""The SMILES grammar as a sampling constraint: ``smiles_grammar`` (syntax), ``smiles_valence`` (valence)."""
