"""llama.cpp's `llama-server` speculative-decoding figures, read from a completion reply's `timings`
object: `draft_n` (draft tokens proposed) and `draft_n_accepted` (those the target accepted), beside
`predicted_n` (tokens generated) and `predicted_ms` (`result_timings` in llama.cpp's tools/server).

The server does not report how many steps drafted, so the AL here is tokens per target pass:
predicted_n / (predicted_n - draft_n_accepted), each pass yielding its accepted drafts and one token of the
target's own. It equals vLLM's AL when every step drafts, and is lower where some steps draft nothing.
Knows nothing about HTTP.
"""

from __future__ import annotations


def llamacpp_acceptance(timings: dict) -> dict | None:
    """{drafted_tokens, accepted_tokens, acceptance_rate, tokens_per_pass, target_passes} from a reply's
    `timings`, or None where the reply has no draft counts (speculative decoding was off)."""
    drafted, accepted, generated = timings.get("draft_n"), timings.get("draft_n_accepted"), timings.get("predicted_n")
    if drafted is None or accepted is None or not generated:
        return None
    if not 0 <= accepted <= drafted or accepted >= generated:
        raise ValueError(
            f"inconsistent llama.cpp timings: {accepted} accepted of {drafted} drafted, {generated} generated"
        )
    passes = generated - accepted
    return {
        "drafted_tokens": drafted,
        "accepted_tokens": accepted,
        "acceptance_rate": accepted / drafted if drafted else 0.0,
        "target_passes": passes,
        "tokens_per_pass": generated / passes,
    }
