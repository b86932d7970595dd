"""vLLM's speculative-decoding counters, read from its Prometheus `/metrics` text.

vLLM counts, per engine (label `engine`), `vllm:spec_decode_num_drafts`, `vllm:spec_decode_num_draft_tokens`,
`vllm:spec_decode_num_accepted_tokens` and `vllm:spec_decode_num_accepted_tokens_per_pos` (label
`position`, from 0), and defines AL as 1 + accepted tokens / drafts (vllm/v1/spec_decode/metrics.py,
`SpecDecodingProm` and `SpecDecodingLogging.log`). The Prometheus client exposes each counter with the
suffix `_total` (and a `_created` timestamp, skipped here). Sums over every label set but `position`, so a
data-parallel server's engines count together. Every metric carries the labels `model_name` and `engine`
(vllm/v1/metrics/loggers.py, `PrometheusStatLogger`), where `vllm:generation_tokens` counts the tokens
generated. The names are kept here once: the worker's own `/metrics` (serving/prometheus.py) exposes them.
Knows nothing about HTTP.
"""

from __future__ import annotations

import re

from backend.engines.counts import EngineCounts

PREFIX = "vllm:spec_decode_num_"
DRAFTS = PREFIX + "drafts"
DRAFT_TOKENS = PREFIX + "draft_tokens"
ACCEPTED_TOKENS = PREFIX + "accepted_tokens"
ACCEPTED_PER_POSITION = PREFIX + "accepted_tokens_per_pos"
GENERATION_TOKENS = "vllm:generation_tokens"
LABELS = ("model_name", "engine")  # every metric's; the per-position counter adds POSITION
POSITION = "position"
SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def spec_decode_counts(metrics_text: str) -> EngineCounts | None:
    """The spec-decode counters in one `/metrics` reply, or None where the server has none (it was
    started without a speculative config)."""
    totals: dict[str, float] = {}
    per_position: dict[int, float] = {}
    for line in metrics_text.splitlines():
        found = SAMPLE.match(line)
        if not found or not found["name"].startswith(PREFIX) or found["name"].endswith("_created"):
            continue
        name = found["name"].removesuffix("_total")
        value = float(found["value"])
        if name == ACCEPTED_PER_POSITION:
            position = int(dict(LABEL.findall(found["labels"] or ""))[POSITION])
            per_position[position] = per_position.get(position, 0.0) + value
        else:
            totals[name] = totals.get(name, 0.0) + value
    if DRAFTS not in totals:
        return None
    width = max(per_position, default=-1) + 1
    return EngineCounts(
        drafts=round(totals[DRAFTS]),
        drafted_tokens=round(totals.get(DRAFT_TOKENS, 0.0)),
        accepted_tokens=round(totals.get(ACCEPTED_TOKENS, 0.0)),
        accepted_per_position=[round(per_position.get(k, 0.0)) for k in range(width)],
    )
