"""The SMILES grammar as a sampling constraint: ``smiles_grammar`` (syntax, the constraint),
``smiles_row`` (the syntax state of one row), ``smiles_valence`` (valence)."""
