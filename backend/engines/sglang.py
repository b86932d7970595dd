"""SGLang's per-reply speculative-decoding figures, read from the `meta_info` its native `/generate`
endpoint returns with each reply: `completion_tokens`, `spec_verify_ct` (target verify passes) and, in
recent versions, `spec_draft_token_num` and `spec_accept_token_num` (the request's `spec_verify_ct` and
`spec_accepted_tokens`, counted per verify in sglang/srt/speculative/eagle_info.py and reported by
sglang/srt/managers/tokenizer_manager.py). SGLang's own AL is completion_tokens / spec_verify_ct.
Knows nothing about HTTP.
"""

from __future__ import annotations

from backend.engines.counts import ReplyAcceptance


def sglang_acceptance(meta_info: dict) -> ReplyAcceptance | None:
    """One reply's figures from its `meta_info`, or None where it has no verify count (speculation off)."""
    passes, generated = meta_info.get("spec_verify_ct"), meta_info.get("completion_tokens")
    if not passes or not generated:
        return None
    drafted, accepted = meta_info.get("spec_draft_token_num"), meta_info.get("spec_accept_token_num")
    if accepted is not None and not 0 <= accepted < generated:
        raise ValueError(f"inconsistent SGLang meta_info: {accepted} accepted of {generated} generated")
    return ReplyAcceptance(int(generated), int(passes), drafted, accepted)
