"""DFlash: a block-parallel drafter that reads the target's hidden states (z-lab DFlash; research notes §3).

An autoregressive drafter pays one forward pass per drafted token; DFlash drafts a whole block in ONE
pass of a 1-2 layer head. The block is [anchor, MASK x D]: the anchor is the newest committed token
(the one the target scores next, at position s), the D mask slots (positions s+1 .. s+D) are the
tokens to fill. Every slot attends to the whole block (bidirectionally) and to the target's context:
the hidden states of a few target layers at every committed position before the anchor, concatenated,
projected and injected as extra keys/values into each draft layer's attention:

    ctx_t    = RMSNorm(W_c [h_t^(l1); ...; h_t^(lm)])                                  t < s
    K_i, V_i = [W^K_i ctx ; W^K_i x_blk], [W^V_i ctx ; W^V_i x_blk]     queries from the block only
    q_k      = softmax(W_d norm(layers(x_blk))_k)       slot k predicts the token at position s + k

The head borrows the target's token embeddings (frozen, not in its state dict) and owns a reduced
vocabulary LM head whose rows start as the target's LM-head rows d2t. It trains on anchored blocks
against the target's own next-token distribution restricted to d2t (§3.3). Drafts are mapped back to
target ids; when sampling, each q row is scattered back to the full vocabulary (zeros elsewhere), so
rejection sampling stays exact.

Knows nothing about acceptance, the engine's caches or the training loop; dspark.py builds on it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from backend.core.drafter import Draft, DrafterCost, DraftRequest, StepOutcome
from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel, matmul_weights
from backend.core.verify import sample, target_probs
from backend.drafters.spec import trained_spec
from backend.drafters.trained import (
    DrafterWeightsError,
    TargetParts,
    TrainBatch,
    draft_vocabulary,
    load_drafter,
    save_drafter,
)

KIND = "dflash"


def spread_layers(num_layers: int, count: int = 3) -> tuple[int, ...]:
    """`count` hidden-state indices (HF numbering) spread from the first layer's output, 1, to the last
    layer's input, L - 1: never 0 (embeddings) nor L (the final, normed state)."""
    top = max(num_layers - 1, 1)
    return tuple(sorted({min(top, round(1 + i * (top - 1) / max(count - 1, 1))) for i in range(count)}))


@dataclass
class DFlashConfig:
    target_layers: tuple[int, ...] = ()  # hidden-state indices fused into the context; () = spread_layers(L)
    num_layers: int = 1  # draft decoder layers
    block_size: int = 8  # drafts per block: the block is the anchor then this many mask slots
    draft_vocab_size: int = 8192  # rows of the draft LM head (at most the target's vocabulary)

    def to_dict(self) -> dict:
        return {**asdict(self), "target_layers": list(self.target_layers)}

    @classmethod
    def from_dict(cls, data: dict) -> DFlashConfig:
        return cls(**{**data, "target_layers": tuple(data.get("target_layers", ()))})


def _rope(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary embedding (rotate-half form, as Llama) of x [B, heads, N, d] at positions [B, N]."""
    half = x.shape[-1] // 2
    inverse = theta ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)  # [d/2]
    angles = positions[:, None, :, None].float() * inverse  # [B, 1, N, d/2]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class _DraftLayer(nn.Module):
    """A Llama-shaped decoder layer (per-head q/k norms as Qwen3) whose attention also reads the
    injected context keys/values."""

    def __init__(self, config, theta: float) -> None:
        super().__init__()
        hidden, eps = config.hidden_size, config.rms_norm_eps
        self.heads = config.num_attention_heads
        self.kv_heads = getattr(config, "num_key_value_heads", None) or self.heads
        self.head_dim = getattr(config, "head_dim", None) or hidden // self.heads
        self.theta = theta
        self.attn_norm, self.mlp_norm = nn.RMSNorm(hidden, eps=eps), nn.RMSNorm(hidden, eps=eps)
        self.q = nn.Linear(hidden, self.heads * self.head_dim, bias=False)
        self.k = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(hidden, self.kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(self.heads * self.head_dim, hidden, bias=False)
        self.q_norm, self.k_norm = nn.RMSNorm(self.head_dim, eps=eps), nn.RMSNorm(self.head_dim, eps=eps)
        self.gate = nn.Linear(hidden, config.intermediate_size, bias=False)
        self.up = nn.Linear(hidden, config.intermediate_size, bias=False)
        self.down = nn.Linear(config.intermediate_size, hidden, bias=False)

    def keys_values(self, x: torch.Tensor, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [B, N, H] at positions [B, N] -> keys, values [B, kv_heads, N, head_dim] (RoPE on keys)."""
        b, n, _ = x.shape
        keys = self.k_norm(self.k(x).view(b, n, self.kv_heads, self.head_dim)).transpose(1, 2)
        values = self.v(x).view(b, n, self.kv_heads, self.head_dim).transpose(1, 2)
        return _rope(keys, positions, self.theta), values

    def forward(self, x: torch.Tensor, positions: torch.Tensor, ctx_keys: torch.Tensor, ctx_values: torch.Tensor,
                mask: torch.Tensor | None) -> torch.Tensor:
        """x [B, N, H]; ctx_* [B, kv_heads, C, head_dim]; mask [B, 1, N, C + N] (True = may attend) or None."""
        b, n, _ = x.shape
        h = self.attn_norm(x)
        queries = self.q_norm(self.q(h).view(b, n, self.heads, self.head_dim)).transpose(1, 2)  # [B, heads, N, d]
        keys, values = self.keys_values(h, positions)
        keys, values = torch.cat([ctx_keys, keys], dim=2), torch.cat([ctx_values, values], dim=2)  # [B, kvh, C+N, d]
        attended = F.scaled_dot_product_attention(_rope(queries, positions, self.theta), keys, values,
                                                  attn_mask=mask, enable_gqa=self.heads != self.kv_heads)
        x = x + self.o(attended.transpose(1, 2).reshape(b, n, -1))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


@dataclass
class ContextKV:
    """The injected context's keys and values for every draft layer. They depend only on the target's
    features and their positions, never on the block, so a session computes them once per position."""

    keys: list[torch.Tensor]  # per draft layer [B, kv_heads, C, head_dim], RoPE applied
    values: list[torch.Tensor]

    @property
    def length(self) -> int:
        return self.keys[0].shape[2]

    def extend(self, more: ContextKV) -> ContextKV:
        return ContextKV([torch.cat(pair, dim=2) for pair in zip(self.keys, more.keys, strict=True)],
                         [torch.cat(pair, dim=2) for pair in zip(self.values, more.values, strict=True)])


class DFlashHead(nn.Module):
    kind = KIND

    def __init__(self, config: DFlashConfig, parts: TargetParts, d2t: torch.Tensor) -> None:
        super().__init__()
        self.config, self.parts = config, parts  # parts is a plain dataclass: not registered, not saved
        hidden, eps = parts.hidden_size, parts.config.rms_norm_eps
        rope = getattr(parts.config, "rope_parameters", None) or {}
        theta = float(rope.get("rope_theta") or getattr(parts.config, "rope_theta", None) or 10000.0)
        self.fc = nn.Linear(len(config.target_layers) * hidden, hidden, bias=False)
        self.hidden_norm = nn.RMSNorm(hidden, eps=eps)
        self.layers = nn.ModuleList(_DraftLayer(parts.config, theta) for _ in range(config.num_layers))
        self.norm = nn.RMSNorm(hidden, eps=eps)
        embeddings = parts.embed.weight.detach()
        self.mask_embedding = nn.Parameter(embeddings.float().mean(dim=0).cpu())  # [H] marks "to fill"
        self.lm_head = nn.Linear(hidden, d2t.numel(), bias=False)  # [Vd, H]
        with torch.no_grad():
            self.lm_head.weight.copy_(parts.lm_head.weight.detach()[d2t.to(embeddings.device)])
        self.register_buffer("d2t", d2t.long().clone(), persistent=False)  # [Vd] draft id -> target id

    def encode_context(self, hidden: dict[int, torch.Tensor], positions: torch.Tensor) -> ContextKV:
        """hidden: per fused layer [B, C, H] target states at positions [B, C] -> every layer's context K/V."""
        dtype = self.fc.weight.dtype
        features = torch.cat([hidden[layer].to(dtype) for layer in self.config.target_layers], dim=-1)  # [B, C, mH]
        context = self.hidden_norm(self.fc(features))  # [B, C, H]
        pairs = [layer.keys_values(context, positions) for layer in self.layers]
        return ContextKV([k for k, _ in pairs], [v for _, v in pairs])

    @torch.no_grad()
    def empty_context(self, batch: int = 1) -> ContextKV:
        return self.encode_context({layer: self.fc.weight.new_zeros(batch, 0, self.parts.hidden_size)
                                    for layer in self.config.target_layers},
                                   torch.zeros(batch, 0, dtype=torch.long, device=self.fc.weight.device))

    def forward(self, anchors: torch.Tensor, anchor_positions: torch.Tensor, context: ContextKV,
                visible: torch.Tensor | None = None, drafts: int | None = None) -> torch.Tensor:
        """K blocks per row, all in one pass: anchors, anchor_positions [B, K]; visible [B, K, C] says which
        context positions each block may see (None: all). Returns the normed hidden states [B, K, 1 + D, H];
        slot 0 is the anchor's (unused), slot k predicts the token at anchor position + k."""
        b, k = anchors.shape
        slots = 1 + (drafts or self.config.block_size)
        embeddings = self.parts.embed.weight.detach()
        anchor_x = F.embedding(anchors, embeddings).to(self.mask_embedding.dtype)  # [B, K, H]
        masks = self.mask_embedding.expand(b, k, slots - 1, -1)  # [B, K, D, H]
        x = torch.cat([anchor_x[:, :, None], masks], dim=2).flatten(1, 2)  # [B, K(1+D), H]
        offsets = torch.arange(slots, device=anchors.device)
        positions = (anchor_positions[..., None] + offsets).flatten(1)  # [B, K(1+D)]
        mask = None if visible is None and k == 1 else self._mask(visible, b, k, slots, context.length)
        for layer, keys, values in zip(self.layers, context.keys, context.values, strict=True):
            x = layer(x, positions, keys, values, mask)
        return self.norm(x).view(b, k, slots, -1)

    def _mask(self, visible: torch.Tensor | None, b: int, k: int, slots: int, length: int) -> torch.Tensor:
        """[B, 1, K(1+D), C + K(1+D)]: a block sees its visible context and itself, never other blocks."""
        device = self.fc.weight.device
        if visible is None:
            visible = torch.ones(b, k, length, dtype=torch.bool, device=device)
        context = visible.repeat_interleave(slots, dim=1)  # [B, N, C]
        same_block = torch.eye(k, dtype=torch.bool, device=device).repeat_interleave(slots, 0)
        same_block = same_block.repeat_interleave(slots, 1)  # [N, N]
        return torch.cat([context, same_block.expand(b, -1, -1)], dim=-1)[:, None]

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(hidden)  # [..., Vd]


# --- training: anchored blocks (research notes §3.3) ---------------------------------------------


@dataclass
class AnchoredBlocks:
    """A training batch cut into K anchored blocks per row; slot k of the block anchored at a is position
    a + k, and its target is the target's next-token distribution at a + k - 1 over the draft vocabulary."""

    hidden: torch.Tensor  # [B, K, D, H] the head's states at the mask slots
    target: torch.Tensor  # [B, K, D, Vd] the target's distribution for each slot's token
    valid: torch.Tensor  # [B, K, D] bool: the slot is inside the row and its token is a training target
    previous: torch.Tensor  # [B, K, D] the true token before each slot's (the anchor for slot 1)


def anchored_blocks(head: DFlashHead, parts: TargetParts, batch: TrainBatch, block_size: int | None = None,
                    anchors_per_row: int = 16, generator: torch.Generator | None = None) -> AnchoredBlocks:
    """Sample anchors (positions whose next token is a training target) and run all their blocks at once."""
    ids, loss_mask = batch.input_ids, batch.loss_mask.bool()
    (b, t), device = ids.shape, ids.device
    drafts = block_size or head.config.block_size
    scores = torch.rand(b, t, generator=generator, device=device).masked_fill(~loss_mask, -1.0)
    best = scores.topk(min(anchors_per_row, t), dim=1)
    anchors, anchored = best.indices, best.values >= 0  # [B, K]
    k = anchors.shape[1]
    time = torch.arange(t, device=device)
    context = head.encode_context(batch.hidden, time.expand(b, t))
    visible = time[None, None] < anchors[..., None]  # [B, K, T]: only states before the anchor
    hidden = head(ids.gather(1, anchors), anchors, context, visible, drafts)[:, :, 1:]  # [B, K, D, H]
    source = anchors[..., None] + torch.arange(drafts, device=device)  # [B, K, D]: a + k - 1 for slot k
    inside = source < t
    source = source.clamp(max=t - 1).flatten(1)  # [B, KD]
    valid = inside & loss_mask.gather(1, source).view(b, k, drafts) & anchored[..., None]
    with torch.no_grad():
        final = batch.hidden[parts.num_layers]  # [B, T, H]: final normed states
        states = final.gather(1, source[..., None].expand(-1, -1, final.shape[-1]))  # [B, KD, H]
        weight = parts.lm_head.weight.detach()[head.d2t]  # [Vd, H]
        bias = parts.lm_head.bias[head.d2t] if parts.lm_head.bias is not None else None
        target = torch.softmax(F.linear(states.to(weight.dtype), weight, bias).float(), dim=-1)
    previous = ids.gather(1, source).view(b, k, drafts)
    return AnchoredBlocks(hidden, target.view(b, k, drafts, -1), valid, previous)


def position_weights(drafts: int, decay: float | None, device: torch.device) -> torch.Tensor:
    """w_k = exp(-(k - 1) / gamma) for slot k = 1..D (DFlash trainers' decay); all ones when decay is None."""
    slots = torch.arange(drafts, device=device, dtype=torch.float32)
    return torch.ones_like(slots) if decay is None else torch.exp(-slots / decay)  # [D]


def block_kl(logits: torch.Tensor, blocks: AnchoredBlocks, weights: torch.Tensor) -> torch.Tensor:
    """sum w_k KL(p_target || q_draft) / sum w_k over valid slots; logits [B, K, D, Vd]."""
    kl = F.kl_div(torch.log_softmax(logits.float(), dim=-1), blocks.target, reduction="none").sum(-1)  # [B, K, D]
    w = weights * blocks.valid
    return (kl * w).sum() / w.sum().clamp(min=1e-6)


def top1_by_position(logits: torch.Tensor, blocks: AnchoredBlocks) -> list[float]:
    """Per slot k: how often the draft's argmax equals the target's (over the draft vocabulary)."""
    hits = (logits.argmax(-1) == blocks.target.argmax(-1)) & blocks.valid  # [B, K, D]
    return (hits.sum((0, 1)) / blocks.valid.sum((0, 1)).clamp(min=1)).tolist()


def expected_accepted(top1: list[float]) -> float:
    """sum_k prod_{i<=k} acc_i: drafts a greedy block would get accepted if slots failed independently."""
    return sum(math.prod(top1[: k + 1]) for k in range(len(top1)))


def training_loss(head: DFlashHead, parts: TargetParts, batch: TrainBatch, block_size: int | None = None,
                  anchors_per_row: int = 16, decay: float | None = 4.0,
                  generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict]:
    """Position-weighted KL to the target's distribution on anchored blocks; metrics per slot."""
    blocks = anchored_blocks(head, parts, batch, block_size, anchors_per_row, generator)
    logits = head.logits(blocks.hidden)  # [B, K, D, Vd]
    loss = block_kl(logits, blocks, position_weights(logits.shape[2], decay, logits.device))
    top1 = top1_by_position(logits, blocks)
    return loss, {"loss": float(loss.detach()), "top1": top1, "expected_accepted": expected_accepted(top1)}


# --- building, saving and loading -----------------------------------------------------------------


def build_head(head_class: type[nn.Module], config: DFlashConfig, target: LoadedModel, d2t: torch.Tensor | None = None,
               token_counts: torch.Tensor | None = None, state: dict[str, torch.Tensor] | None = None) -> nn.Module:
    """A head for `target` on its device and dtype, target layers resolved. The draft vocabulary is d2t, else
    the `draft_vocab_size` most frequent tokens of token_counts [V], else the first `draft_vocab_size` ids."""
    parts = TargetParts.of(target)
    if d2t is None and token_counts is not None:
        d2t = draft_vocabulary(token_counts, config.draft_vocab_size)
    d2t = torch.arange(min(config.draft_vocab_size, parts.vocab_size)) if d2t is None else d2t.long()
    layers = config.target_layers or spread_layers(parts.num_layers)
    if not all(0 <= layer <= parts.num_layers for layer in layers):
        raise SpecScopeError(f"target layers {list(layers)} are outside 0..{parts.num_layers} for this target")
    if config.num_layers < 1 or config.block_size < 1:
        raise SpecScopeError(f"a {head_class.kind} head needs at least one layer and one draft per block")
    config = replace(config, target_layers=tuple(layers), draft_vocab_size=d2t.numel())
    head = head_class(config, parts, d2t.to(target.device)).to(target.device, target.dtype)
    if state is not None:
        head.load_state_dict(state)
    return head


def new_head(target: LoadedModel, d2t: torch.Tensor | None = None, token_counts: torch.Tensor | None = None,
             **settings) -> DFlashHead:
    """An untrained head; settings are DFlashConfig fields; the vocabulary as in build_head."""
    return build_head(DFlashHead, DFlashConfig(**settings), target, d2t, token_counts)


def training_layers(target: LoadedModel, settings: dict) -> tuple[int, ...]:
    """The hidden states a TrainBatch must carry for a DFlash or DSpark head with these settings: the fused
    layers, then L (the final normed state, the source of the soft targets)."""
    num_layers = target.facts.num_layers
    return tuple(sorted({*(settings.get("target_layers") or spread_layers(num_layers)), num_layers}))


def save_head(folder: str | Path, head: nn.Module, target: LoadedModel, dtype: torch.dtype = torch.float16) -> Path:
    """Write a DFlash or DSpark head as a weights folder (config, weights, d2t)."""
    return save_drafter(folder, head.kind, head.config.to_dict(), head.state_dict(), target, head.d2t, dtype)


def load_head(folder: str | Path, target: LoadedModel, head_class: type[nn.Module] = DFlashHead,
              config_class: type[DFlashConfig] = DFlashConfig) -> nn.Module:
    files = load_drafter(folder, head_class.kind, target)
    try:
        config = config_class.from_dict(files.settings)
        return build_head(head_class, config, target, files.d2t, state=files.state)
    except (TypeError, RuntimeError, SpecScopeError) as error:
        raise DrafterWeightsError(f"{folder} does not fit a {head_class.kind} head: {error}") from error


# --- drafting ---------------------------------------------------------------------------------------


def pick_tokens(logits: torch.Tensor, d2t: torch.Tensor, vocab_size: int,
                request: DraftRequest) -> tuple[list[int], torch.Tensor | None, list[float]]:
    """Draft logits [n, Vd] -> target ids, q rows [n, V] (None when greedy: one-hot) and each token's
    draft probability. Sampling uses the target's settings; q is zero outside the draft vocabulary."""
    if request.sampling.greedy:
        probs = torch.softmax(logits.float(), dim=-1)  # [n, Vd]
        chosen = probs.argmax(dim=-1)  # [n]
        return d2t[chosen].tolist(), None, probs.gather(1, chosen[:, None])[:, 0].tolist()
    q = target_probs(logits, request.sampling)  # [n, Vd]
    chosen = torch.tensor([sample(row, request.generator) for row in q], device=q.device)  # [n]
    full = q.new_zeros(q.shape[0], vocab_size).index_copy_(1, d2t, q)  # [n, V]
    return d2t[chosen].tolist(), full, q.gather(1, chosen[:, None])[:, 0].tolist()


class DFlashSession:
    """Keeps the context K/V of every committed position; each proposal is one head forward."""

    def __init__(self, drafter: DFlashDrafter, prompt: list[int], prompt_hidden: dict[int, torch.Tensor]) -> None:
        self.drafter, self.backbone = drafter, drafter.backbone
        self.context = self.backbone.empty_context()  # K/V of every committed position whose states arrived
        self.pending: list[dict[int, torch.Tensor]] = []  # per outcome, layer -> [rows, H], not yet encoded
        self._receive(prompt_hidden, len(prompt) - 1)

    def _receive(self, hidden: dict[int, torch.Tensor], rows: int) -> None:
        layers = self.drafter.target_hidden_layers
        if rows == 0:
            return
        if any(layer not in hidden for layer in layers):
            raise SpecScopeError(f"the {self.drafter.name} drafter reads the target's hidden states, which this "
                                 "decoding path does not hand over (batched decoding does not): decode one "
                                 "sequence at a time")
        self.pending.append({layer: hidden[layer] for layer in layers})

    def _encode_pending(self) -> None:
        if not self.pending:
            return
        rows = {layer: torch.cat([p[layer] for p in self.pending])[None] for layer in self.pending[0]}  # [1, n, H]
        start = self.context.length
        positions = torch.arange(start, start + next(iter(rows.values())).shape[1], device=self.backbone.d2t.device)
        self.context = self.context.extend(self.backbone.encode_context(rows, positions[None]))
        self.pending = []

    @torch.inference_mode()
    def propose(self, request: DraftRequest) -> Draft:
        self._encode_pending()
        anchor_position = len(request.tokens) - 1
        if self.context.length != anchor_position:
            raise SpecScopeError(f"the {self.drafter.name} drafter has target states for {self.context.length} "
                                 f"positions but the sequence needs {anchor_position}: its session missed an outcome")
        wanted = min(request.max_tokens, self.backbone.config.block_size)
        if wanted < 1:
            return Draft([])
        device = self.backbone.d2t.device
        anchor = torch.tensor([[request.tokens[-1]]], device=device)  # [1, 1]
        hidden = self.backbone(anchor, torch.tensor([[anchor_position]], device=device), self.context)  # [1, 1, 1+D, H]
        draft = self.draft(hidden[0, 0, 1: 1 + wanted], request.tokens[-1], request)
        if draft.stop_reason is None and wanted < request.max_tokens:
            draft.stop_reason = "block-size"
        return draft

    def draft(self, hidden: torch.Tensor, anchor: int, request: DraftRequest) -> Draft:
        """hidden [n, H] for slots 1..n -> the draft (every slot independently), cut after an EOS."""
        tokens, probs, confidence = pick_tokens(self.backbone.logits(hidden), self.backbone.d2t,
                                                self.drafter.vocab_size, request)
        eos = next((i + 1 for i, token in enumerate(tokens) if token in self.drafter.eos_ids), len(tokens))
        stop = "eos" if eos < len(tokens) else None
        return Draft(tokens[:eos], probs[:eos] if probs is not None else None, confidence[:eos], stop)

    def observe(self, outcome: StepOutcome) -> None:
        self._receive(outcome.hidden, len(outcome.committed))

    def close(self) -> None:
        self.context, self.pending = self.backbone.empty_context(), []


class DFlashDrafter:
    name = KIND
    free_to_propose = False
    session_class = DFlashSession

    def __init__(self, target: LoadedModel, head: DFlashHead) -> None:
        self.target, self.head = target, head
        self.backbone: DFlashHead = head  # the module that drafts a block in one pass (DSpark: its backbone)
        self.target_hidden_layers: tuple[int, ...] = tuple(head.config.target_layers)
        self.eos_ids = target.eos_token_ids
        self.vocab_size = target.facts.vocab_size

    @classmethod
    def load(cls, folder: str | Path, target: LoadedModel) -> DFlashDrafter:
        return cls(target, load_head(folder, target))

    def cost(self) -> DrafterCost:
        """One pass (fc + draft layers + draft LM head) drafts a whole block: its weights per block slot."""
        per_pass = matmul_weights(self.head) / self.target.layer_weights
        return DrafterCost(per_pass / self.head.config.block_size, self.target.tle_per_forward)

    def start(self, prompt: list[int], prompt_hidden: dict[int, torch.Tensor]) -> DFlashSession:
        return self.session_class(self, prompt, prompt_hidden)


SPEC = trained_spec(
    "dflash",
    "DFlash: a block head drafts every position of a block in one pass from the target's hidden states",
    DFlashDrafter.load,
    lambda target: DFlashDrafter(target, new_head(target)))
