"""The three transformer families: decoder-only, encoder-only, encoder-decoder; and the two
recurrent models they are measured against (docs/recurrent.md).

* :mod:`~minitransformer.models.decoder_lm` - ``DecoderLM``, the decoder-only language model (GPT-like).
* :mod:`~minitransformer.models.encoder` - ``Encoder``, the encoder-only model (BERT-like) and its heads.
* :mod:`~minitransformer.models.seq2seq` - ``Seq2Seq``, the encoder-decoder transformer.
* :mod:`~minitransformer.models.lstm_lm` - ``LSTMLM``, the recurrent language model (CharRNN-style).
* :mod:`~minitransformer.models.rnn_seq2seq` - ``RNNSeq2Seq``, the attentional LSTM encoder-decoder."""
from minitransformer.models.decoder_lm import DecoderLM, DecoderLMConfig
from minitransformer.models.encoder import Encoder, EncoderConfig, mask_tokens
from minitransformer.models.lstm_lm import LSTMLM, LSTMLMConfig
from minitransformer.models.rnn_seq2seq import RNNSeq2Seq, RNNSeq2SeqConfig
from minitransformer.models.seq2seq import Seq2Seq, Seq2SeqConfig

__all__ = ["DecoderLM", "DecoderLMConfig", "Encoder", "EncoderConfig", "Seq2Seq", "Seq2SeqConfig",
           "mask_tokens", "LSTMLM", "LSTMLMConfig", "RNNSeq2Seq", "RNNSeq2SeqConfig"]
