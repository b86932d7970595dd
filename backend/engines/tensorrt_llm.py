"""TensorRT-LLM's speculative-decoding counts, read from the iteration statistics `trtllm-serve` returns
at `/metrics` when started with `enable_iter_perf_stats`: a JSON list, one object per engine iteration
since the previous read, whose `specDecodingStats` hold `numDraftTokens`, `numAcceptedTokens` and
`numRequestsWithDraftTokens` (`SpecDecodingStats` in cpp/include/tensorrt_llm/executor/types.h). Each
request with drafts in an iteration is one drafting step, so AL = 1 + accepted / those requests, the
definition TensorRT-LLM's own acceptance-length tests use. The endpoint hands each iteration out once: a
measurement reads it once before the run (to empty it) and sums what a read after returns. The
counts are not split by draft position. Knows nothing about HTTP.
"""

from __future__ import annotations

from backend.engines.counts import EngineCounts


def tensorrt_llm_counts(iterations: list[dict]) -> EngineCounts:
    """The drafting steps, drafted and accepted tokens summed over the iterations read."""
    drafts = drafted = accepted = 0
    for iteration in iterations:
        stats = iteration.get("specDecodingStats") or {}
        if not stats.get("numDraftTokens"):
            continue
        drafts += int(stats["numRequestsWithDraftTokens"])
        drafted += int(stats["numDraftTokens"])
        accepted += int(stats["numAcceptedTokens"])
    return EngineCounts(drafts, drafted, accepted)
