"""Moved: the fast twins carry their reference's file name (``minitransformer/optim/optimizer.py``)."""
raise ImportError("minitransformer.fast.adam is now minitransformer.fast.optimizer: import it from there")
