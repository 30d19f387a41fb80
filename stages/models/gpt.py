"""A pre-LN GPT in the spirit of nanoGPT: learned positions, tied embeddings, GELU MLP.

``GPT(cfg)`` runs torch's stock operators. ``GPT(cfg, portable_ops=True)`` (``runtime.cpu_paths:
portable``) takes GELU's and the loss's second derivatives off MKL's vector math
(stages/models/vendor_neutral_ops.py): the same forward and first-backward bits, vendor-exact
Hessian-vector products."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from stages.models import vendor_neutral_ops


@dataclass
class GPTConfig:
    vocab_size: int
    block_size: int
    n_layer: int
    n_head: int
    d_model: int
    dropout: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout

    def forward(self, x, start: int = 0):
        """Causal self-attention; with ``start > 0`` only the queries of positions ``start..t-1``
        (keys and values of every position), so the output has ``t - start`` positions."""
        b, t, c = x.shape
        heads = lambda z: z.view(b, -1, self.n_head, c // self.n_head).transpose(1, 2)  # noqa: E731
        dropout = self.dropout if self.training else 0.0
        if start == 0:
            q, k, v = self.qkv(x).split(c, dim=2)
            y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True, dropout_p=dropout)
        else:
            weight, bias = self.qkv.weight, self.qkv.bias
            q = F.linear(x[:, start:], weight[:c], bias[:c])
            k, v = F.linear(x, weight[c:], bias[c:]).split(c, dim=2)
            mask = torch.ones(t - start, t, dtype=torch.bool, device=x.device).tril(diagonal=start)
            y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), attn_mask=mask, dropout_p=dropout)
        return self.proj(y.transpose(1, 2).contiguous().view(b, t - start, c))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, portable_ops: bool = False):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model), vendor_neutral_ops.GELU() if portable_ops else nn.GELU(), nn.Linear(4 * cfg.d_model, cfg.d_model),
            nn.Dropout(cfg.dropout))

    def forward(self, x, start: int = 0):
        """The block's output at positions ``start..t-1`` (every position's input is still read)."""
        x = x[:, start:] + self.attn(self.ln1(x), start) if start else x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig, portable_ops: bool = False):
        super().__init__()
        self.portable_ops = portable_ops  # the loss too: stages.training.loop.answer_loss
        if cfg.d_model % cfg.n_head:
            raise ValueError(f"d_model {cfg.d_model} is not divisible by n_head {cfg.n_head}")
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.block_size, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, portable_ops) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.head.weight = self.wte.weight  # tied, as in GPT-2
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx, hidden_states: bool = False, start: int = 0):
        """Logits ``[b, t, vocab]``; with ``hidden_states`` also the residual stream after the
        embedding and after every block (``n_layer + 1`` tensors of ``[b, t, d]``).

        ``start > 0``: logits of positions ``start..t-1`` only, ``[b, t - start, vocab]``. The last
        block then computes only those positions (earlier blocks must still compute every position,
        whose keys and values the later ones read): the same numbers up to float rounding, for less
        work when a loss or a score reads the last positions alone (the answer of a task)."""
        t = idx.shape[1]
        if t > self.cfg.block_size:
            raise ValueError(f"sequence of length {t} exceeds block_size {self.cfg.block_size}")
        if not 0 <= start < t:
            raise ValueError(f"start {start} must lie in [0, {t})")
        if start and hidden_states:
            raise ValueError("hidden_states needs every position (start 0)")
        pos = torch.arange(t, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        states = [x]
        for i, block in enumerate(self.blocks):
            x = block(x, start if i == len(self.blocks) - 1 else 0)
            states.append(x)
        logits = self.head(self.ln_f(x))
        return (logits, states) if hidden_states else logits
