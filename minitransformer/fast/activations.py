"""Moved: the fast twins carry their reference's file name (``minitransformer/nn/elementwise.py``)."""
raise ImportError("minitransformer.fast.activations is now minitransformer.fast.elementwise: import it from there")
