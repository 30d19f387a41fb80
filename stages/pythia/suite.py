"""The local GPT-NeoX suite: a word-level tokenizer, a tiny GPTNeoXForCausalLM and its corpus.

Stands in for Pythia where no hub is reachable. The tokenizer is a ``tokenizers`` WordLevel model
wrapped as a transformers fast tokenizer, saved next to the weights, so ``AutoTokenizer`` and
``AutoModelForCausalLM`` load the local suite exactly as they load real Pythia checkpoints.
"""
from __future__ import annotations

import random

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import GPTNeoXConfig, GPTNeoXForCausalLM, PreTrainedTokenizerFast

from stages.pythia import grammar
from stages.pythia.rotary import pin_rotary

EOS = "<|endoftext|>"
PAD = "<|padding|>"
UNK = "<|unk|>"


def build_tokenizer() -> PreTrainedTokenizerFast:
    vocab = {tok: i for i, tok in enumerate([EOS, PAD, UNK] + grammar.vocabulary())}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token=EOS, eos_token=EOS, unk_token=UNK,
                                   pad_token=PAD)


def build_model(tokenizer, cfg: dict, seed: int) -> GPTNeoXForCausalLM:
    torch.manual_seed(seed)
    config = GPTNeoXConfig(
        vocab_size=len(tokenizer), hidden_size=cfg["hidden_size"], num_hidden_layers=cfg["layers"],
        num_attention_heads=cfg["heads"], intermediate_size=4 * cfg["hidden_size"],
        max_position_embeddings=cfg["seq_len"], rotary_pct=0.25, use_parallel_residual=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=False,
    )
    model = GPTNeoXForCausalLM(config)
    pin_rotary(model)  # cos/sin off MKL's vector math: the same bits on any vendor's CPU
    return model


def corpus_stream(tokenizer, seed: int, weights: dict | None = None):
    """An endless deterministic stream of token ids: correct grammar texts, each after an EOS."""
    rng = random.Random(f"corpus:{seed}")
    eos = tokenizer.eos_token_id
    while True:  # texts are drawn in order and tokenised in batches (one call per 256, not per text)
        texts = [grammar.sentence(rng, weights) for _ in range(256)]
        for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]:
            yield eos
            yield from ids


def batches(tokenizer, seed: int, batch_size: int, seq_len: int, weights: dict | None = None):
    """Packed ``[batch_size, seq_len]`` LongTensors from :func:`corpus_stream`."""
    stream = corpus_stream(tokenizer, seed, weights)
    while True:
        flat = np.fromiter((next(stream) for _ in range(batch_size * seq_len)), dtype=np.int64)
        yield torch.from_numpy(flat.reshape(batch_size, seq_len))
