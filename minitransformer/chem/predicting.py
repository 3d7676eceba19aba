"""Moved: the modules that run a trained model live in :mod:`minitransformer.molecules`."""
raise ImportError("minitransformer.chem.predicting is now minitransformer.molecules.predicting: import it from there")
