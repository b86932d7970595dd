"""`bench speed`: end-to-end decode speed of drafters against plain decoding and Hugging Face.

For every prompt of a suite, in one process on one loaded model, it runs (in a shuffled order per
prompt, so drift in a shared machine's speed does not favour one configuration):
  - plain decoding through our engine (D = 0): the baseline and the reference output;
  - Hugging Face `generate`, greedy;
  - Hugging Face assisted generation with prompt lookup (`prompt_lookup_num_tokens` = D);
  - each drafter at each D (`drafter@D`), and at each value of the drafter options swept with `--option`
    (`drafter@D/ngram_max=3`, a weights folder by its name: two rounds of trained weights side by side),
    each confidence stop (`drafter@D/conf=C`) and, for drafters that build trees, each tree budget
    (`drafter@D/tree=N`).
Every output is checked token for token against the plain one. Speeds are end to end (prefill +
decode, new tokens / wall seconds) for every configuration alike; speedups are per prompt, then
geometric means per category and overall. Our engine's runs also get a decode-only speedup (new tokens
/ drafting and verification seconds, prefill left out: the part speculation can change, as a TPOT
ratio in vLLM's benchmarks); Hugging Face's `generate` does not split its time, so its rows have none.

Knows nothing about printing; the CLI formats what `speed_benchmark` returns.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch

from backend.core.engine import GenerationSettings, device_clock
from backend.core.metrics import acceptance_stats, count_acceptance, geomean, speedup
from backend.core.models import LoadedModel
from backend.core.target_passes import single_sequence_graphs
from backend.drafters import TREE_DRAFTERS, DrafterOptions, build_drafter
from backend.lab.analysis import bootstrap_al_ci
from backend.lab.labels import variant_parts
from backend.lab.prompts import Question
from backend.lab.runner import Runner, RunResult
from backend.lab.sweep import option_grid


@dataclass
class Measurement:
    output_ids: list[int]
    new_tokens: int
    seconds: float
    steps: list = field(default_factory=list)
    turn_outputs: list[list[int]] = field(default_factory=list)  # per turn, where turns were decoded apart
    decode_seconds: float | None = None  # prefill left out; our engine's runs only

    @classmethod
    def of_run(cls, result: RunResult) -> Measurement:
        output_ids = result.output_ids
        turns = [turn.output_ids for turn in result.turns]
        return cls(output_ids, len(output_ids), result.wall_s, result.steps, turns, result.decode_s)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def decode_tokens_per_s(self) -> float | None:
        if self.decode_seconds is None:
            return None
        return self.new_tokens / self.decode_seconds if self.decode_seconds > 0 else 0.0


@torch.inference_mode()
def hf_generate(
    target: LoadedModel, prompt_ids: list[int], max_new_tokens: int, prompt_lookup: int | None = None
) -> tuple[list[int], float]:
    """Greedy Hugging Face `generate` (with prompt-lookup assisted generation when given a D)."""
    model = target.model
    inputs = torch.tensor([prompt_ids], device=target.device)  # [1, T]
    kwargs = {
        "max_new_tokens": max_new_tokens,
        "do_sample": False,
        "attention_mask": torch.ones_like(inputs),
        "pad_token_id": target.tokenizer.pad_token_id or min(target.eos_token_ids),
    }
    if prompt_lookup:
        kwargs["prompt_lookup_num_tokens"] = prompt_lookup
    started = device_clock(target.device)
    output = model.generate(inputs, **kwargs)
    seconds = device_clock(target.device) - started
    return output[0, len(prompt_ids) :].tolist(), seconds


@dataclass(frozen=True)
class Config:
    """One drafter configuration of the benchmark: a drafter, its D and its tree budget (0 = a chain)."""

    drafter: str
    draft_len: int | str
    tree_budget: int = 0
    min_confidence: float = 0.0
    options: tuple[tuple[str, object], ...] = ()  # swept drafter option values, (name, value) each

    @property
    def label(self) -> str:
        """`name@D`, then `/ngram_max=3` per swept option (a weights folder by its name), `/tree=N` for a tree
        budget, `/conf=C` for a confidence stop."""
        parts = variant_parts(0.0, dict(self.options), self.tree_budget, self.min_confidence)
        return f"{self.drafter}@{self.draft_len}" + "".join(f"/{part}" for part in parts)


def configs_of(
    drafters: list[str],
    draft_lens: list[int | str],
    tree_budgets: list[int],
    min_confidences: list[float] | None = None,
    option_values: Mapping[str, list] | None = None,
) -> list[Config]:
    """Every drafter at every D, combination of the swept values of the options it has (lab/sweep.py's
    option_grid) and confidence stop, and a drafter that builds trees at every tree budget too (a confidence
    stop cuts chains only), in that order."""
    return [
        Config(name, d, budget, confident, tuple(combo.items()))
        for name in drafters
        for d in draft_lens
        for combo in option_grid(name, option_values or {})
        for budget in (tree_budgets if name in TREE_DRAFTERS else [0])
        for confident in ((min_confidences or [0.0]) if not budget else [0.0])
    ]


def speed_benchmark(
    target: LoadedModel,
    questions: list[Question],
    drafters: list[str],
    draft_lens: list[int | str],
    max_new_tokens: int,
    options: DrafterOptions,
    progress: Callable[[str], None] = lambda label: None,
    seed: int = 0,
    tree_budgets: tuple[int, ...] = (0,),
    tree_topk: int = 4,
    min_confidences: tuple[float, ...] = (0.0,),
    option_values: Mapping[str, list] | None = None,
) -> dict:
    """The report (see `_report`). With tree budgets the target's passes are checked for trees first;
    `option_values` (checked: lab/sweep.py's check_option_values) are swept as in `bench sweep`."""
    runner = Runner(target)
    if any(tree_budgets):
        runner.engine.passes.check_tree()
    configs = configs_of(drafters, draft_lens, list(tree_budgets), list(min_confidences), option_values)
    settings = {
        config.label: GenerationSettings(
            max_new_tokens=max_new_tokens,
            draft_len=config.draft_len,
            tree_budget=config.tree_budget,
            tree_topk=tree_topk,
            min_confidence=config.min_confidence,
        )
        for config in configs
    }
    plain_settings = GenerationSettings(max_new_tokens=max_new_tokens, draft_len=0)
    built = {
        config.label: build_drafter(config.drafter, target, dataclasses.replace(options, **dict(config.options)))
        for config in configs
    }
    hf_lens = [d for d in draft_lens if d != "auto"]
    runner.run(["Warm up."], None, GenerationSettings(max_new_tokens=8, draft_len=0))
    shuffle = random.Random(seed)
    per_prompt: list[dict[str, Measurement]] = []
    disagreements: list[dict] = []  # where HF's greedy output leaves ours
    lossy: list[dict] = []  # where a configuration's output leaves our plain decoding's (a near-tie, or a bug)
    for question in questions:
        plain = runner.run(question.turns, None, plain_settings)
        progress("plain")
        measured = {"plain": Measurement.of_run(plain)}
        jobs: list[tuple[str, int | None]] = [("hf-generate", None)]
        jobs += [(f"hf-assisted@{d}", d) for d in hf_lens]
        jobs += [(config.label, None) for config in configs]
        shuffle.shuffle(jobs)
        for label, prompt_lookup in jobs:
            if label in built:
                measured[label] = _engine(runner, question, built[label], settings[label])
                if measured[label].output_ids != plain.output_ids:
                    where = first_disagreement(target, plain, measured[label].turn_outputs)
                    lossy.append({"config": label, "question_id": question.question_id, **(where or {})})
            else:
                measured[label] = _hf(target, plain, max_new_tokens, prompt_lookup)
                if label == "hf-generate" and measured[label].output_ids != plain.output_ids:
                    disagreements.append(
                        {
                            "question_id": question.question_id,
                            "category": question.category,
                            **(first_disagreement(target, plain, measured[label].turn_outputs) or {}),
                        }
                    )
            progress(label)
        per_prompt.append(measured)
    graphs = single_sequence_graphs(target.model)
    report = _report(questions, per_prompt, configs, hf_lens, runner.engine.compile, graphs)
    report["hf_generate_disagreements"] = disagreements
    report["lossless_disagreements"] = lossy
    return {**target.precision, **report}


def _hf(target: LoadedModel, plain, max_new_tokens: int, prompt_lookup: int | None = None) -> Measurement:
    """HF decodes each turn of the conversation the plain run saw, so outputs are comparable."""
    turn_outputs: list[list[int]] = []
    seconds = 0.0
    for turn in plain.turns:
        ids, turn_seconds = hf_generate(target, turn.prompt_ids, max_new_tokens, prompt_lookup)
        turn_outputs.append(ids)
        seconds += turn_seconds
    output_ids = [token for ids in turn_outputs for token in ids]
    return Measurement(output_ids, len(output_ids), seconds, turn_outputs=turn_outputs)


@torch.inference_mode()
def first_disagreement(target: LoadedModel, plain, theirs: list[list[int]]) -> dict | None:
    """Where another greedy output (Hugging Face's, or a drafting configuration's) first differs from our
    plain decoding: turn, position, both tokens, and the logit margin between them there (HF's eager
    forward over the prompt and the common prefix). A margin near zero is a near-tie that rounding
    decided; a wide one is a bug."""
    for index, (turn, other) in enumerate(zip(plain.turns, theirs, strict=True)):
        ours = turn.output_ids
        position = next((i for i, (a, b) in enumerate(zip(ours, other, strict=False)) if a != b), None)
        if position is None:
            if len(ours) == len(other):
                continue
            position = min(len(ours), len(other))  # one stopped earlier (an EOS the other did not pick)
        if position >= min(len(ours), len(other)):
            return {"turn": index, "position": position, "ours": None, "theirs": None, "margin": None}
        context = torch.tensor([turn.prompt_ids + ours[:position]], device=target.device)  # [1, P]
        logits = target.model(context, logits_to_keep=1).logits[0, -1].float()  # [V]
        return {
            "turn": index,
            "position": position,
            "ours": ours[position],
            "theirs": other[position],
            "margin": float(logits[ours[position]] - logits[other[position]]),
        }
    return None


def _engine(runner: Runner, question: Question, drafter, settings: GenerationSettings) -> Measurement:
    return Measurement.of_run(runner.run(question.turns, drafter, settings))


def _report(
    questions: list[Question],
    per_prompt: list[dict[str, Measurement]],
    configs: list[Config],
    hf_lens: list[int],
    compile: str,
    graphs: str,
) -> dict:
    categories = sorted({q.category for q in questions})
    results, summary = [], {}
    labelled = [(config.label, config) for config in configs]
    labelled += [(f"hf-assisted@{d}", Config("hf-assisted", d)) for d in hf_lens]
    for label, config in labelled:
        versus = _hf_reference(config.draft_len, hf_lens) if config.drafter != "hf-assisted" and hf_lens else None
        worst = float("inf")
        for category in categories:
            indices = [i for i, q in enumerate(questions) if q.category == category]
            row = _figures(per_prompt, label, indices, versus)
            worst = min(worst, row["speedup_vs_plain"])
            lossless = row.pop("equal") == len(indices)
            results.append(
                {
                    "config": label,
                    "drafter": config.drafter,
                    "draft_len": config.draft_len,
                    "tree_budget": config.tree_budget,
                    "min_confidence": config.min_confidence,
                    "options": dict(config.options),
                    "category": category,
                    **row,
                    "lossless": lossless,
                }
            )
        overall = _figures(per_prompt, label, list(range(len(questions))), versus)
        summary[label] = {
            "geomean_speedup_vs_plain": overall["speedup_vs_plain"],
            "geomean_decode_speedup_vs_plain": overall["decode_speedup_vs_plain"],
            "geomean_speedup_vs_hf_assisted": overall["speedup_vs_hf_assisted"],
            "worst_category_speedup": worst,
            "al": overall["al"],
            "tokens_per_s": overall["tokens_per_s"],
            "lossless": f"{overall['equal']}/{len(questions)}",
        }
        if config.tree_budget:
            summary[label]["branched_steps"] = _branched_share(per_prompt, label)
    plain_runs = [m["plain"] for m in per_prompt]
    plain_tps = sum(r.new_tokens for r in plain_runs) / sum(r.seconds for r in plain_runs)
    plain_decode_tps = sum(r.new_tokens for r in plain_runs) / sum(r.decode_seconds for r in plain_runs)
    plain_vs_hf = geomean([speedup(m["plain"].tokens_per_s, m["hf-generate"].tokens_per_s) for m in per_prompt])
    summary["plain@0"] = {
        "tokens_per_s": plain_tps,
        "decode_tokens_per_s": plain_decode_tps,
        "vs_hf_generate": plain_vs_hf,
        "compile": compile,
        "graphs": graphs,  # what ran the compiled one-row passes (target_passes.single_sequence_graphs)
    }
    return {
        "prompts": len(questions),
        "plain_tokens_per_s": plain_tps,
        "engine_plain_vs_hf_generate": plain_vs_hf,
        "hf_generate_lossless": f"{sum(m['hf-generate'].output_ids == m['plain'].output_ids for m in per_prompt)}"
        f"/{len(per_prompt)}",
        "results": results,
        "summary": summary,
    }


def _branched_share(per_prompt: list[dict[str, Measurement]], label: str) -> float:
    """The share of a tree configuration's steps whose draft branched (the rest verified a chain)."""
    steps = [step for measured in per_prompt for step in measured[label].steps]
    return sum(step.parents is not None for step in steps) / len(steps) if steps else 0.0


def _hf_reference(draft_len: int | str, hf_lens: list[int]) -> Callable[[dict[str, Measurement]], float]:
    """Tokens/s of HF assisted generation at the same D; for `auto`, HF's best D on that prompt."""
    if draft_len != "auto":
        return lambda measured: measured[f"hf-assisted@{draft_len}"].tokens_per_s
    return lambda measured: max(measured[f"hf-assisted@{d}"].tokens_per_s for d in hf_lens)


def _figures(
    per_prompt: list[dict[str, Measurement]],
    label: str,
    indices: list[int],
    versus: Callable[[dict[str, Measurement]], float] | None,
) -> dict:
    """AL (with a 95% bootstrap CI over the prompts), speed and geomean speedups of one configuration over
    some prompts, end to end and decode-only (None for Hugging Face's runs); `equal` counts outputs
    identical to plain decoding."""
    runs = [per_prompt[i][label] for i in indices]
    decode_only = all(run.decode_seconds is not None for run in runs)
    steps = [s for run in runs for s in run.steps]
    counters = [count_acceptance(run.steps) for run in runs]
    _, low, high = bootstrap_al_ci([(counter.accepted_tokens, counter.drafts) for counter in counters])
    return {
        "al": acceptance_stats(steps).al if steps else None,
        "al_ci_low": low if steps else None,
        "al_ci_high": high if steps else None,
        "tokens_per_s": sum(r.new_tokens for r in runs) / sum(r.seconds for r in runs),
        "speedup_vs_plain": geomean(
            [speedup(per_prompt[i][label].tokens_per_s, per_prompt[i]["plain"].tokens_per_s) for i in indices]
        ),
        "decode_speedup_vs_plain": geomean(
            [
                speedup(per_prompt[i][label].decode_tokens_per_s, per_prompt[i]["plain"].decode_tokens_per_s)
                for i in indices
            ]
        )
        if decode_only
        else None,
        "speedup_vs_hf_assisted": geomean(
            [speedup(per_prompt[i][label].tokens_per_s, versus(per_prompt[i])) for i in indices]
        )
        if versus
        else None,
        "equal": sum(per_prompt[i][label].output_ids == per_prompt[i]["plain"].output_ids for i in indices),
    }
