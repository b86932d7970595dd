"""Runs a prompt (every turn of it) through the engine and summarises it: the glue the CLI, the
benchmark and the worker share between prompts, the engine and the metrics.

Knows nothing about how results are printed or stored.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from backend.core.drafter import Drafter
from backend.core.engine import GenerationSettings, SpeculativeEngine, StepEvent
from backend.core.metrics import summary
from backend.core.models import LoadedModel
from backend.lab.prompts import encode_conversation


@dataclass
class TurnResult:
    prompt_ids: list[int]
    output_ids: list[int]
    text: str
    steps: list[StepEvent]
    prefill_s: float
    decode_s: float
    finish_reason: str | None


@dataclass
class RunResult:
    turns: list[TurnResult]

    @property
    def output_ids(self) -> list[int]:
        return [token for turn in self.turns for token in turn.output_ids]

    @property
    def text(self) -> str:
        return "\n\n".join(turn.text for turn in self.turns)

    @property
    def steps(self) -> list[StepEvent]:
        return [step for turn in self.turns for step in turn.steps]

    @property
    def wall_s(self) -> float:
        """Prefill + decode over all turns: what a user waits, end to end."""
        return sum(turn.prefill_s + turn.decode_s for turn in self.turns)

    @property
    def decode_s(self) -> float:
        """Drafting and verification over all turns, prefill left out."""
        return sum(turn.decode_s for turn in self.turns)

    def summary(self) -> dict:
        result = summary(self.steps)
        result["prefill_s"] = sum(turn.prefill_s for turn in self.turns)
        result["end_to_end_tokens_per_s"] = result["new_tokens"] / self.wall_s if self.wall_s > 0 else 0.0
        return result

    def to_dict(self) -> dict:
        return {
            "output_ids": self.output_ids,
            "text": self.text,
            "steps": [{"turn": t, **step.to_dict()} for t, turn in enumerate(self.turns) for step in turn.steps],
            "summary": self.summary(),
            "turns": [
                {
                    "prompt_tokens": len(turn.prompt_ids),
                    "output_ids": turn.output_ids,
                    "text": turn.text,
                    "finish_reason": turn.finish_reason,
                }
                for turn in self.turns
            ],
        }


class Runner:
    """A target with its engine; `run` decodes one multi-turn prompt with one drafter."""

    def __init__(self, target: LoadedModel, use_chat_template: bool = True) -> None:
        self.target = target
        self.use_chat_template = use_chat_template
        self.engine = SpeculativeEngine(target.model, target.eos_token_ids, target.facts.max_context, target.compile)

    def decode(self, ids: list[int]) -> str:
        return self.target.tokenizer.decode(ids, skip_special_tokens=True)

    def stream(
        self,
        turns: list[str] | tuple[str, ...],
        drafter: Drafter | None,
        settings: GenerationSettings,
        reference: list[list[int]] | None = None,
    ) -> Iterator[tuple[int, StepEvent | TurnResult]]:
        """Answer each turn in order, every turn seeing the earlier answers. Yields (turn, StepEvent)
        for every step and (turn, TurnResult) when a turn ends. With `reference` (one target rollout
        per turn) the drafts are scored against that rollout instead of the target's choices."""
        answers: list[str] = []
        for index in range(len(turns)):
            prompt_ids = encode_conversation(
                self.target.tokenizer, list(turns[: index + 1]), answers, self.use_chat_template
            )
            turn_settings = replace(settings, seed=settings.seed + index)
            generation = self.engine.generate(
                prompt_ids,
                drafter,
                turn_settings,
                decode=self.decode,
                reference=reference[index] if reference is not None else None,
            )
            for event in generation:
                yield index, event
            result = TurnResult(
                prompt_ids,
                generation.output_ids,
                self.decode(generation.output_ids),
                generation.steps,
                generation.prefill_s,
                generation.decode_s,
                generation.finish_reason,
            )
            answers.append(result.text)
            yield index, result

    def run(
        self,
        turns: list[str] | tuple[str, ...],
        drafter: Drafter | None,
        settings: GenerationSettings,
        reference: list[list[int]] | None = None,
    ) -> RunResult:
        return RunResult(
            [item for _, item in self.stream(turns, drafter, settings, reference) if isinstance(item, TurnResult)]
        )
