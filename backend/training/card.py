"""The model card written next to a trained drafter's weights (`README.md`): what it is, the data and
tokens it saw, training time and hardware, the validation curve (loss and AL against training tokens),
AL by D and category measured on the held-out prompt suite, and the command to train it further;
and the same facts as a machine-readable summary (`card.json`) the dashboard shows under the drafter
picker.

Knows nothing about the mechanisms; it formats what the training run measured.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from backend.core.engine import GenerationSettings, SpeculativeEngine
from backend.core.metrics import acceptance_stats
from backend.core.models import LoadedModel
from backend.drafters.shipped import CARD_FILE, MODEL_CARD_FILE
from backend.lab.analysis import bootstrap_al_ci
from backend.lab.prompts import DEFAULT_SUITE, first_turn_ids, load_suite
from backend.training.loop import TrainReport, TrainSettings


def threads_text(count: int) -> str:
    return f"{count} thread" + ("" if count == 1 else "s")


def suite_acceptance(
    target: LoadedModel,
    drafter,
    draft_lens: tuple[int, ...] = (2, 4, 6, 8),
    per_category: int = 2,
    max_new_tokens: int = 64,
) -> list[dict]:
    """AL with a 95% bootstrap CI over prompts, per category and D, greedy, on the evaluation suite; each row
    keeps its prompts' (accepted drafts, drafting steps) in suite order, so two drafters pair prompt by prompt."""
    engine = SpeculativeEngine(target.model, target.eos_token_ids, target.facts.max_context)
    questions = load_suite(DEFAULT_SUITE, per_category=per_category)
    rows = []
    for draft_len in draft_lens:
        settings = GenerationSettings(max_new_tokens, draft_len=draft_len)
        per_prompt: dict[str, list[tuple[int, int]]] = {}
        for question in questions:
            prompt = first_turn_ids(target.tokenizer, question)
            stats = acceptance_stats(engine.generate(prompt, drafter, settings).run().steps)
            per_prompt.setdefault(question.category, []).append((stats.accepted_tokens, stats.drafting_steps))
        for category, counts in sorted(per_prompt.items()):
            al, low, high = bootstrap_al_ci(counts)
            rows.append(
                {
                    "category": category,
                    "draft_len": draft_len,
                    "al": al,
                    "al_ci_low": low,
                    "al_ci_high": high,
                    "prompts": [list(pair) for pair in counts],
                }
            )
    return rows


def read_card(folder: Path) -> dict:
    """The folder's card.json ({} when it has none or it cannot be read)."""
    try:
        return json.loads((folder / CARD_FILE).read_text())
    except (OSError, ValueError):
        return {}


def training_summary(
    kind: str, target: LoadedModel, report: TrainReport, settings: TrainSettings, facts: dict, suite: list[dict] | None
) -> dict:
    """What card.json holds: the data, the training budget and time, the validation curve and the AL by
    category and D on the evaluation suite (empty when it was not measured). Steps, tokens, time, runs and the
    validation curve count those of the weights it started from (report.origin) first."""
    before, runs = _origin_totals(report.origin), training_runs(report)
    return {
        "kind": kind,
        "target": target.spec,
        "target_fingerprint": target.fingerprint,
        "data": facts["corpus"],
        "train_sequence_tokens": facts["train_sequence_tokens"],
        "validation_sequence_tokens": facts["validation_sequence_tokens"],
        "training_tokens": before["training_tokens"] + _window_tokens(report, settings),
        "steps": before["steps"] + report.steps,
        "seconds": round(before["seconds"] + report.seconds),
        "device": facts["device"],
        "dtype": facts["dtype"].removeprefix("torch."),
        "hardware": facts["hardware"],
        "runs": before["runs"]
        + [
            {**r, "from_step": r["from_step"] + before["steps"], "to_step": r["to_step"] + before["steps"]}
            for r in runs
        ],
        "validation_draft_len": settings.validation_draft_len,
        "validation": before["validation"]
        + [
            {
                "tokens": before["training_tokens"] + v["tokens"],
                "validation_loss": round(v["validation_loss"], 4),
                "al": round(v["al"], 4),
            }
            for v in report.validation
        ],
        "suite": suite or [],
        **({"initialised_from": report.origin["folder"]} if report.origin else {}),
    }


def _window_tokens(report: TrainReport, settings: TrainSettings) -> int:
    """The tokens of the windows this training stepped through (not counting the weights it started from)."""
    return report.steps * settings.rows * settings.window


def _origin_totals(origin: dict | None) -> dict:
    """What the card of the weights training started from counts before this training (zeros for a fresh head);
    a card counts its own origin's too, so a chain of runs adds up."""
    origin = origin or {}
    return {
        "steps": origin.get("steps", 0),
        "training_tokens": origin.get("training_tokens", 0),
        "seconds": origin.get("seconds", 0),
        "runs": list(origin.get("runs", [])),
        "validation": list(origin.get("validation", [])),
    }


def training_runs(report: TrainReport) -> list[dict]:
    """The runs that trained the weights, oldest first, each with the steps it took ([from_step, to_step));
    steps before the first recorded run (a checkpoint from before runs were kept) count as one unrecorded run."""
    runs = list(report.runs)
    if not runs or runs[0]["from_step"] > 0:
        runs.insert(0, {"from_step": 0, "data": "not recorded (an earlier run's checkpoint)"})
    ends = [run["from_step"] for run in runs[1:]] + [report.steps]
    return [{**run, "to_step": end} for run, end in zip(runs, ends, strict=True)]


def _runs_markdown(runs: list[dict]) -> list[str]:
    """One line per run when the weights were trained in several (resumed from each other's checkpoints)."""
    if len(runs) < 2:
        return []
    return [
        "- Runs, each going on from the weights the one before left:",
        *[
            f"  - steps {r['from_step']}-{r['to_step']}: {r.get('data', '-')}"
            + (f"; `python -m backend {r['command']}`" if r.get("command") else "")
            for r in runs
        ],
    ]


def write_card(
    out: Path,
    kind: str,
    target: LoadedModel,
    report: TrainReport,
    settings: TrainSettings,
    head_settings: dict,
    facts: dict,
    suite: list[dict] | None = None,
    shipped_as: Path | None = None,
) -> Path:
    """Write card.json and README.md into `out`; returns the README's path. `shipped_as`: the shipped folder
    these weights are offered to (`--ship`), whose name the card then uses, as it will live there."""
    name = (shipped_as or out).name
    summary = training_summary(kind, target, report, settings, facts, suite)
    (out / CARD_FILE).write_text(json.dumps(summary, indent=1))
    lines = [
        f"# {name}: {kind} drafter for the target {target.spec}",
        "",
        f"Trained by SpecScope (`python -m backend train --kind {kind}`) on the target `{target.spec}` "
        f"(fingerprint `{target.fingerprint[:16]}`). Load it with `--drafter {kind}`; it is lossless through "
        "the engine whatever its quality: the target verifies every draft.",
        "",
        "## Data",
        f"- {facts['corpus']}. The evaluation prompt suites are held out (checked when the corpus is built).",
        f"- Cached sequence tokens: {facts['train_sequence_tokens']} for training, "
        f"{facts['validation_sequence_tokens']} for validation (prompt + answer; the loss covers answer tokens).",
        f"- Distillation time: {facts['distil_seconds']} s."
        if facts["distil_seconds"] >= 1
        else "- Distillation: the shared cache was already filled (by an earlier run or `--distil-only`) and reused.",
        "",
        "## Training",
        *(
            [
                f"- Started from the weights in `{report.origin['folder']}` ({report.origin.get('steps', 0)} steps, "
                f"{report.origin.get('training_tokens', 0)} window tokens, {report.origin.get('seconds', 0)} s); "
                f"with this training's below, {summary['steps']} steps, {summary['training_tokens']} window tokens "
                f"and {summary['seconds']} s in all."
            ]
            if report.origin
            else []
        ),
        f"- {report.steps} steps of {settings.rows} windows x {settings.window} tokens "
        f"({_window_tokens(report, settings)} window tokens), AdamW, learning rate "
        f"{settings.learning_rate}, warm-up {settings.warmup_steps} steps then cosine decay.",
        f"- Time: {report.seconds:.0f} s on {facts['device']} ({facts['dtype']}), {facts['hardware']}.",
        f"- Head settings: `{json.dumps(head_settings) if head_settings else 'defaults'}`.",
        f"- Command: `python -m backend {facts['command']}`",
        *_runs_markdown(summary["runs"]),
        "",
        "## Validation curve (held-out instructions)",
        "",
        f"| training tokens | validation loss | AL (greedy, D = {settings.validation_draft_len}) |",
        "|---:|---:|---:|",
        *[f"| {v['tokens']} | {v['validation_loss']:.3f} | {v['al']:.2f} |" for v in summary["validation"]],
    ]
    if suite:
        lines += [
            "",
            "## AL on the evaluation suite (greedy, 95% bootstrap CI over prompts)",
            "",
            "| category | D | AL | CI |",
            "|---|---:|---:|---|",
            *[
                f"| {r['category']} | {r['draft_len']} | {r['al']:.2f} | {r['al_ci_low']:.2f}-{r['al_ci_high']:.2f} |"
                for r in suite
            ],
        ]
    more = f"--minutes {settings.minutes * 10:g}" if settings.minutes else f"--tokens {settings.tokens * 20}"
    gpu = f"{more} --data-tokens 3000000 --distil-batch 256 --rows 16 --window 512 --device cuda --dtype float32"
    start = f"python -m backend train --kind {kind} --target {target.spec} --out runs/{name}"
    lines += [
        "",
        "## Training further",
        "On a CUDA machine, go on from these weights (`--init-from`; with `--ship` the new ones replace them only "
        "if they measure better on the suite), or train afresh with the same settings; "
        "`scripts/train_drafters.sh` trains all five kinds at once:",
        "",
        f"    {start} --init-from data/drafters/{name} --ship data/drafters/{name} {gpu}",
        f"    {start} {gpu}" + (f" --settings {shlex.quote(json.dumps(head_settings))}" if head_settings else ""),
        "",
    ]
    path = out / MODEL_CARD_FILE
    path.write_text("\n".join(lines))
    return path
