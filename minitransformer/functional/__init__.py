"""Pure forward/backward kernels. Each ``*_forward`` returns ``(out, cache)`` and
each ``*_backward`` takes ``(dout, cache)`` and returns the input gradients.
The modules in :mod:`minitransformer.nn` are thin stateful wrappers over these."""
from minitransformer.functional.activations import (
    erfc, gelu_backward, gelu_forward, normal_cdf, relu_backward, relu_forward,
)
from minitransformer.functional.attention import attention_backward, attention_forward
from minitransformer.functional.bce import masked_bce_backward, masked_bce_forward
from minitransformer.functional.cross_entropy import cross_entropy_backward, cross_entropy_forward
from minitransformer.functional.dropout import dropout_backward, dropout_forward, make_dropout_mask
from minitransformer.functional.embedding import (
    check_ids, embedding_backward, embedding_forward, ids_to_device,
)
from minitransformer.functional.layernorm import layernorm_backward, layernorm_forward
from minitransformer.functional.linear import linear_backward, linear_forward
from minitransformer.functional.masks import causal_mask, combine_masks, padding_mask
from minitransformer.functional.softmax import log_softmax, softmax_backward, softmax_forward

__all__ = [
    "attention_backward", "attention_forward", "causal_mask", "check_ids", "combine_masks",
    "cross_entropy_backward", "cross_entropy_forward", "dropout_backward", "dropout_forward",
    "embedding_backward", "embedding_forward", "erfc", "gelu_backward", "gelu_forward",
    "ids_to_device", "layernorm_backward", "layernorm_forward", "linear_backward", "linear_forward",
    "log_softmax", "make_dropout_mask", "masked_bce_backward", "masked_bce_forward",
    "normal_cdf", "padding_mask", "relu_backward", "relu_forward", "softmax_backward",
    "softmax_forward",
]
