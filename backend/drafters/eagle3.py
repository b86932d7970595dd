"""EAGLE-3: a one-layer draft head that reads three of the target's hidden states and drafts a chain of
tokens, feeding its own output back (Li et al. 2025; research notes §1). Also the machinery MTP (mtp.py)
shares with it: the draft decoder layer, the training-time test, the drafting session.

Alignment (HF `output_hidden_states` numbering, research notes §0.3): f_t is the target's state at
position t (the one that predicted x_{t+1}). The head at position t reads the pair (f_t, x_{t+1}) and
predicts x_{t+2}; its output h_t then replaces f_t for the next draft step:

    h^0_t = fc([hs_low; hs_mid; hs_high]_t)                          [3H] -> [H]
    h^j_t = layer([norm(emb(x_{t+j+1})); norm(h^{j-1}_t)], residual h^{j-1}_t)   2H -> H, RoPE position t + j
    q^j_t = softmax(lm_head(norm(h^j_t)))  over the Vd draft tokens d2t, a guess for x_{t+j+2}

Attention (the same at training and at drafting): step 0 of a chain started at t sees step 0 at every
position <= t (the committed context, true features); step j also sees its own steps 1..j (its drafts).
Drafting: the draft's KV cache holds step 0 of every committed position; each proposal appends the newly
committed positions with their true features, drafts D tokens on top, and cuts the drafts away at the
next proposal. q is scattered into the target's vocabulary (zero outside d2t), so rejection sampling
stays exact. Knows nothing about acceptance, the engine's caches or the training loop.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Self

import torch
from torch import nn
from torch.nn import functional as F
from transformers.activations import ACT2FN
from transformers.models.llama.modeling_llama import LlamaRMSNorm, LlamaRotaryEmbedding, apply_rotary_pos_emb

from backend.core.drafter import Draft, DrafterCost, DraftRequest, StepOutcome
from backend.core.errors import SpecScopeError
from backend.core.models import LoadedModel, matmul_weights
from backend.core.verify import sample, target_probs
from backend.drafters import trained
from backend.drafters.spec import trained_spec
from backend.drafters.trained import DrafterWeightsError, TargetParts, TrainBatch

KIND = "eagle3"
DEFAULT_DRAFT_VOCAB = 8192  # research notes §1.5: a reduced vocabulary is what makes the head cheap here
STEP_DECAY = 0.8  # SafeAILab's per-step loss weight 0.8**j


# ---------------------------------------------------------------------------------------------------
# the pieces both trained heads share


class DraftCache:
    """The draft layer's keys and values for one sequence at drafting time, [1, kv_heads, positions, head_dim]."""

    def __init__(self) -> None:
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None

    def __len__(self) -> int:
        return 0 if self.keys is None else self.keys.shape[2]

    def trim(self, keep: int) -> None:
        if self.keys is not None:
            self.keys, self.values = self.keys[:, :, :keep], self.values[:, :, :keep]

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """Append k, v [1, kv, n, d] and attend causally: new query i sees every cached slot and new slots <= i."""
        past = len(self)
        self.keys = k if self.keys is None else torch.cat([self.keys, k], dim=2)
        self.values = v if self.values is None else torch.cat([self.values, v], dim=2)
        slots = torch.arange(self.keys.shape[2], device=q.device)
        mask = slots[None, :] <= past + torch.arange(q.shape[2], device=q.device)[:, None]  # [n, slots]
        return F.scaled_dot_product_attention(q, self.keys, self.values, attn_mask=mask, enable_gqa=True)


class TTTMemory:
    """Keys and values of every training-time-test step, [B, kv_heads, T, head_dim] each. Row t of step j is
    step j of the chain started at position t: it sees step 0 at positions <= t and steps 1..j of row t."""

    def __init__(self) -> None:
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q [B, heads, T, d], this step's k, v [B, kv, T, d]. With K_i, V_i the keys/values of step i, row t gets

            softmax([q_t·K_0[s] for s <= t] ++ [q_t·K_i[t] for i = 1..j] / sqrt(d)) · [V_0[s <= t] ++ V_i[t]]
        """
        self.keys.append(k)
        self.values.append(v)
        groups, length, scale = q.shape[1] // k.shape[1], q.shape[2], q.shape[-1] ** -0.5
        keys = [x.repeat_interleave(groups, dim=1) for x in self.keys]  # [B, heads, T, d] each
        values = [x.repeat_interleave(groups, dim=1) for x in self.values]
        causal = torch.ones(length, length, dtype=torch.bool, device=q.device).tril()  # [T, T]
        scores = [(q @ keys[0].transpose(-1, -2) * scale).masked_fill(~causal, float("-inf"))]  # [B, heads, T, T]
        scores += [(q * key).sum(-1, keepdim=True) * scale for key in keys[1:]]  # the chain's own steps: [B, h, T, 1]
        weights = torch.softmax(torch.cat(scores, dim=-1).float(), dim=-1).to(q.dtype)  # [B, heads, T, T + j]
        out = weights[..., :length] @ values[0]  # [B, heads, T, d]
        for i, value in enumerate(values[1:]):
            out = out + weights[..., length + i: length + i + 1] * value
        return out


class DraftLayer(nn.Module):
    """One Llama-style decoder layer whose attention reads `in_features` (2H for EAGLE-3's [emb; h]) while its
    residual stream is H wide. Shapes follow the target's config (heads, head size, RoPE)."""

    def __init__(self, config, in_features: int, intermediate_size: int) -> None:
        super().__init__()
        hidden, heads = config.hidden_size, config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        self.head_dim = getattr(config, "head_dim", None) or hidden // heads
        bias, mlp_bias = getattr(config, "attention_bias", False), getattr(config, "mlp_bias", False)
        self.q_proj = nn.Linear(in_features, heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(in_features, kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(in_features, kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=bias)
        self.post_attention_norm = LlamaRMSNorm(hidden, config.rms_norm_eps)
        self.gate_proj = nn.Linear(hidden, intermediate_size, bias=mlp_bias)
        self.up_proj = nn.Linear(hidden, intermediate_size, bias=mlp_bias)
        self.down_proj = nn.Linear(intermediate_size, hidden, bias=mlp_bias)
        self.act = ACT2FN[config.hidden_act]
        self.rotary = LlamaRotaryEmbedding(config)

    def forward(self, x: torch.Tensor, residual: torch.Tensor, positions: torch.Tensor, memory) -> torch.Tensor:
        """x [B, T, in], residual [B, T, H], positions [1 or B, T] -> [B, T, H]; memory: DraftCache or TTTMemory."""
        batch, length, _ = x.shape
        q, k, v = (proj(x).view(batch, length, -1, self.head_dim).transpose(1, 2)  # [B, heads, T, d]
                   for proj in (self.q_proj, self.k_proj, self.v_proj))
        cos, sin = self.rotary(x, positions)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        attended = memory.attend(q, k, v).transpose(1, 2).reshape(batch, length, -1)  # [B, T, heads * d]
        h = residual + self.o_proj(attended)
        m = self.post_attention_norm(h)
        return h + self.down_proj(self.act(self.gate_proj(m)) * self.up_proj(m))  # SwiGLU MLP


class FeatureHead(nn.Module):
    """A draft head fed by target hidden states (EAGLE-3, MTP). The target's embeddings (and, for MTP, its
    final norm and LM head) are borrowed frozen through `parts`, never stored; `d2t` [Vd] maps draft token
    i to target token d2t[i]. A subclass defines `kind`, `config_class` and:

        feature_layers                        the target hidden states it reads (HF numbering)
        begin(features [..., F])              -> the state step 0 starts from, [..., H]
        step(embeds, h, positions, memory)    -> one draft step's output [B, T, H] (memory: DraftCache / TTTMemory)
        logits(h [..., H])                    -> [..., Vd]
    """

    kind: str
    config_class: type  # a dataclass with for_target(parts, **settings) and to_dict()
    feature_layers: tuple[int, ...]

    def __init__(self, parts: TargetParts, config, d2t: torch.Tensor) -> None:
        if d2t.numel() != config.draft_vocab_size:
            raise SpecScopeError(f"the vocabulary map has {d2t.numel()} tokens, the head {config.draft_vocab_size}")
        super().__init__()
        self.config = config
        self.parts = parts  # a plain attribute: not a submodule, so not in state_dict() or parameters()
        self.register_buffer("d2t", d2t.to(parts.embed.weight.device, torch.long), persistent=False)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.parts.embed(ids)  # [..., H], frozen

    def features(self, hidden: dict[int, torch.Tensor]) -> torch.Tensor:
        """What the head keeps per position: its target hidden states side by side, [..., F]."""
        return torch.cat([hidden[layer] for layer in self.feature_layers], dim=-1)

    def draft_weights(self) -> int:
        """Matmul weights per drafted token (the cost model's numerator)."""
        return matmul_weights(self)


def unroll(head: FeatureHead, input_ids: torch.Tensor, hidden: dict[int, torch.Tensor], steps: int
           ) -> list[torch.Tensor]:
    """The training-time test: `steps` chains at once, one per start position. Returns the head's output per
    step, [B, T, H] each; row t of step j read f_<=t and x_{t+1}..x_{t+j+1} and predicts x_{t+j+2}.
    Input tokens are the ground truth (teacher forcing); the hidden state is the head's own after step 0."""
    length = input_ids.shape[1]
    positions = torch.arange(length, device=input_ids.device)[None]  # [1, T]
    memory = TTTMemory()
    h = head.begin(head.features(hidden))  # [B, T, H]
    outputs = []
    for j in range(steps):
        ids = F.pad(input_ids[:, j + 1:], (0, j + 1))  # [B, T]: x_{t+j+1}, 0 past the end (never scored)
        h = head.step(head.embed(ids), h, positions + j, memory)
        outputs.append(h)
    return outputs


def ttt_loss(head: FeatureHead, parts: TargetParts, batch: TrainBatch, weights: list[float]
             ) -> tuple[torch.Tensor, dict]:
    """Forward KL to the target's distribution restricted to the draft vocabulary, per step j, averaged over
    the positions whose target token is a training target and lies in the vocabulary; steps weighted:

        p_t = softmax(lm_head(hs_L[t])[d2t]);   loss_j = mean_t -sum_v p_{t+j+1}(v) log q^j_t(v)
        loss = sum_j w_j loss_j / sum_j w_j

    Metrics: per-step loss and top-1 accuracy against the target's argmax over its whole vocabulary
    (an argmax outside d2t counts as a miss), over the loss_mask positions."""
    d2t, length = head.d2t, batch.input_ids.shape[1]
    with torch.no_grad():
        final = batch.hidden[parts.num_layers]  # [B, T, H]
        rows_bias = parts.lm_head.bias[d2t] if parts.lm_head.bias is not None else None
        soft = torch.softmax(F.linear(final, parts.lm_head.weight[d2t], rows_bias).float(), dim=-1)  # [B, T, Vd]
        best = torch.cat([parts.lm_head(chunk).argmax(-1) for chunk in final.flatten(0, 1).split(1024)])
        to_draft = torch.full((parts.vocab_size,), -1, dtype=torch.long, device=d2t.device)
        to_draft[d2t] = torch.arange(d2t.numel(), device=d2t.device)
        best = to_draft[best].view(batch.input_ids.shape)  # [B, T]: the target argmax in draft ids, -1 outside
    total = torch.zeros((), device=final.device)
    metrics: dict[str, float] = {}
    for j, h in enumerate(unroll(head, batch.input_ids, batch.hidden, len(weights))):
        shift = j + 1
        log_q = torch.log_softmax(head.logits(h[:, : length - shift]).float(), dim=-1)  # [B, T - shift, Vd]
        scored = batch.loss_mask[:, shift:]  # [B, T - shift]
        in_vocab = scored & (best[:, shift:] >= 0)
        cross_entropy = -(soft[:, shift:] * log_q).sum(-1)  # [B, T - shift]
        step_loss = (cross_entropy * in_vocab).sum() / in_vocab.sum().clamp(min=1)
        total = total + weights[j] * step_loss
        hits = (log_q.argmax(-1) == best[:, shift:]) & scored
        metrics[f"loss_step{j}"] = float(step_loss.detach())
        metrics[f"acc_step{j}"] = float(hits.sum() / scored.sum().clamp(min=1))
    return total / sum(weights), metrics


class FeatureSession:
    """One sequence: the features of committed positions not yet in the draft cache, and the cache."""

    def __init__(self, head: FeatureHead, eos_ids: set[int], prompt_hidden: dict[int, torch.Tensor],
                 prompt_rows: int) -> None:
        self.head, self.eos_ids = head, eos_ids
        self.cache = DraftCache()
        self.stable = 0  # leading cache slots that hold committed positions with their true features
        self.pending: list[torch.Tensor] = []  # [n, F] rows for the positions after them, in order
        self.blind = False  # hidden states went missing: positions can no longer be paired with features
        self.last: torch.Tensor | None = None  # h at the newest stable position, [1, 1, H]
        self._add(prompt_hidden, prompt_rows)

    def _add(self, hidden: dict[int, torch.Tensor], expected: int) -> None:
        """Queue the features of `expected` newly committed positions (none arrive for a one-token prompt)."""
        if not all(layer in hidden for layer in self.head.feature_layers):
            self.blind = self.blind or expected != 0
            return
        rows = self.head.features(hidden)  # [n, F]
        self.blind = self.blind or rows.shape[0] != expected
        self.pending.append(rows)

    @torch.inference_mode()
    def propose(self, request: DraftRequest) -> Draft:
        if request.max_tokens <= 0:
            return Draft([])
        tokens, head = request.tokens, self.head
        known = self.stable + sum(rows.shape[0] for rows in self.pending)  # positions 0..known-1 have features
        if self.blind or known != len(tokens) - 1 or known == 0:
            return Draft([], stop_reason="no-features")
        self.cache.trim(self.stable)  # forget the previous proposal's drafts
        device = head.d2t.device
        if self.pending:  # the newly committed positions t, with their true features f_t and tokens x_{t+1}
            ids = torch.tensor([tokens[self.stable + 1:]], device=device)  # [1, n]
            positions = torch.arange(self.stable, known, device=device)[None]  # [1, n]
            h = head.step(head.embed(ids), head.begin(torch.cat(self.pending)[None]), positions, self.cache)
            self.last, self.stable, self.pending = h[:, -1:], known, []
        h = self.last  # [1, 1, H]
        drafted: list[int] = []
        rows: list[torch.Tensor] = []
        confidence: list[float] = []
        while True:
            token, q, prob = self._choose(head.logits(h)[0, -1], request)
            drafted.append(token)
            confidence.append(prob)
            if q is not None:
                rows.append(q)
            if token in self.eos_ids or len(drafted) == request.max_tokens:
                break
            position = torch.tensor([[known - 1 + len(drafted)]], device=device)  # [1, 1]
            h = head.step(head.embed(torch.tensor([[token]], device=device)), h, position, self.cache)
        stop = "eos" if drafted[-1] in self.eos_ids and len(drafted) < request.max_tokens else None
        return Draft(drafted, probs=torch.stack(rows) if rows else None, confidence=confidence, stop_reason=stop)

    def _choose(self, logits: torch.Tensor, request: DraftRequest) -> tuple[int, torch.Tensor | None, float]:
        """Draft logits [Vd] -> (target token id, q over the target vocabulary [V] or None when greedy, its prob).
        q is the target's own processing (temperature, top-k, top-p) of the logits placed at d2t, -inf elsewhere."""
        d2t = self.head.d2t
        if request.sampling.greedy:
            best = int(logits.argmax())
            return int(d2t[best]), None, float(torch.softmax(logits.float(), dim=-1)[best])
        full = torch.full((self.head.parts.vocab_size,), float("-inf"), device=logits.device)  # [V]
        full[d2t] = logits.float()
        q = target_probs(full[None], request.sampling)[0]  # [V], zero outside d2t
        token = sample(q, request.generator)
        return token, q, float(q[token])

    def observe(self, outcome: StepOutcome) -> None:
        self._add(outcome.hidden, expected=len(outcome.committed))

    def close(self) -> None:
        self.cache, self.pending, self.last = DraftCache(), [], None


class FeatureDrafter:
    """The Drafter around a trained head (EAGLE-3 or MTP)."""

    head_class: type[FeatureHead]
    free_to_propose = False

    def __init__(self, target: LoadedModel, head: FeatureHead) -> None:
        self.target, self.head = target, head
        self.target_hidden_layers = tuple(dict.fromkeys(head.feature_layers))

    def cost(self) -> DrafterCost:
        return DrafterCost(self.head.draft_weights() / self.target.layer_weights, self.target.tle_per_forward)

    def start(self, prompt: list[int], prompt_hidden: dict[int, torch.Tensor]) -> FeatureSession:
        return FeatureSession(self.head, self.target.eos_token_ids, prompt_hidden, len(prompt) - 1)

    @classmethod
    def load(cls, folder: str | Path, target: LoadedModel) -> Self:
        """The drafter of a weights folder (trained.save_drafter's layout)."""
        return cls(target, load_head(cls.head_class, folder, target))


def fresh_head(head_class: type[FeatureHead], target: LoadedModel, d2t: torch.Tensor | None,
               token_counts: torch.Tensor | None, settings: dict) -> FeatureHead:
    """An untrained head for `target`. Vocabulary: `d2t` if given, else the draft_vocab_size most frequent tokens
    of `token_counts`, else the first draft_vocab_size ids (a placeholder for untrained heads)."""
    parts = TargetParts.of(target)
    if d2t is not None:
        settings.setdefault("draft_vocab_size", d2t.numel())
    config = head_class.config_class.for_target(parts, **settings)
    size = config.draft_vocab_size
    if d2t is None:
        counted = token_counts is not None and size < parts.vocab_size
        d2t = trained.draft_vocabulary(token_counts, size) if counted else torch.arange(size)
    return head_class(parts, config, d2t.long()).to(target.device, target.dtype)


def whole_vocabulary(d2t: torch.Tensor, vocab_size: int) -> bool:
    return d2t.numel() == vocab_size and bool((d2t == torch.arange(vocab_size, device=d2t.device)).all())


def state_for_saving(head: FeatureHead) -> tuple[dict, dict[str, torch.Tensor], torch.Tensor | None]:
    """(settings, state, d2t) for `save_drafter`; d2t is None when it is the whole vocabulary in order."""
    d2t = head.d2t
    return head.config.to_dict(), head.state_dict(), None if whole_vocabulary(d2t, head.parts.vocab_size) else d2t


def save(head: FeatureHead, target: LoadedModel, folder: str | Path) -> Path:
    settings, state, d2t = state_for_saving(head)
    return trained.save_drafter(folder, head.kind, settings, state, target, d2t)


def load_head(head_class: type[FeatureHead], folder: str | Path, target: LoadedModel) -> FeatureHead:
    """Read a weights folder of `head_class.kind` heads, with a clear error for every way it can be wrong."""
    files = trained.load_drafter(folder, head_class.kind, target)
    parts = TargetParts.of(target)
    try:
        config = head_class.config_class.for_target(parts, **files.settings)
        if files.d2t is None and config.draft_vocab_size < parts.vocab_size:
            raise SpecScopeError(f"its head drafts over {config.draft_vocab_size} tokens but vocab_map.safetensors "
                                 "is missing")
        head = head_class(parts, config, torch.arange(parts.vocab_size) if files.d2t is None else files.d2t)
        head.load_state_dict(files.state)
    except (SpecScopeError, TypeError, ValueError, RuntimeError) as error:
        reason = str(error).strip().splitlines()[0]
        raise DrafterWeightsError(f"{folder} does not hold a usable {head_class.kind} head for '{target.spec}': "
                                  f"{reason}") from error
    return head.to(target.device, target.dtype).eval()


# ---------------------------------------------------------------------------------------------------
# EAGLE-3


def default_layers(num_layers: int) -> tuple[int, ...]:
    """EAGLE-3's low / middle / high features: the inputs of layers 2, L//2 and L-3 (HF indices; 2, 15, 27 on
    SmolLM2). Targets too shallow for those to be distinct get three indices spread over 1..L-1."""
    low, middle, high = 2, num_layers // 2, num_layers - 3
    if 1 <= low < middle < high <= num_layers - 1:
        return low, middle, high
    top = max(1, num_layers - 1)
    return tuple(round(1 + i * (top - 1) / 2) for i in range(3))


@dataclass(frozen=True)
class Eagle3Config:
    layers: tuple[int, ...]  # target hidden states fused by fc (HF numbering)
    draft_vocab_size: int  # Vd: rows of the draft LM head
    intermediate_size: int  # MLP width of the draft layer

    @classmethod
    def for_target(cls, parts: TargetParts, **settings) -> Eagle3Config:
        config = cls(tuple(settings.pop("layers", default_layers(parts.num_layers))),
                     settings.pop("draft_vocab_size", min(DEFAULT_DRAFT_VOCAB, parts.vocab_size)),
                     settings.pop("intermediate_size", parts.config.intermediate_size))
        if settings:
            raise SpecScopeError(f"unknown {KIND} settings: {', '.join(sorted(settings))} (known: layers, "
                                 "draft_vocab_size, intermediate_size)")
        if not config.layers or not all(0 <= layer <= parts.num_layers for layer in config.layers):
            raise SpecScopeError(f"{KIND} layers must be hidden-state indices 0..{parts.num_layers}, got "
                                 f"{list(config.layers)}")
        if not 1 <= config.draft_vocab_size <= parts.vocab_size:
            raise SpecScopeError(f"the draft vocabulary must hold 1..{parts.vocab_size} tokens, got "
                                 f"{config.draft_vocab_size}")
        return config

    def to_dict(self) -> dict:
        return {**asdict(self), "layers": list(self.layers)}


class Eagle3Head(FeatureHead):
    kind = KIND
    config_class = Eagle3Config

    def __init__(self, parts: TargetParts, config: Eagle3Config, d2t: torch.Tensor) -> None:
        super().__init__(parts, config, d2t)
        hidden, eps = parts.hidden_size, parts.config.rms_norm_eps
        self.fc = nn.Linear(len(config.layers) * hidden, hidden, bias=False)
        self.embed_norm = LlamaRMSNorm(hidden, eps)
        self.hidden_norm = LlamaRMSNorm(hidden, eps)
        self.layer = DraftLayer(parts.config, 2 * hidden, config.intermediate_size)
        self.norm = LlamaRMSNorm(hidden, eps)
        self.lm_head = nn.Linear(hidden, config.draft_vocab_size, bias=False)
        with torch.no_grad():  # start from the target's own output rows (speculators does the same)
            self.lm_head.weight.copy_(parts.lm_head.weight[self.d2t])
            if getattr(parts.norm, "weight", None) is not None:
                self.norm.weight.copy_(parts.norm.weight)

    @property
    def feature_layers(self) -> tuple[int, ...]:
        return self.config.layers

    def begin(self, features: torch.Tensor) -> torch.Tensor:
        return self.fc(features)  # [..., 3H] -> [..., H]

    def step(self, embeds: torch.Tensor, h: torch.Tensor, positions: torch.Tensor, memory) -> torch.Tensor:
        x = torch.cat([self.embed_norm(embeds), self.hidden_norm(h)], dim=-1)  # [B, T, 2H]: embedding first
        return self.layer(x, h, positions, memory)  # [B, T, H], pre-norm: fed back as the next step's h

    def logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(h))  # [..., Vd]


def new_head(target: LoadedModel, d2t: torch.Tensor | None = None, token_counts: torch.Tensor | None = None,
             **settings) -> Eagle3Head:
    """A fresh, untrained head (vocabulary: see fresh_head). Settings: layers, draft_vocab_size (8192 by
    default), intermediate_size."""
    return fresh_head(Eagle3Head, target, d2t, token_counts, settings)


def training_layers(target: LoadedModel, **settings) -> tuple[int, ...]:
    """The hidden states training reads: the fused ones and the final one (the soft targets)."""
    config = Eagle3Config.for_target(TargetParts.of(target), **settings)
    return tuple(sorted({*config.layers, target.facts.num_layers}))


def training_loss(head: Eagle3Head, parts: TargetParts, batch: TrainBatch, steps: int = 3,
                  decay: float = STEP_DECAY) -> tuple[torch.Tensor, dict]:
    """The training-time test over `steps` draft steps, step j weighted decay**j (see ttt_loss)."""
    return ttt_loss(head, parts, batch, [decay**j for j in range(steps)])


class Eagle3Drafter(FeatureDrafter):
    name = KIND
    head_class = Eagle3Head


SPEC = trained_spec(
    "eagle3",
    "EAGLE-3: a one-layer head on the target's low, middle and high hidden states drafts autoregressively",
    Eagle3Drafter.load,
    lambda target: Eagle3Drafter(target, new_head(target)))
