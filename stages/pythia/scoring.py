"""Scoring a causal LM: summed log-likelihood of each choice given its context, and last-token states.

Every sequence starts with the tokenizer's BOS (EOS for Pythia, which has no separate BOS), so an
empty context (a bare minimal pair) is scored from the start-of-text state. A choice's tokens are
those of ``context + " " + choice`` after the context's tokens, so BPE merges across the boundary
are handled as the model sees them.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F


def _start_id(tokenizer) -> int:
    start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
    if start is None:
        raise ValueError("tokenizer has neither a BOS nor an EOS token")
    return int(start)


def encode_choice(tokenizer, context: str, choice: str) -> tuple[list[int], int]:
    """``(ids, n_context)``: BOS + context + choice ids, and how many leading ids are not scored."""
    enc = lambda text: tokenizer(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    ctx = enc(context) if context else []
    full = enc(f"{context} {choice}" if context else choice)
    if full[:len(ctx)] != ctx:  # a merge across the boundary: fall back to separate encodings
        full = ctx + enc(" " + choice)
    return [_start_id(tokenizer)] + full, 1 + len(ctx)


def _pad_id(tokenizer) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else _start_id(tokenizer)


def _pad(seqs: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), pad, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s)
        mask[i, :len(s)] = 1
    return ids, mask


@torch.no_grad()
def choice_loglik(model, tokenizer, items: pd.DataFrame, batch_size: int, device) -> list[np.ndarray]:
    """For each item (columns context, choices), the summed log-likelihood of every choice."""
    flat, owner = [], []
    for i, (context, choices) in enumerate(zip(items["context"], items["choices"])):
        for choice in choices:
            flat.append(encode_choice(tokenizer, context, choice))
            owner.append(i)
    pad = _pad_id(tokenizer)
    order = np.argsort([-len(ids) for ids, _ in flat], kind="stable")  # similar lengths share a batch
    scores = np.zeros(len(flat))
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        ids, mask = _pad([flat[i][0] for i in idx], pad)
        ids, mask = ids.to(device), mask.to(device)
        logits = model(input_ids=ids, attention_mask=mask).logits.float()
        logp = F.log_softmax(logits[:, :-1], dim=-1).gather(-1, ids[:, 1:, None])[..., 0]
        positions = torch.arange(1, ids.shape[1], device=device)[None, :]
        n_ctx = torch.tensor([flat[i][1] for i in idx], device=device)[:, None]
        keep = (positions >= n_ctx) & mask[:, 1:].bool()
        scores[idx] = (logp * keep).sum(dim=1).cpu().numpy()
    out = [[] for _ in range(len(items))]
    for i, s in zip(owner, scores):
        out[i].append(s)
    return [np.asarray(s) for s in out]


def accuracy(items: pd.DataFrame, loglik: list[np.ndarray]) -> np.ndarray:
    """1 where the highest-likelihood choice is the answer (ties count as wrong)."""
    correct = []
    for answer, s in zip(items["answer"], loglik):
        best = np.flatnonzero(s == s.max())
        correct.append(float(len(best) == 1 and best[0] == answer))
    return np.asarray(correct)


def chance(items: pd.DataFrame) -> np.ndarray:
    """Each item's chance level, ``1 / (number of choices)``: the expected accuracy of a guess (the
    mean over a set's items is the set's chance level)."""
    return np.asarray([1.0 / len(c) for c in items["choices"]])


@torch.no_grad()
def last_token_states(model, tokenizer, contexts: list[str], batch_size: int, device) -> np.ndarray:
    """``[n_layers + 1, n, d]``: every layer's hidden state at each context's last token (after BOS)."""
    seqs = [encode_choice(tokenizer, "", c)[0] if c else [_start_id(tokenizer)] for c in contexts]
    pad = _pad_id(tokenizer)
    chunks = []
    for start in range(0, len(seqs), batch_size):
        batch = seqs[start:start + batch_size]
        ids, mask = _pad(batch, pad)
        out = model(input_ids=ids.to(device), attention_mask=mask.to(device), output_hidden_states=True)
        last = torch.tensor([len(s) - 1 for s in batch], device=device)
        rows = torch.arange(len(batch), device=device)
        chunks.append(torch.stack([h[rows, last] for h in out.hidden_states]).float().cpu())
    return torch.cat(chunks, dim=1).numpy()
