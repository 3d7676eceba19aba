"""Moved: the modules that run a trained model live in :mod:`minitransformer.molecules`."""
raise ImportError("minitransformer.chem.canonicalization is now minitransformer.molecules.canonicalization: import it from there")
