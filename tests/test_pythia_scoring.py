import numpy as np
import pandas as pd
import torch

from stages.pythia import scoring, suite
from tests.pythia_helpers import TINY


def _model():
    tokenizer = suite.build_tokenizer()
    return suite.build_model(tokenizer, TINY, seed=0).eval(), tokenizer


def test_choice_loglik_matches_manual_sum():
    model, tok = _model()
    items = pd.DataFrame({"context": ["the dog near the cats", ""],
                          "choices": [["runs .", "run ."], ["the dog sees the cat .", "dog the sees cat the ."]],
                          "answer": [0, 0]})
    got = scoring.choice_loglik(model, tok, items, batch_size=3, device="cpu")
    for (context, choices), scores in zip(zip(items["context"], items["choices"]), got):
        for choice, score in zip(choices, scores):
            ctx = tok(context, add_special_tokens=False)["input_ids"] if context else []
            cont = tok(choice, add_special_tokens=False)["input_ids"]
            ids = torch.tensor([[tok.eos_token_id] + ctx + cont])
            with torch.no_grad():
                logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
            manual = sum(float(logp[1 + len(ctx) + i - 1, t]) for i, t in enumerate(cont))
            assert np.isclose(score, manual, atol=1e-4)


def test_accuracy_picks_highest_and_counts_ties_wrong():
    items = pd.DataFrame({"answer": [0, 1, 1]})
    acc = scoring.accuracy(items, [np.array([-1.0, -2.0]), np.array([-1.0, -2.0, -3.0]), np.array([-1.0, -1.0])])
    assert acc.tolist() == [1.0, 0.0, 0.0]


def test_last_token_states_ignore_padding():
    model, tok = _model()
    contexts = ["the dog", "the opposite of hot is", ""]
    together = scoring.last_token_states(model, tok, contexts, batch_size=8, device="cpu")
    alone = np.concatenate([scoring.last_token_states(model, tok, [c], 1, "cpu") for c in contexts], axis=1)
    assert together.shape == (TINY["layers"] + 1, 3, TINY["hidden_size"])
    assert np.allclose(together, alone, atol=1e-5)
