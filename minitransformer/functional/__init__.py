"""The kernels as plain functions: ``*_forward -> (out, cache)`` and
``*_backward(dout, cache) -> grads``, plus the mask and id helpers.

Both kernel sets are written out below as tables: :data:`REFERENCE` (the plain
kernels of :mod:`minitransformer.nn` and the Adam update of
:mod:`minitransformer.optim.optimizer`) and :data:`FAST` (the twins in
:mod:`minitransformer.fast`, the reference where a kernel has no twin).
``minitransformer.functional.linear_forward`` is the kernel of the set selected in
:mod:`minitransformer.kernels` (``"fast"`` by default), looked up when you access
it: a name imported with ``from minitransformer.functional import ...`` keeps the
kernel of the set selected at that moment. A backward takes a cache of its own set.
"""
from minitransformer import kernels as _kernels
from minitransformer.backend import check_ids
from minitransformer.fast import attention as _fast_attention
from minitransformer.fast import elementwise as _fast_elementwise
from minitransformer.fast import embedding as _fast_embedding
from minitransformer.fast import graph_bias as _fast_graph_bias
from minitransformer.fast import layernorm as _fast_layernorm
from minitransformer.fast import linear as _fast_linear
from minitransformer.fast import lstm as _fast_lstm
from minitransformer.fast import optimizer as _fast_optimizer
from minitransformer.fast import softmax as _fast_softmax
from minitransformer.nn import attention, bce, elementwise, embedding, graph_bias, layernorm, linear, lstm, mse
from minitransformer.nn import relative_position
from minitransformer.nn import softmax
from minitransformer.nn import rnn_attention
from minitransformer.nn.attention import causal_mask, combine_masks, padding_mask
from minitransformer.nn.elementwise import make_dropout_mask
from minitransformer.nn.embedding import ids_to_device
from minitransformer.optim import optimizer

#: The reference kernel set, in reading order.
REFERENCE = {
    "linear_forward": linear.linear_forward, "linear_backward": linear.linear_backward,
    "embedding_forward": embedding.embedding_forward, "embedding_backward": embedding.embedding_backward,
    "softmax_forward": softmax.softmax_forward, "softmax_backward": softmax.softmax_backward,
    "log_softmax": softmax.log_softmax,
    "cross_entropy_forward": softmax.cross_entropy_forward, "cross_entropy_backward": softmax.cross_entropy_backward,
    "attention_forward": attention.attention_forward, "attention_backward": attention.attention_backward,
    "merge_heads": attention.merge_heads,
    "relative_bias_forward": relative_position.relative_bias_forward,
    "relative_bias_backward": relative_position.relative_bias_backward,
    "graph_bias_forward": graph_bias.graph_bias_forward, "graph_bias_backward": graph_bias.graph_bias_backward,
    "layernorm_forward": layernorm.layernorm_forward, "layernorm_backward": layernorm.layernorm_backward,
    "gelu_forward": elementwise.gelu_forward, "gelu_backward": elementwise.gelu_backward,
    "relu_forward": elementwise.relu_forward, "relu_backward": elementwise.relu_backward,
    "dropout_forward": elementwise.dropout_forward, "dropout_backward": elementwise.dropout_backward,
    "masked_bce_forward": bce.masked_bce_forward, "masked_bce_backward": bce.masked_bce_backward,
    "mse_forward": mse.mse_forward, "mse_backward": mse.mse_backward,
    "lstm_forward": lstm.lstm_forward, "lstm_backward": lstm.lstm_backward,
    "additive_keys_forward": rnn_attention.additive_keys_forward,
    "additive_keys_backward": rnn_attention.additive_keys_backward,
    "additive_attention_forward": rnn_attention.additive_attention_forward,
    "additive_attention_backward": rnn_attention.additive_attention_backward,
    "multiplicative_attention_forward": rnn_attention.multiplicative_attention_forward,
    "multiplicative_attention_backward": rnn_attention.multiplicative_attention_backward,
    "adam_update": optimizer.adam_update,
}

#: The fast kernel set: the reference set with the kernels that have a fast twin replaced.
FAST = {
    **REFERENCE,
    "linear_forward": _fast_linear.linear_forward, "linear_backward": _fast_linear.linear_backward,
    "embedding_backward": _fast_embedding.embedding_backward,
    "softmax_forward": _fast_softmax.softmax_forward,
    "cross_entropy_forward": _fast_softmax.cross_entropy_forward,
    "cross_entropy_backward": _fast_softmax.cross_entropy_backward,
    "attention_forward": _fast_attention.attention_forward,
    "attention_backward": _fast_attention.attention_backward,
    "merge_heads": _fast_attention.merge_heads,
    "graph_bias_forward": _fast_graph_bias.graph_bias_forward,
    "graph_bias_backward": _fast_graph_bias.graph_bias_backward,
    "layernorm_forward": _fast_layernorm.layernorm_forward, "layernorm_backward": _fast_layernorm.layernorm_backward,
    "gelu_forward": _fast_elementwise.gelu_forward,
    "lstm_forward": _fast_lstm.lstm_forward, "lstm_backward": _fast_lstm.lstm_backward,
    "adam_update": _fast_optimizer.adam_update,
}

#: Every kernel name, in reading order; both sets provide all of them.
NAMES = tuple(REFERENCE)
TABLES = {"reference": REFERENCE, "fast": FAST}

__all__ = sorted(NAMES + (
    "causal_mask", "check_ids", "combine_masks", "ids_to_device", "make_dropout_mask", "padding_mask",
    "REFERENCE", "FAST", "NAMES", "TABLES",
))


def __getattr__(name):
    if name in REFERENCE:
        return (FAST if _kernels.fast else REFERENCE)[name]
    raise AttributeError(f"module 'minitransformer.functional' has no attribute {name!r}")


def __dir__():
    return __all__
