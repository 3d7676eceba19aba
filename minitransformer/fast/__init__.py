"""The fast kernel set: the same functions and signatures as the reference
kernels in :mod:`minitransformer.nn`, written for speed. Only the kernels listed
in :data:`FAST_KERNELS` differ; the others are the reference ones. Select with
``MINITRANSFORMER_KERNELS=fast`` (the default) or ``minitransformer.kernels.use("fast")``.
"""
from minitransformer.fast import activations, adam, attention, embedding, layernorm, linear, softmax

FAST_KERNELS = {
    "linear_forward": linear.linear_forward,
    "linear_backward": linear.linear_backward,
    "embedding_backward": embedding.embedding_backward,
    "softmax_forward": softmax.softmax_forward,
    "cross_entropy_forward": softmax.cross_entropy_forward,
    "cross_entropy_backward": softmax.cross_entropy_backward,
    "attention_forward": attention.attention_forward,
    "attention_backward": attention.attention_backward,
    "merge_heads": attention.merge_heads,
    "layernorm_forward": layernorm.layernorm_forward,
    "layernorm_backward": layernorm.layernorm_backward,
    "gelu_forward": activations.gelu_forward,
    "adam_update": adam.adam_update,
}
