"""The draft -> verify -> accept loop for one sequence, emitting one `StepEvent` per step.

    prefill prompt[:-1] into the target's KV cache; the newest committed token x is not yet cached
    each step:
        d_1..d_D = drafter.propose(committed tokens)              (D from the draft-length policy)
        logits   = target([x, d_1..d_D])                          one forward pass, [D+1, V]
        a, t     = verify(logits, drafts, q, sampling)            backend/core/verify.py
        commit d_1..d_a, t;  keep the cache up to d_a;  x = t

With a tree budget the drafts may be a token tree (tree.py): the pass scores every node under a
tree mask, verification returns the kept root path, and the cache keeps that path moved into place.
Trees are verified by greedy acceptance or, when sampling, by multi-candidate rejection sampling (both
in verify.py), on either kind of pass (batch.py runs tree rows in a batch the same way).

How a pass runs (Hugging Face's eager forward, or a static cache and compiled graphs) is the
engine's `passes` (target_passes.py).

D = 0 is plain autoregressive decoding through the same code: the baseline every speedup is
measured against. The engine is a generator so a caller (CLI, worker, UI) sees each step as it
happens. A `Sequence` holds what one sequence needs between forward passes (its drafter session,
draft-length policy, output and stop rules); `Generation` drives one of them against its own cache,
and batch.py drives many against a shared one. It works on token ids; the tokenizer is only used to
check stop strings.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import torch

from backend.core.drafter import Draft, Drafter, DraftRequest, DraftSession, StepOutcome
from backend.core.errors import SpecScopeError
from backend.core.policy import DraftLengthPolicy, StepObservation, make_policy
from backend.core.target_passes import target_passes
from backend.core.tree import TreeLayout
from backend.core.tree_shape import depths, is_chain, within_depth
from backend.core.verify import SamplingParams, Verdict, target_probs, verify


@dataclass
class GenerationSettings:
    max_new_tokens: int = 128
    draft_len: int | str = 4  # an int D, "auto", or "schedule:1=8/4=4" (D by batch size)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int = 0
    stop_strings: tuple[str, ...] = ()
    tree_budget: int = 0  # nodes of a tree draft to verify per step; 0 = chains
    tree_topk: int = 4  # at most this many children per tree node
    # chains stop before the first draft whose running product of the drafter's probabilities is below this
    min_confidence: float = 0.0


@dataclass
class StepEvent:
    index: int
    draft_len: int  # the cap on D this step (the fixed D, or auto's current cap); 0 = plain step
    drafted: list[int]  # the drafts verified this step (auto may verify fewer than were proposed)
    draft_probs: list[float] | None  # the drafter's probability of each drafted token, where it has one
    target_probs: list[float]  # the target's probability of each drafted token (softmax at T=1 when greedy)
    accepted: int  # leading drafts the target kept
    target_token: int  # the target's own token: bonus if all drafts were kept, else the correction
    target_token_prob: float
    emitted: list[int]  # tokens appended to the output (accepted drafts + target token, cut at a stop)
    draft_s: float
    verify_s: float
    stop_reason: str | None = None  # why fewer than draft_len drafts: "auto" (held back), or the drafter's reason
    finish_reason: str | None = None  # set on the last step: eos, length, stop, context
    # a tree step: each drafted node's parent (-1 = the newest committed token) and the kept nodes
    # (accepted = len(accepted_path)); None on chain steps
    parents: list[int] | None = None
    accepted_path: list[int] | None = None

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class PendingStep:
    """A step between drafting and verification."""

    cap: int
    draft: Draft
    drafted: list[int]
    draft_s: float
    parents: list[int] | None = None  # a tree's parents (never a chain's: chains stay None)
    asked: int = 0  # drafts a costly drafter was asked for (0: none, or a free drafter's proposal)


def drafted_probabilities(draft: Draft, count: int) -> list[float] | None:
    """For display, each of the first `count` drafted tokens' own probability: q(d_i) where they were sampled
    (the confidence is then q's top probability), else the drafter's confidence."""
    if draft.probs is not None and draft.parents is None:
        tokens = torch.tensor(draft.tokens[:count], device=draft.probs.device)  # [count]
        return draft.probs[:count].gather(1, tokens[:, None])[:, 0].tolist()
    return draft.confidence[:count] if draft.confidence is not None else None


class Sequence:
    """One sequence's state across steps: what it has committed, how it drafts and when it stops."""

    def __init__(
        self,
        engine: SpeculativeEngine,
        prompt_ids: list[int],
        drafter: Drafter | None,
        settings: GenerationSettings,
        decode: Callable[[list[int]], str] | None = None,
        reference: list[int] | None = None,
        batch_size: Callable[[], int] = lambda: 1,
    ) -> None:
        self.engine = engine
        self.prompt_ids = list(prompt_ids)
        self.drafter = drafter
        self.settings = settings
        self.decode = decode
        self.reference = reference  # replay: verify against this target rollout instead of sampling
        self.policy: DraftLengthPolicy = make_policy(
            settings.draft_len if drafter is not None else 0,
            free_drafter=drafter is not None and drafter.free_to_propose,
            batch_size=batch_size,
        )
        self.max_new_tokens = engine.check_request(self.prompt_ids, settings)
        if reference is not None:
            self.max_new_tokens = min(self.max_new_tokens, len(reference))
        self.generator = torch.Generator(device=engine.device).manual_seed(settings.seed)
        self.session: DraftSession | None = None
        self.output_ids: list[int] = []
        self.steps: list[StepEvent] = []
        self.finish_reason: str | None = None

    @property
    def committed(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    def start(self, prompt_hidden: dict[int, torch.Tensor]) -> None:
        if self.drafter is not None:
            self.session = self.drafter.start(self.prompt_ids, prompt_hidden)

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def draft(self) -> PendingStep:
        """Ask the drafter for this step's drafts, as many as the policy will verify."""
        sampling, policy, session = self.settings.sampling, self.policy, self.session
        cap = min(policy.cap, self.max_new_tokens - len(self.output_ids) - 1)
        started = self.engine.clock()
        draft, verified, asked = Draft([]), 0, 0
        nodes, branching, confident = self.settings.tree_budget, self.settings.tree_topk, self.settings.min_confidence
        if session is not None and cap > 0:
            committed = self.committed
            if self.drafter.free_to_propose:  # look first, then decide how much of it to verify
                request = DraftRequest(committed, cap, sampling, self.generator, nodes, branching, confident)
                draft = session.propose(request).within_confidence(confident)
                if draft.parents is not None:  # the policy's D caps a tree's depth
                    draft = _tree_within(draft, policy.choose(max(depths(draft.parents), default=0), draft.evidence))
                verified = (
                    policy.choose(len(draft.tokens), draft.evidence) if draft.parents is None else len(draft.tokens)
                )
            else:  # decide first: every drafted token costs a forward pass
                verified = asked = policy.choose(cap, None)
                if verified:
                    request = DraftRequest(committed, verified, sampling, self.generator, nodes, branching, confident)
                    draft = session.propose(request).within_confidence(confident)
                    verified = len(draft.tokens) if draft.parents is not None else verified
        parents = draft.parents[:verified] if draft.parents is not None else None
        if parents is not None and is_chain(parents):
            parents = None  # a one-branch tree is a chain: the chain's code path
        return PendingStep(cap, draft, draft.tokens[:verified], self.engine.clock() - started, parents, asked)

    def verify(self, logits: torch.Tensor, pending: PendingStep, tree: TreeLayout | None = None) -> Verdict:
        """The acceptance rule on this sequence's slice of a verification pass.
        logits: [k+1, V] for [newest token, d_1..d_k]; `tree` is the layout of a tree step."""
        drafted, draft_probs = pending.drafted, pending.draft.probs
        replay = self.reference[len(self.output_ids) :] if self.reference is not None else None
        return verify(
            logits,
            drafted,
            draft_probs[: len(drafted)] if draft_probs is not None else None,
            self.settings.sampling,
            replay,
            self.generator,
            tree,
        )

    def shown_probs(self, logits: torch.Tensor, verdict: Verdict) -> torch.Tensor:
        """The probabilities shown on hover, [k+1, V]: what sampling used, or softmax at T=1 when greedy.
        Display only: callers compute it after the timed verification."""
        sampling = self.settings.sampling
        if verdict.probs is not None:
            return verdict.probs
        return torch.softmax(logits, dim=-1) if sampling.greedy else target_probs(logits, sampling)

    def commit(
        self,
        pending: PendingStep,
        verdict: Verdict,
        shown: torch.Tensor,
        verify_s: float,
        hidden: dict[int, torch.Tensor] | None = None,
    ) -> StepEvent:
        """Append what the step kept, apply the stop rules, tell the policy and the drafter."""
        drafted, draft, parents, path = pending.drafted, pending.draft, pending.parents, verdict.path
        kept = list(path) if path is not None else list(range(verdict.accepted))
        new_tokens = [*(drafted[node] for node in kept), verdict.token]
        # each draft's probability in its parent's row (p_{i-1}(d_i) on a chain), then the target token's
        # in the last kept node's row: one read of k+1 values
        rows = [parent + 1 for parent in parents] if parents is not None else list(range(len(drafted)))
        shown_of = shown[[*rows, kept[-1] + 1 if kept else 0], [*drafted, verdict.token]].tolist()
        emitted, finish = self._cut_at_stops(new_tokens)
        if parents is not None:  # did a child of the root match the first committed token
            first_matched = any(drafted[node] == new_tokens[0] for node, up in enumerate(parents) if up < 0)
        else:
            first_matched = draft.tokens[0] == new_tokens[0] if draft.tokens else None
        # the policy's D is a tree's depth: a tree "accepted all" when its kept path reached the deepest level
        depth = max(depths(parents)) if parents is not None else None
        verified = depth or len(drafted)
        seconds = pending.draft_s + verify_s
        self.policy.observe(
            StepObservation(verified, verdict.accepted, seconds, draft.evidence, first_matched, pending.asked)
        )
        event = StepEvent(
            index=len(self.steps),
            draft_len=pending.cap,
            drafted=drafted,
            draft_probs=drafted_probabilities(draft, len(drafted)),
            target_probs=shown_of[:-1],
            accepted=verdict.accepted,
            target_token=verdict.token,
            target_token_prob=shown_of[-1],
            emitted=emitted,
            draft_s=pending.draft_s,
            verify_s=verify_s,
            stop_reason=_short_draft_reason(draft, len(drafted), pending.cap, depth),
            finish_reason=finish,
            parents=parents,
            accepted_path=kept if path is not None else None,
        )
        self.output_ids.extend(emitted)
        self.steps.append(event)
        self.finish_reason = finish
        if self.session is not None:
            self.session.observe(StepOutcome(committed=new_tokens, accepted=verdict.accepted, hidden=hidden or {}))
        return event

    def _cut_at_stops(self, new_tokens: list[int]) -> tuple[list[int], str | None]:
        """Cut this step's tokens at EOS, a stop string, the token budget or the context end."""
        remaining = self.max_new_tokens - len(self.output_ids)
        for i, token in enumerate(new_tokens):
            if token in self.engine.eos_ids:
                return new_tokens[: i + 1], "eos"
        if self.settings.stop_strings and self.decode is not None:
            for end in range(1, len(new_tokens) + 1):
                text = self.decode(self.output_ids + new_tokens[:end])
                if any(stop in text for stop in self.settings.stop_strings):
                    return new_tokens[:end], "stop"
        if len(new_tokens) >= remaining:
            finish = "context" if self.max_new_tokens < self.settings.max_new_tokens else "length"
            return new_tokens[:remaining], finish
        return new_tokens, None


class Generation:
    """One request in flight: iterate it for StepEvents; afterwards read output_ids and timings."""

    def __init__(self, engine: SpeculativeEngine, sequence: Sequence) -> None:
        self.engine = engine
        self.sequence = sequence
        self.prefill_s = 0.0
        self.decode_s = 0.0

    @property
    def output_ids(self) -> list[int]:
        return self.sequence.output_ids

    @property
    def steps(self) -> list[StepEvent]:
        return self.sequence.steps

    @property
    def finish_reason(self) -> str | None:
        return self.sequence.finish_reason

    def __iter__(self) -> Iterator[StepEvent]:
        engine, sequence = self.engine, self.sequence
        hidden_layers = sequence.drafter.target_hidden_layers if sequence.drafter else ()
        passes = engine.passes
        cache = passes.new_cache(len(sequence.prompt_ids) + sequence.max_new_tokens)
        started = engine.clock()
        sequence.start(engine.prefill(sequence.prompt_ids[:-1], cache, hidden_layers))
        self.prefill_s = engine.clock() - started
        try:
            while sequence.finish_reason is None:
                pending = sequence.draft()
                started = engine.clock()
                committed = len(sequence.committed)
                tree = TreeLayout.of(pending.parents, engine.device) if pending.parents is not None else None
                tokens = [sequence.committed[-1], *pending.drafted]
                result = passes.forward(tokens, cache, bool(hidden_layers), tree=tree)
                verdict = sequence.verify(result.logits, pending, tree)
                if verdict.path is None:
                    passes.keep(cache, committed + verdict.accepted)
                else:
                    passes.keep_path(cache, committed, verdict.path)
                verify_s = engine.clock() - started
                shown = sequence.shown_probs(result.logits, verdict)
                hidden = {layer: result.hidden[layer][verdict.kept_rows()] for layer in hidden_layers}
                event = sequence.commit(pending, verdict, shown, verify_s, hidden)
                self.decode_s += event.draft_s + event.verify_s
                yield event
        finally:
            sequence.close()

    def run(self) -> Generation:
        for _ in self:
            pass
        return self


def _tree_within(draft: Draft, max_depth: int) -> Draft:
    """The part of a tree draft at depth <= max_depth (the policy's D), nodes still in order."""
    kept, parents = within_depth(draft.parents, max_depth)
    confidence = [draft.confidence[node] for node in kept] if draft.confidence is not None else None
    probs = draft.probs[kept] if draft.probs is not None else None  # kept so verify can refuse a sampled tree
    stop_reason = "auto" if len(kept) < len(draft.tokens) else draft.stop_reason
    return Draft([draft.tokens[node] for node in kept], probs, confidence, stop_reason, draft.evidence, parents)


def _short_draft_reason(draft: Draft, verified: int, cap: int, tree_depth: int | None = None) -> str | None:
    """Why fewer than `cap` drafts were verified: the policy held some back ("auto"), or the drafter's
    reason. A tree's D is its depth (`_tree_within` already said "auto" where it cut the tree)."""
    if tree_depth is not None:
        return None if tree_depth >= cap else draft.stop_reason
    if verified >= cap:
        return None
    if verified < len(draft.tokens):
        return "auto"
    return draft.stop_reason


class SpeculativeEngine:
    """Holds the target model and how its passes run (`compile`: auto | on | off, see
    target_passes.py); each `generate` call is an independent request."""

    def __init__(self, model, eos_ids: set[int], max_context: int, compile: str = "off") -> None:
        self.model = model
        self.device = model.device
        self.eos_ids = set(eos_ids)
        self.max_context = max_context
        self.passes = target_passes(model, compile)

    @property
    def compile(self) -> str:
        """The compile mode in use: "on" or "off"."""
        return self.passes.compile

    def generate(
        self,
        prompt_ids: list[int],
        drafter: Drafter | None,
        settings: GenerationSettings,
        decode: Callable[[list[int]], str] | None = None,
        reference: list[int] | None = None,
    ) -> Generation:
        """A request; with `reference` (a target rollout) drafts are scored against it (replay)."""
        return Generation(self, Sequence(self, prompt_ids, drafter, settings, decode, reference))

    def check_request(self, prompt_ids: list[int], settings: GenerationSettings) -> int:
        """Validate a request; return how many new tokens it may generate (the context may cap it)."""
        if not prompt_ids:
            raise SpecScopeError("the prompt is empty: give at least one token of text")
        if settings.max_new_tokens < 1:
            raise SpecScopeError(f"max_new_tokens must be at least 1, got {settings.max_new_tokens}")
        if settings.tree_budget < 0 or settings.tree_topk < 1:
            raise SpecScopeError(
                f"tree budget must be >= 0 and tree top-k >= 1, got {settings.tree_budget} and {settings.tree_topk}"
            )
        if settings.tree_budget > 0:
            self.passes.check_tree()
        room = self.max_context - len(prompt_ids)
        if room < 1:
            raise SpecScopeError(
                f"the prompt has {len(prompt_ids)} tokens but the model's context is {self.max_context}: shorten it"
            )
        return min(settings.max_new_tokens, room)

    def prefill(self, tokens: list[int], cache, hidden_layers: tuple[int, ...]) -> dict[int, torch.Tensor]:
        """Cache the prompt (all but its last token); return the requested hidden states for it."""
        result = self.passes.prefill(tokens, cache, bool(hidden_layers))
        return {layer: result.hidden[layer] for layer in hidden_layers} if result is not None else {}

    def clock(self) -> float:
        return device_clock(self.device)


def device_clock(device: torch.device) -> float:
    """Wall time, after waiting for queued GPU work so timings are real."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter()
