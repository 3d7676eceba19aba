"""The three transformer families: decoder-only, encoder-only, encoder-decoder; and the two
recurrent models they are measured against (docs/recurrent.md).

* :mod:`~minitransformer.models.decoder_lm` - ``DecoderLM``, the decoder-only language model (GPT-like).
* :mod:`~minitransformer.models.encoder` - ``Encoder``, the encoder-only body (BERT-like): states, no head.
* :mod:`~minitransformer.models.masked_lm` - ``MaskedLM``, an encoder with a masked-token head (pretraining),
  and ``mask_tokens``, the corruption it learns to undo.
* :mod:`~minitransformer.models.property_model` - ``PropertyModel``, an encoder with a pooled head on the first
  token (a molecule's properties), and ``fine_tuning_model`` around a pretrained encoder.
* :mod:`~minitransformer.models.seq2seq` - ``Seq2Seq``, the encoder-decoder transformer.
* :mod:`~minitransformer.models.lstm_lm` - ``LSTMLM``, the recurrent language model (CharRNN-style).
* :mod:`~minitransformer.models.rnn_seq2seq` - ``RNNSeq2Seq``, the attentional LSTM encoder-decoder."""
from minitransformer.models.decoder_lm import DecoderLM, DecoderLMConfig
from minitransformer.models.encoder import Encoder, EncoderConfig
from minitransformer.models.masked_lm import MaskedLM, MaskedTokenHead, mask_tokens
from minitransformer.models.property_model import (
    PooledHead, PropertyModel, PropertyModelConfig, fine_tuning_model,
)
from minitransformer.models.lstm_lm import LSTMLM, LSTMLMConfig
from minitransformer.models.rnn_seq2seq import RNNSeq2Seq, RNNSeq2SeqConfig
from minitransformer.models.seq2seq import Seq2Seq, Seq2SeqConfig

__all__ = ["DecoderLM", "DecoderLMConfig", "Encoder", "EncoderConfig", "MaskedLM", "MaskedTokenHead", "mask_tokens",
           "PropertyModel", "PropertyModelConfig", "PooledHead", "fine_tuning_model", "Seq2Seq", "Seq2SeqConfig",
           "LSTMLM", "LSTMLMConfig", "RNNSeq2Seq", "RNNSeq2SeqConfig"]
