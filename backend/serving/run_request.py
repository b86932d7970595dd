"""A live run as the worker's compute thread receives it: the prompt's turns, the target, the lanes
(a drafter, a draft length, a tree budget and its options each) and the decoding settings, and how they become the
engine's settings and the store's run plan.

Knows nothing about HTTP, jobs or the store.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from backend.core.engine import GenerationSettings
from backend.core.verify import SamplingParams
from backend.drafters import DrafterOptions
from backend.lab.labels import variant_label
from backend.lab.recorder import RunPlan

PLAIN_DRAFTER = "none"


@dataclass
class LaneSpec:
    drafter: str
    draft_len: int | str
    options: DrafterOptions
    tree_budget: int = 0  # nodes of a tree draft per step; 0 = chains
    tree_topk: int = 4  # children per tree node
    min_confidence: float = 0.0  # chains stop below this running product of draft probabilities; 0 = never

    @property
    def is_plain(self) -> bool:
        """Plain decoding: no drafter, or nothing drafted per step."""
        return self.draft_len == 0 or self.drafter == PLAIN_DRAFTER


PLAIN_LANE = LaneSpec(PLAIN_DRAFTER, 0, DrafterOptions())


@dataclass
class RunRequest:
    turns: list[str]
    target: str
    lanes: list[LaneSpec]
    max_new_tokens: int
    sampling: SamplingParams
    seed: int
    stop: list[str] = field(default_factory=list)
    baseline: bool = True  # decode plainly in the same job: the speedup's divisor and the output check
    replay: bool = False
    question_id: str | None = None
    category: str | None = None

    def settings(self, lane: LaneSpec) -> GenerationSettings:
        return GenerationSettings(
            max_new_tokens=self.max_new_tokens,
            draft_len=lane.draft_len,
            sampling=self.sampling,
            seed=self.seed,
            stop_strings=tuple(self.stop),
            tree_budget=lane.tree_budget,
            tree_topk=lane.tree_topk,
            min_confidence=lane.min_confidence,
        )

    def plan(self, lane: LaneSpec, kind: str, group_id: str | None = None, index: int | None = None) -> RunPlan:
        """The store's record of one lane of this request (or of its plain run: PLAIN_LANE)."""
        return RunPlan(
            kind=kind,
            turns=self.turns,
            drafter=lane.drafter,
            draft_len=lane.draft_len,
            tree_budget=lane.tree_budget,
            tree_topk=lane.tree_topk if lane.tree_budget else None,
            min_confidence=lane.min_confidence,
            variant=variant_label(0.0, {}, lane.tree_budget, lane.min_confidence),
            max_new_tokens=self.max_new_tokens,
            drafter_options={k: v for k, v in lane.options.__dict__.items() if v is not None},
            sampling=self.sampling,
            seed=self.seed,
            question_id=self.question_id,
            category=self.category,
            group_id=group_id,
            lane=index,
        )
