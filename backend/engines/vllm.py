"""vLLM's speculative-decoding counters, read from its Prometheus `/metrics` text.

vLLM counts, per engine (label `engine`), `vllm:spec_decode_num_drafts`, `vllm:spec_decode_num_draft_tokens`,
`vllm:spec_decode_num_accepted_tokens` and `vllm:spec_decode_num_accepted_tokens_per_pos` (label
`position`, from 0), and defines AL as 1 + accepted tokens / drafts (vllm/v1/spec_decode/metrics.py,
`SpecDecodingProm` and `SpecDecodingLogging.log`). The Prometheus client exposes each counter with the
suffix `_total` (and a `_created` timestamp, skipped here). Sums over every label set but `position`, so a
data-parallel server's engines count together. Knows nothing about HTTP.
"""

from __future__ import annotations

import re

from backend.engines.counts import EngineCounts

PREFIX = "vllm:spec_decode_num_"
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
        name = found["name"].removeprefix(PREFIX).removesuffix("_total")
        value = float(found["value"])
        if name == "accepted_tokens_per_pos":
            position = int(dict(LABEL.findall(found["labels"] or ""))["position"])
            per_position[position] = per_position.get(position, 0.0) + value
        else:
            totals[name] = totals.get(name, 0.0) + value
    if "drafts" not in totals:
        return None
    width = max(per_position, default=-1) + 1
    return EngineCounts(
        drafts=round(totals["drafts"]),
        drafted_tokens=round(totals.get("draft_tokens", 0.0)),
        accepted_tokens=round(totals.get("accepted_tokens", 0.0)),
        accepted_per_position=[round(per_position.get(k, 0.0)) for k in range(width)],
    )
