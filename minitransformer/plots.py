"""Moved: the pictures live in :mod:`minitransformer.viz`."""
raise ImportError("minitransformer.plots is now minitransformer.viz.plots: import it from there")
