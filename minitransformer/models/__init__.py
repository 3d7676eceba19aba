"""The three transformer families: decoder-only, encoder-only, encoder-decoder."""
from minitransformer.models.decoder_lm import DecoderLM, DecoderLMConfig
from minitransformer.models.encoder import Encoder, EncoderConfig, mask_tokens
from minitransformer.models.seq2seq import Seq2Seq, Seq2SeqConfig

__all__ = ["DecoderLM", "DecoderLMConfig", "Encoder", "EncoderConfig", "Seq2Seq", "Seq2SeqConfig",
           "mask_tokens"]
