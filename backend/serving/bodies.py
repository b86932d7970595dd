"""The request bodies of the worker's endpoints (pydantic models): each field's bounds and help, and
the checks that span fields (one prompt, known drafters, D values a policy accepts, sweepable option
values). A body that fails becomes a 422 with one sentence per problem (worker.py's handler).

Knows nothing about routes, jobs or the store.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

from pydantic import BaseModel, Field, create_model, field_validator, model_validator

from backend.core.errors import SpecScopeError
from backend.core.policy import MAX_DRAFT_LEN, make_policy
from backend.core.tree_shape import MAX_TREE_BUDGET
from backend.core.verify import MAX_TEMPERATURE
from backend.drafters import DRAFTER_NAMES, REGISTRY, DrafterOptions, all_options, check_tree_budget, options_for
from backend.lab.store_schema import DEFAULT_KINDS, DEFAULT_STATUSES, RUN_KINDS, RUN_STATUSES
from backend.lab.sweep import check_option_values
from backend.serving.run_request import LaneSpec
from backend.serving.validation import INT32_MAX, CheckedBody, ModelName, name_problem

MAX_PROMPT_CHARS = 60_000
MAX_NEW_TOKENS = 2048
MAX_RUNS_LISTED = 100_000
KINDS_HELP = f"run kinds to count (default {', '.join(DEFAULT_KINDS)}; any of {', '.join(RUN_KINDS)})"
STATUSES_HELP = f"run statuses to count (default {', '.join(DEFAULT_STATUSES)}; any of {', '.join(RUN_STATUSES)})"
MAX_TREE_TOPK = 16
MAX_STOP_STRINGS = 16
MIN_TOP_P = 1e-6  # below this the nucleus is empty in float32 (5e-324 rounds to 0)


class DrafterChoice(CheckedBody):
    drafter: str = "suffix"
    draft_len: int | Literal["auto"] = "auto"
    tree_budget: int = Field(
        0, ge=0, le=MAX_TREE_BUDGET, description="nodes of a token tree verified per step (0 = a chain)"
    )
    tree_topk: int = Field(4, ge=1, le=MAX_TREE_TOPK, description="with a tree budget: children per tree node")
    min_confidence: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="stop a chain before the first draft whose running product of the drafter's probabilities "
        "is below this (0 = never)",
    )

    @field_validator("drafter")
    @classmethod
    def known_drafter(cls, name: str) -> str:
        if name not in DRAFTER_NAMES:
            raise ValueError(f"unknown drafter '{name}': choose one of {', '.join(DRAFTER_NAMES)}")
        return name

    @field_validator("draft_len", mode="before")
    @classmethod
    def draft_len_in_range(cls, value: object) -> object:
        """One sentence for any bad D (the union's own check would give one per member)."""
        in_range = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_DRAFT_LEN
        if value != "auto" and not in_range:
            raise ValueError(f"draft_len must be an integer between 0 and {MAX_DRAFT_LEN}, or 'auto', got {value!r}")
        return value

    @model_validator(mode="after")
    def settings_agree(self) -> DrafterChoice:
        """Trees only for drafters that build them; options that agree with each other (ngram_min <= ngram_max)."""
        try:
            check_tree_budget(self.drafter, self.tree_budget)
            if self.drafter in REGISTRY:
                options_for(self.drafter, self.model_dump())
        except SpecScopeError as error:
            raise ValueError(str(error)) from error
        return self

    def lane(self) -> LaneSpec:
        options = DrafterOptions(**{f.name: getattr(self, f.name) for f in dataclasses.fields(DrafterOptions)})
        return LaneSpec(self.drafter, self.draft_len, options, self.tree_budget, self.tree_topk, self.min_confidence)


# the drafter and every registered drafter's options (bounds and help from the registry)
DrafterFields = create_model(
    "DrafterFields",
    __base__=DrafterChoice,
    **{
        info.name: (
            info.kind | None if info.optional else info.kind,
            Field(info.default, ge=info.ge, le=info.le, gt=info.gt, description=info.help),
        )
        for info in all_options()
    },
)


class PromptFields(CheckedBody):
    prompt: str | None = None
    messages: list[str] | None = Field(None, description="user turns; each sees the model's earlier answers")
    target: ModelName | None = None
    max_new_tokens: int = Field(128, ge=1, le=MAX_NEW_TOKENS)
    temperature: float = Field(0.0, ge=0, le=MAX_TEMPERATURE)
    top_p: float = Field(1.0, ge=MIN_TOP_P, le=1)
    top_k: int = Field(0, ge=0, le=INT32_MAX)
    seed: int = Field(0, description="any 64-bit integer")
    stop: list[str] = Field([], max_length=MAX_STOP_STRINGS, description="strings that end the answer")
    baseline: bool = Field(True, description="decode the prompt plainly in the same job too, for the speedup")
    question_id: str | None = None
    category: str | None = None

    @field_validator("stop")
    @classmethod
    def no_empty_stop(cls, stop: list[str]) -> list[str]:
        if not all(stop):
            raise ValueError("a stop string is empty: an empty string would end every answer at once")
        return stop

    @model_validator(mode="after")
    def one_prompt(self) -> PromptFields:
        turns = self.turns()
        if not turns or not all(t.strip() for t in turns):
            raise ValueError("the prompt is empty: send `prompt` (text) or `messages` (a list of user turns)")
        if sum(len(t) for t in turns) > MAX_PROMPT_CHARS:
            raise ValueError(f"the prompt is too long: at most {MAX_PROMPT_CHARS} characters")
        return self

    def turns(self) -> list[str]:
        return list(self.messages) if self.messages else ([self.prompt] if self.prompt is not None else [])


class GenerateBody(PromptFields, DrafterFields):
    pass


class CompareBody(PromptFields):
    lanes: list[DrafterFields] = Field(min_length=2, max_length=4)
    replay: bool = Field(False, description="score every lane against one plain target rollout")


class QuestionBody(BaseModel):
    question_id: int | str
    category: str = "uncategorized"
    turns: list[str] = Field(min_length=1)

    @field_validator("turns")
    @classmethod
    def no_empty_turn(cls, turns: list[str]) -> list[str]:
        if not all(turn.strip() for turn in turns):
            raise ValueError("a turn is empty: every turn of a question needs text")
        return turns


class SweepBody(CheckedBody):
    questions: list[QuestionBody] = Field(min_length=1, max_length=2000)
    target: ModelName | None = None
    drafters: list[str] = Field(min_length=1)
    draft_lens: list[int | str] = Field(min_length=1)
    batch_sizes: list[int] = Field(min_length=1)
    max_new_tokens: int = Field(64, ge=1, le=MAX_NEW_TOKENS)
    temperatures: list[float] = Field([0.0], min_length=1, max_length=16, description="0 = greedy")
    options: dict[str, list[int | float | str]] = Field(
        default_factory=dict, description="drafter option -> values to sweep, e.g. {'ngram_max': [2, 3, 4]}"
    )
    tree_budgets: list[int] = Field(
        [0], min_length=1, max_length=8, description="token-tree budgets, 0 = chains (drafters that build trees)"
    )
    tree_topk: int = Field(4, ge=1, le=MAX_TREE_TOPK, description="with tree budgets: children per tree node")
    min_confidences: list[float] = Field(
        [0.0], min_length=1, max_length=8, description="confidence stops for chains, each in [0, 1) (0 = none)"
    )
    dtypes: list[Literal["float32", "bfloat16", "float16"]] | None = Field(
        None, min_length=1, max_length=3, description="the whole grid in each precision (default: the worker's)"
    )
    settings: dict = Field(default_factory=dict, description="recorded with the sweep (suite path, ...)")

    @field_validator("tree_budgets")
    @classmethod
    def valid_tree_budgets(cls, values: list[int]) -> list[int]:
        if any(not 0 <= value <= MAX_TREE_BUDGET for value in values):
            raise ValueError(f"tree budgets must be between 0 and {MAX_TREE_BUDGET} (0 = chains)")
        return values

    @field_validator("min_confidences")
    @classmethod
    def valid_min_confidences(cls, values: list[float]) -> list[float]:
        if any(not 0 <= value < 1 for value in values):
            raise ValueError("confidence stops must be at least 0 and below 1 (0 = none)")
        return values

    @field_validator("temperatures")
    @classmethod
    def valid_temperatures(cls, values: list[float]) -> list[float]:
        if any(not 0 <= t <= MAX_TEMPERATURE for t in values):
            raise ValueError(f"temperatures must be between 0 and {MAX_TEMPERATURE:g}")
        return values

    @model_validator(mode="after")
    def valid_options(self) -> SweepBody:
        try:
            self.options = check_option_values(self.drafters, self.options)
        except SpecScopeError as error:
            raise ValueError(str(error)) from error
        for path in self.options.get("drafter_path", []):
            problem = name_problem(path)
            if problem:
                raise ValueError(f"drafter_path: {problem}")
        return self

    @field_validator("drafters")
    @classmethod
    def known_drafters(cls, names: list[str]) -> list[str]:
        for name in names:
            DrafterFields.known_drafter(name)
        return names

    @field_validator("draft_lens")
    @classmethod
    def valid_lengths(cls, values: list[int | str]) -> list[int | str]:
        for value in values:
            try:
                make_policy(value, free_drafter=True)
            except SpecScopeError as error:
                raise ValueError(str(error)) from error
        return values

    @field_validator("batch_sizes")
    @classmethod
    def valid_sizes(cls, sizes: list[int]) -> list[int]:
        if any(not 1 <= size <= 256 for size in sizes):
            raise ValueError("batch sizes must be between 1 and 256")
        return sizes
