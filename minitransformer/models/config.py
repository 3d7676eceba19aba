"""Moved: the options every model config shares live in :mod:`minitransformer.nn.config`."""
raise ImportError("minitransformer.models.config is gone: import TransformerOptions and ConfigBase from "
                  "minitransformer.nn.config")
