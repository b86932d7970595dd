"""llama.cpp's `llama-server` speculative-decoding figures, read from a completion reply's `timings`
object: `draft_n` (draft tokens proposed) and `draft_n_accepted` (those the target accepted), beside
`predicted_n` (tokens generated) (`result_timings` in llama.cpp's tools/server). Every target pass yields
its accepted drafts and one token of its own, so the passes are predicted_n - draft_n_accepted.
Knows nothing about HTTP.
"""

from __future__ import annotations

from backend.engines.counts import ReplyAcceptance


def llamacpp_acceptance(timings: dict) -> ReplyAcceptance | None:
    """One reply's figures from its `timings`, or None where it has no draft counts (speculation off)."""
    drafted, accepted, generated = timings.get("draft_n"), timings.get("draft_n_accepted"), timings.get("predicted_n")
    if drafted is None or accepted is None or not generated:
        return None
    if not 0 <= accepted <= drafted or accepted >= generated:
        raise ValueError(
            f"inconsistent llama.cpp timings: {accepted} accepted of {drafted} drafted, {generated} generated"
        )
    return ReplyAcceptance(generated, generated - accepted, drafted, accepted)
