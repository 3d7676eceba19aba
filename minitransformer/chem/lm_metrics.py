"""Moved: the modules that run a trained model live in :mod:`minitransformer.molecules`."""
raise ImportError("minitransformer.chem.lm_metrics is now minitransformer.molecules.likelihood: import it from there")
