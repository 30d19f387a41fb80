"""The local suite's corpus (stages/pythia/suite.py): batched tokenisation gives the per-text stream."""
import itertools
import random

from stages.pythia import grammar
from stages.pythia.suite import batches, build_tokenizer, corpus_stream


def per_text_stream(tokenizer, seed, weights=None):
    """The definition: texts in order, each after an EOS, tokenised one at a time."""
    rng = random.Random(f"corpus:{seed}")
    while True:
        yield tokenizer.eos_token_id
        yield from tokenizer(grammar.sentence(rng, weights), add_special_tokens=False)["input_ids"]


def test_batched_stream_equals_per_text_tokenisation():
    tok = build_tokenizer()
    n = 20_000  # crosses several 256-text batches
    fast = list(itertools.islice(corpus_stream(tok, 3), n))
    slow = list(itertools.islice(per_text_stream(tok, 3), n))
    assert fast == slow
    assert fast.count(tok.eos_token_id) > 600  # more than two batches of texts
    assert tok.unk_token_id not in fast


def test_batches_pack_the_stream():
    tok = build_tokenizer()
    first = next(batches(tok, 3, batch_size=4, seq_len=16))
    assert first.shape == (4, 16)
    assert first.flatten().tolist() == list(itertools.islice(per_text_stream(tok, 3), 64))
