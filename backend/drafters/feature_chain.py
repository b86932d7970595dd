"""A chain drafter fed by the target's hidden states: what EAGLE-3 and MTP share.
The head turns the target's features at the newest committed position into a state h, then drafts one
token per step, feeding its own output back:

    h^0_t = begin(features_t)                                      the target's state(s) at position t
    h^j_t = step(emb(x_{t+j+1}), h^{j-1}_t), RoPE position t + j    one draft decoder layer
    q^j_t = softmax(logits(h^j_t))  over the Vd draft tokens d2t, a guess for x_{t+j+2}

Attention (the same at training and at drafting): step 0 of a chain started at t sees step 0 at every
position <= t (the committed context, true features); step j also sees its own steps 1..j (its drafts).
Drafting: the draft's KV cache holds step 0 of every committed position; each proposal appends the newly
committed positions with their true features, drafts D tokens on top (or EAGLE-2's tree, feature_tree.py),
and cuts the drafts away before it returns. Training: the training-time test (EAGLE-3's name;
SafeAILab/EAGLE `model/cnets.py`), all chains of a sequence at once, teacher-forced on the true tokens,
with that same attention pattern.

Knows nothing about any one head's layers, acceptance, the engine's caches or the training loop.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F

from backend.core.drafter import Draft, DrafterCost, DraftRequest, StepOutcome, confident_length
from backend.drafters.feature_tree import grow, tree_draft
from backend.drafters.head_io import TrainedDrafter
from backend.drafters.trained import (
    NO_FEATURES,
    CommittedStates,
    TargetParts,
    TrainBatch,
    TrainedHead,
    cut_after_eos,
    pick_tokens,
    target_distribution,
)


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

    def attend(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, visible: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Append k, v [1, kv, n, d] and attend: new query i sees the slots `visible` [n, slots] marks (a draft
        tree's mask, feature_tree.py), by default causally every cached slot and new slots <= i."""
        past = len(self)
        self.keys = k if self.keys is None else torch.cat([self.keys, k], dim=2)
        self.values = v if self.values is None else torch.cat([self.values, v], dim=2)
        if visible is None:
            slots = torch.arange(self.keys.shape[2], device=q.device)
            visible = slots[None, :] <= past + torch.arange(q.shape[2], device=q.device)[:, None]  # [n, slots]
        return F.scaled_dot_product_attention(q, self.keys, self.values, attn_mask=visible, enable_gqa=True)


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
            out = out + weights[..., length + i : length + i + 1] * value
        return out


class FeatureHead(TrainedHead):
    """A chain head (EAGLE-3, MTP). Besides TrainedHead's interface a kind defines:

    begin(features [..., F])              -> the state step 0 starts from, [..., H]
    step(embeds, h, positions, memory)    -> one draft step's output [B, T, H] (memory: DraftCache / TTTMemory)

    `feature_noise` (training only, `train --feature-noise`): in training mode each target state it reads gets
    uniform noise of up to that share of its own RMS per position (see `with_uniform_noise`)."""

    feature_noise: float = 0.0

    def features(self, hidden: dict[int, torch.Tensor]) -> torch.Tensor:
        """What the head keeps per position: its target hidden states side by side, [..., F]."""
        states = [hidden[layer] for layer in self.feature_layers]
        if self.training and self.feature_noise > 0:
            states = [with_uniform_noise(state, self.feature_noise) for state in states]
        return torch.cat(states, dim=-1)


def with_uniform_noise(state: torch.Tensor, level: float) -> torch.Tensor:
    """state [..., H] + level * rms(state) * U(-1, 1), the RMS taken per position over H.

    EAGLE trains its head on target features with uniform noise added (SafeAILab/EAGLE `eagle/train/main.py`,
    `AddUniformNoise`, an absolute amplitude): at drafting time the head reads states it has never seen, and
    after its first step its own imperfect outputs. Here the amplitude is relative to each state's size,
    so one level serves layers whose states differ in scale (a low layer's against a high one's)."""
    rms = state.float().pow(2).mean(-1, keepdim=True).sqrt().to(state.dtype)  # [..., 1]
    return state + level * rms * (2 * torch.rand_like(state) - 1)


def unroll(
    head: FeatureHead, input_ids: torch.Tensor, hidden: dict[int, torch.Tensor], steps: int
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
        ids = F.pad(input_ids[:, j + 1 :], (0, j + 1))  # [B, T]: x_{t+j+1}, 0 past the end (never scored)
        h = head.step(head.embed(ids), h, positions + j, memory)
        outputs.append(h)
    return outputs


def chain_loss(
    head: FeatureHead, parts: TargetParts, batch: TrainBatch, weights: list[float]
) -> tuple[torch.Tensor, dict]:
    """Forward KL to the target's distribution restricted to the draft vocabulary, per step j, averaged over
    the positions whose target token is a training target and lies in the vocabulary; steps weighted:

        p_t = softmax(lm_head(hs_L[t])[d2t]);   loss_j = mean_t -sum_v p_{t+j+1}(v) log q^j_t(v)
        loss = sum_j w_j loss_j / sum_j w_j

    Metrics: per-step loss and top-1 accuracy against the target's argmax over its whole vocabulary
    (an argmax outside d2t counts as a miss), over the loss_mask positions."""
    d2t, length = head.d2t, batch.input_ids.shape[1]
    final = batch.hidden[parts.num_layers]  # [B, T, H]
    soft = target_distribution(parts, final, d2t)  # [B, T, Vd]
    with torch.no_grad():  # the argmax only masks and scores positions: bf16 under mixed precision is enough
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
    """One sequence: the draft cache, holding step 0 of the first `stable` positions, and the states of the
    committed positions after them."""

    def __init__(
        self, head: FeatureHead, eos_ids: set[int], prompt_hidden: dict[int, torch.Tensor], prompt_rows: int
    ) -> None:
        self.head, self.eos_ids = head, eos_ids
        self.cache = DraftCache()
        self.stable = 0  # leading cache slots that hold committed positions with their true features
        self.states = CommittedStates(tuple(dict.fromkeys(head.feature_layers)))
        self.last: torch.Tensor | None = None  # h at the newest stable position, [1, 1, H]
        self.states.receive(prompt_hidden, prompt_rows)

    @torch.inference_mode()
    def propose(self, request: DraftRequest) -> Draft:
        """A chain, or with `request.max_nodes` > 0 EAGLE-2's tree (feature_tree.py); either way the drafts'
        cache entries are cut away before returning."""
        if request.max_tokens <= 0:
            return Draft([])
        if not self.catch_up(request.tokens):
            return Draft([], stop_reason=NO_FEATURES)
        try:
            if request.max_nodes > 0:
                return tree_draft(grow(self.head, self.cache, self.last, request, self.eos_ids), request)
            return self._chain(request)
        finally:
            self.cache.trim(self.stable)

    def catch_up(self, tokens: list[int]) -> bool:
        """Step the newly committed positions t of `tokens` (true features f_t, tokens x_{t+1}) into the cache,
        so it holds exactly the committed positions and `last` is the state at the newest; False when the
        features are missing (or none exist yet)."""
        known = len(tokens) - 1  # positions 0..known-1 are committed, each with its features
        if not self.states.ready(known) or known == 0:
            return False
        new = self.states.take()
        if new is not None:
            head = self.head
            ids = torch.tensor([tokens[self.stable + 1 :]], device=head.d2t.device)  # [1, n]
            positions = torch.arange(self.stable, known, device=head.d2t.device)[None]  # [1, n]
            h = head.step(head.embed(ids), head.begin(head.features(new)[None]), positions, self.cache)
            self.last, self.stable = h[:, -1:], known
        return True

    def _chain(self, request: DraftRequest) -> Draft:
        """One head step per drafted token, each fed the token picked before it."""
        head, device = self.head, self.head.d2t.device
        h = self.last  # [1, 1, H]
        drafted: list[int] = []
        rows: list[torch.Tensor] = []
        confidence: list[float] = []
        while True:
            chosen, q, probability = pick_tokens(head.logits(h)[0], head.d2t, head.parts.vocab_size, request)
            drafted += chosen
            confidence += probability
            if q is not None:
                rows.append(q[0])
            if drafted[-1] in self.eos_ids or len(drafted) == request.max_tokens:
                break
            if confident_length(confidence, request.min_confidence) < len(drafted):
                break  # the engine cuts the unconfident token; drafting past it would be wasted
            position = torch.tensor([[self.stable - 1 + len(drafted)]], device=device)  # [1, 1]
            h = head.step(head.embed(torch.tensor([chosen], device=device)), h, position, self.cache)
        probs = torch.stack(rows) if rows else None  # [n, V]
        return cut_after_eos(drafted, probs, confidence, self.eos_ids, request.max_tokens)

    def observe(self, outcome: StepOutcome) -> None:
        self.states.receive(outcome.hidden, len(outcome.committed))

    def close(self) -> None:
        self.cache, self.last = DraftCache(), None
        self.states = CommittedStates(self.states.layers)


class FeatureDrafter(TrainedDrafter):
    """The Drafter around a chain head: one head step per drafted token."""

    head: FeatureHead

    def cost(self) -> DrafterCost:
        return DrafterCost(self.head.draft_weights() / self.target.layer_weights, self.target.tle_per_forward)

    def start(self, prompt: list[int], prompt_hidden: dict[int, torch.Tensor]) -> FeatureSession:
        return FeatureSession(self.head, self.target.eos_token_ids, prompt_hidden, len(prompt) - 1)
