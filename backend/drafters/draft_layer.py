"""The one draft decoder layer every trained head stacks (EAGLE-3, MTP, DFlash, DSpark), and its RoPE.

A Llama-shaped layer sized by the target's config (heads, KV heads, head size, RoPE settings):

    a = attention(q, k, v)            q, k, v = W_q x, W_k x, W_v x, RoPE at each row's position
    h = residual + W_o a
    y = h + W_down(act(W_gate m) * W_up m),   m = RMSNorm(h)                     (SwiGLU MLP)

Two switches cover the four kinds: `input_norm` makes it a standard pre-norm layer (x is normed and is its
own residual: MTP's block, DFlash's layers); without it the caller hands over an already-normed x and the
residual, which may differ in width (EAGLE-3's [emb; h] is 2H wide, its residual H). `qk_norm` adds
per-head RMSNorms on queries and keys (Qwen3-style, as z-lab's DFlash layers have).

Who a query may see is the caller's business: `attention.attend(q, k, v)` is a chain's KV cache, the
training-time test's memory, or DFlash's injected context. Knows nothing about drafting or training.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn
from transformers.activations import ACT2FN
from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding


class Attention(Protocol):
    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q [B, heads, N, d], this call's k, v [B, kv_heads, N, d] -> [B, heads, N, d]."""


class RotaryEmbedding(nn.Module):
    """RoPE with the target's own settings (base, scaling), in the rotate-half form Llama uses:
    x_rot = x cos(p w) + rotate_half(x) sin(p w), w_i = base^(-2i/d)."""

    def __init__(self, config) -> None:
        super().__init__()
        self.frequencies = LlamaRotaryEmbedding(config)  # inv_freq is a non-persistent buffer: never saved

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x [B, heads, N, d] at positions [B or 1, N] -> x rotated, same shape."""
        cos, sin = self.frequencies(x, positions)  # [B, N, d] each
        cos, sin = cos[:, None], sin[:, None]  # [B, 1, N, d]
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin


def rms_norm(size: int, config) -> LlamaRMSNorm:
    """The target's kind of RMSNorm (computed in fp32), with its epsilon."""
    return LlamaRMSNorm(size, config.rms_norm_eps)


class DraftLayer(nn.Module):
    """One decoder layer whose attention reads `in_features` while its residual stream is H wide."""

    def __init__(
        self, config, in_features: int, intermediate_size: int, *, input_norm: bool = False, qk_norm: bool = False
    ) -> None:
        super().__init__()
        hidden, heads = config.hidden_size, config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        self.head_dim = getattr(config, "head_dim", None) or hidden // heads
        bias, mlp_bias = getattr(config, "attention_bias", False), getattr(config, "mlp_bias", False)
        self.input_norm = rms_norm(hidden, config) if input_norm else None
        self.q_proj = nn.Linear(in_features, heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(in_features, kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(in_features, kv_heads * self.head_dim, bias=bias)
        self.q_norm = rms_norm(self.head_dim, config) if qk_norm else None
        self.k_norm = rms_norm(self.head_dim, config) if qk_norm else None
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=bias)
        self.post_attention_norm = rms_norm(hidden, config)
        self.gate_proj = nn.Linear(hidden, intermediate_size, bias=mlp_bias)
        self.up_proj = nn.Linear(hidden, intermediate_size, bias=mlp_bias)
        self.down_proj = nn.Linear(intermediate_size, hidden, bias=mlp_bias)
        self.act = ACT2FN[config.hidden_act]
        self.rope = RotaryEmbedding(config)

    def _split(self, x: torch.Tensor, norm: nn.Module | None) -> torch.Tensor:
        """[B, N, n * d] -> [B, n, N, d], per-head normed when the layer has q/k norms."""
        x = x.unflatten(-1, (-1, self.head_dim))
        return (x if norm is None else norm(x)).transpose(1, 2)

    def keys_values(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention input x [B, N, in] at positions [B or 1, N] -> keys (RoPE applied), values [B, kv, N, d]."""
        keys = self.rope(self._split(self.k_proj(x), self.k_norm), positions)
        return keys, self._split(self.v_proj(x), None)

    def forward(
        self, x: torch.Tensor, positions: torch.Tensor, attention: Attention, residual: torch.Tensor | None = None
    ) -> torch.Tensor:
        """x [B, N, in] at positions [B or 1, N] -> [B, N, H]. With an input norm x is normed here and is the
        residual; without one x arrives normed and `residual` [B, N, H] is given."""
        if self.input_norm is not None:
            x, residual = self.input_norm(x), x
        queries = self.rope(self._split(self.q_proj(x), self.q_norm), positions)  # [B, heads, N, d]
        keys, values = self.keys_values(x, positions)
        attended = attention.attend(queries, keys, values).transpose(1, 2).flatten(2)  # [B, N, heads * d]
        h = residual + self.o_proj(attended)
        m = self.post_attention_norm(h)
        return h + self.down_proj(self.act(self.gate_proj(m)) * self.up_proj(m))
