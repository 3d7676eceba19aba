r"""``PropertyModel``: an :class:`~minitransformer.models.encoder.Encoder` with a pooled head,
for properties of a whole molecule (the Tox21 assays: classification or regression).

The head reads the first token's state (the ``<cls>`` position), optionally beside
F numbers given per molecule (such as RDKit's descriptors,
:mod:`minitransformer.chem.descriptors`), through an optional hidden layer (Chemprop's
feed-forward network), to K outputs::

    h = Encoder(ids)                                 # (B, T, D)
    z = [h[:, 0]; f]                                 # (B, D + F): the features are inputs
    u = drop(act(z @ W_1 + b_1))                     # (B, head_hidden), with head_hidden > 0
    y = u @ W_2 + b_2     (or z @ W_2 + b_2)         # (B, K): PooledHead

:class:`PooledHead` is the head alone, with its backward (derived in
``docs/kernels/pooled_head.md``); :func:`fine_tuning_model` builds a property model
around the weights of an encoder pretrained elsewhere.
"""
from __future__ import annotations

import dataclasses

from minitransformer.backend import xp
from minitransformer.models.encoder import Encoder, EncoderConfig
from minitransformer.nn import Dropout, Linear, Module, make_activation


@dataclasses.dataclass(kw_only=True)
class PropertyModelConfig(EncoderConfig):
    """Options of :class:`PropertyModel`: the encoder's (:class:`~minitransformer.models.encoder.EncoderConfig`)
    and its head's: K = ``n_outputs`` outputs, F = ``n_features`` numbers read per molecule
    beside the first token's state, a hidden layer of ``head_hidden`` units (0: none), with
    the blocks' ``activation`` and ``resid_dropout``."""

    n_outputs: int = 1
    n_features: int = 0
    head_hidden: int = 0

    def __post_init__(self):
        super().__post_init__()  # types and ranges: n_features, head_hidden >= 0
        if self.n_outputs < 1:
            raise ValueError(f"PropertyModelConfig.n_outputs must be an integer >= 1, got {self.n_outputs!r} "
                             "(a model without outputs is an Encoder)")

    def encoder_config(self) -> EncoderConfig:
        """The options of the encoder alone (this config without the head's)."""
        names = {f.name for f in dataclasses.fields(EncoderConfig)}
        return EncoderConfig(**{k: v for k, v in dataclasses.asdict(self).items() if k in names})


class PooledHead(Module):
    r"""The first token's state, and the features beside it, to K outputs.

    .. math::
        z = [h_{:,0};\ f] \in \mathbb{R}^{B \times (D + F)}, \qquad
        u = \mathrm{drop}(\mathrm{act}(z W_1 + b_1)), \qquad y = u W_2 + b_2

    (without the hidden layer, :math:`y = z W_2 + b_2`). Backward: the linear layers give
    :math:`\partial L/\partial z`; its first D columns are
    :math:`\partial L/\partial h_{:,0}`, every other position's gradient is zero (the head
    reads none of them), and the last F columns are dropped: the features are inputs, not
    weights, and get no gradient.
    """

    def __init__(self, config: PropertyModelConfig, rng):
        self.config = c = config
        width = c.d_model + c.n_features  # [h_0; f]
        self.hidden = self.act = self.drop = None
        if c.head_hidden:
            self.hidden = Linear(width, c.head_hidden, bias=True, rng=rng)
            self.act, self.drop = make_activation(c.activation), Dropout(c.resid_dropout, rng=rng)
            width = c.head_hidden
        self.out = Linear(width, c.n_outputs, bias=True, rng=rng)

    def forward(self, h, features=None):
        """h: (B, T, D) states; features: (B, F), given exactly when F > 0. Returns y (B, K)."""
        z = self.pooled(h, features)  # (B, D + F)
        if self.hidden is not None:
            z = self.drop(self.act(self.hidden(z)))  # (B, head_hidden)
        self.cache = h.shape  # (B, T, D)
        return self.out(z)  # (B, K)

    def backward(self, dy):
        """dy: (B, K) -> dh (B, T, D), non-zero at position 0 only."""
        shape = self._require_cache()  # (B, T, D)
        D = shape[-1]
        dz = self.out.backward(dy)  # (B, D + F) or (B, head_hidden)
        if self.hidden is not None:
            dz = self.hidden.backward(self.act.backward(self.drop.backward(dz)))  # (B, D + F)
        dh = xp.zeros(shape, dtype=dz.dtype)  # (B, T, D): the head read position 0 only
        dh[:, 0] = dz[:, :D]  # the features' columns get no gradient
        return dh

    def pooled(self, h, features):
        """The head's input: the first token's state (B, D), then the features (B, F)."""
        c = self.config
        if getattr(h, "ndim", None) != 3 or h.shape[-1] != c.d_model:
            raise ValueError(f"PooledHead: h must have shape (B, T, D={c.d_model}), got "
                             f"{tuple(getattr(h, 'shape', ()))}; give it the encoder's states")
        B, F = h.shape[0], c.n_features
        if F == 0:
            if features is not None:
                raise ValueError("PooledHead: features given, but the model was built with n_features=0; "
                                 "leave them out or build it with n_features=F")
            return h[:, 0]  # (B, D)
        if features is None or tuple(features.shape) != (B, F):
            got = "none" if features is None else f"shape {tuple(features.shape)}"
            raise ValueError(f"PooledHead: the head reads {F} features per molecule, (B, F) = ({B}, {F}); got {got}")
        return xp.concatenate([h[:, 0], features.astype(h.dtype, copy=False)], axis=1)  # (B, D + F)


class PropertyModel(Module):
    """Encoder + pooled head: ids (B, T) and features (B, F) -> y (B, K) (the module docstring)."""

    def __init__(self, config: PropertyModelConfig):
        self.config = c = config
        self.encoder = Encoder(c.encoder_config())
        self.rng = self.encoder.rng  # one random stream for the encoder, the head's init and its dropout
        self.head = PooledHead(c, self.rng)

    def forward(self, ids, features=None, relations=None):
        """ids: (B, T) integer, ``<cls>`` first, right-padded; features: (B, F) with n_features = F > 0;
        relations: (B, T, T) graph codes, with a graph bias (``graph_max_distance`` > 0).
        Returns the outputs (B, K) (logits, for a classification)."""
        self.cache = True
        return self.head(self.encoder(ids, relations), features)  # (B, K)

    def backward(self, dy):
        """dy: (B, K). Accumulates the gradients of the head and the encoder; returns None
        (the features get no gradient)."""
        self._require_cache()
        self.encoder.backward(self.head.backward(dy))  # (B, T, D) into the encoder
        return None


def fine_tuning_model(encoder_config: dict, encoder_weights: dict, **options) -> PropertyModel:
    """A property model around a pretrained encoder: its architecture (``encoder_config``, an
    :class:`~minitransformer.models.encoder.EncoderConfig` as a dict) and its weights
    (``encoder_weights``, named as the Encoder's own: ``embed.*``, ``blocks.*``, ``ln_f.*``),
    with a fresh head. ``options``: what the fine-tuning chooses, the head (``n_outputs``,
    ``n_features``, ``head_hidden``), the dropouts and the ``seed``."""
    body = EncoderConfig.from_dict(encoder_config)
    model = PropertyModel(PropertyModelConfig.from_dict({**body.to_dict(), **options}))
    model.encoder.load_state_dict(encoder_weights)  # every weight of the encoder, no other (ValueError)
    return model
