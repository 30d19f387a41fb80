"""Hidden states of a fixed probe batch, and one monitor reading from a model in a training loop.

:func:`probe_hidden_states` runs the probe batch through the model in eval mode without gradients
(``output_hidden_states=True``, the transformers convention; through ``model.base_model`` when
the model has one, so a causal LM's head is not computed) and keeps one token per example:
the last non-pad token (from the ``attention_mask``; works with left or right padding), or a given
position. The model's training mode is restored afterwards, so a reading never changes training.
"""
from __future__ import annotations

from typing import Callable, Mapping

import torch

from stages.monitor.core import Event, RankMeMonitor


def _model_device(model) -> torch.device:
    try:
        return next(model.parameters()).device
    except (StopIteration, AttributeError):
        return torch.device("cpu")


def _inputs(batch, device) -> dict:
    if isinstance(batch, torch.Tensor):
        return {"input_ids": batch.to(device)}
    if isinstance(batch, Mapping):
        return {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in batch.items()}
    raise TypeError("probe batch must be a tensor of input ids or a mapping such as a tokenizer's BatchEncoding")


def token_positions(inputs: dict, position=None) -> torch.Tensor:
    """Per-row token index: ``position`` ``None`` = last non-pad token (last 1 of the
    ``attention_mask``; the last token when there is no mask), an int (negative counts from the
    end) for every row, or one index per row."""
    ids = inputs.get("input_ids")
    if ids is None:
        raise ValueError("probe batch has no input_ids")
    n, t = ids.shape[:2]
    if position is None:
        mask = inputs.get("attention_mask")
        if mask is None:
            return torch.full((n,), t - 1, dtype=torch.long, device=ids.device)
        mask = mask.to(ids.device)
        if not bool((mask.sum(dim=1) > 0).all()):
            raise ValueError("a probe example has no token (all-zero attention_mask row)")
        index = torch.arange(t, device=ids.device).expand(n, t)
        return torch.where(mask.bool(), index, torch.full_like(index, -1)).max(dim=1).values
    if isinstance(position, int):
        pos = position % t if -t <= position < t else None
        if pos is None:
            raise ValueError(f"position {position} is outside sequences of length {t}")
        return torch.full((n,), pos, dtype=torch.long, device=ids.device)
    pos = torch.as_tensor(position, dtype=torch.long, device=ids.device)
    if pos.shape != (n,):
        raise ValueError(f"positions must be one index per probe example ({n}), got shape {tuple(pos.shape)}")
    return pos % t


@torch.no_grad()
def probe_hidden_states(model, batch, position=None, hidden_fn: Callable | None = None) -> list[torch.Tensor]:
    """``[n, d]`` hidden state of every layer (0 = embeddings) at one token per probe example.

    ``hidden_fn(model, batch)``, when given, replaces the transformers call: it returns the
    per-layer states, either ``[n, d]`` each (already at the chosen token) or ``[n, t, d]`` (then
    ``position`` picks the token). Eval mode and ``no_grad`` apply to it too."""
    was_training = model.training
    model.eval()
    try:
        if hidden_fn is not None:
            states = hidden_fn(model, batch)
            states = list(states.values()) if isinstance(states, Mapping) else list(states)
            out = []
            for h in states:
                if h.dim() == 3:
                    n, t = h.shape[:2]
                    ids = torch.zeros((n, t), dtype=torch.long, device=h.device)
                    mask = batch.get("attention_mask") if isinstance(batch, Mapping) else None
                    pos = token_positions({"input_ids": ids, "attention_mask": mask}, position)
                    h = h[torch.arange(n, device=h.device), pos.to(h.device)]
                out.append(h.detach().float())
            return out
        inputs = _inputs(batch, _model_device(model))
        # the base model (without the LM head) returns the same hidden states for less work
        body = getattr(model, "base_model", model)
        result = body(**inputs, output_hidden_states=True)
        hidden = getattr(result, "hidden_states", None)
        if hidden is None:
            raise ValueError(f"{type(model).__name__} returned no hidden_states; pass hidden_fn")
        pos = token_positions(inputs, position)
        rows = torch.arange(len(pos), device=pos.device)
        return [h[rows, pos.to(h.device)].detach().float() for h in hidden]
    finally:
        model.train(was_training)


def monitor_step(model, probe_batch, step: int, monitor: RankMeMonitor, hidden_fn: Callable | None = None,
                 accuracy: float | None = None, position=None) -> list[Event]:
    """One monitor reading in a plain PyTorch loop: probe hidden states of every layer, RankMe of
    each (``monitor.latest`` holds them afterwards), and the events newly reported at ``step``."""
    return monitor.update(step, probe_hidden_states(model, probe_batch, position, hidden_fn), accuracy)
