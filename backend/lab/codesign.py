"""The co-design analysis: the draft-length rules (D = 128/G - 1 and its tile ladder) for a target, next to what was
measured for it, and the chosen drafter and D written out for vLLM, SGLang and TensorRT-LLM.

    G        = query heads per KV head (from the target's config)
    d_start  = 128 / G - 1                       where attention dominates (as an integer: floor, so
                                                 that G x (1 + D) <= 128; backend/lab/draft_rules.py)
    d_ladder = D with G x (1 + D) a multiple of 128 (up to 64), and why it is empty when it is
    predicted speedup(D) = AL(D) / (1 + ρ·D)     ρ and AL(D) measured at batch size 1
    measured speedup(D)  = throughput(D) / throughput(D = 0) at batch size 1
    recommended D per batch size = the D of highest measured throughput there

A serving engine's drafter ("llamacpp/ngram-simple", from `bench sweep --engine`) is compared with the
same engine's plain decoding ("llamacpp/none"), never with SpecScope's; engines report no draft / verify
times, so its ρ and predicted curve are None.

Works on plain dicts (config facts and sweep points); knows nothing about models or storage.
"""

from __future__ import annotations

import json
import math

from backend.drafters import REGISTRY, options_for
from backend.lab.analysis import deployment, newest_per_config, plain_of, predicted_speedup, recommended_d
from backend.lab.draft_rules import draft_rules


def codesign_report(facts: dict, points: list[dict], drafter: str | None = None) -> dict:
    """facts: num_attention_heads and num_key_value_heads at least (num_layers, hidden_size, head_dim for
    the KV-cache cost); points: sweep points (category and split 'all') of the target, newest sweep
    first. With no points, only the rules."""
    heads, kv_heads = facts["num_attention_heads"], facts["num_key_value_heads"]
    hidden = facts.get("hidden_size")
    report = {
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        **draft_rules(heads, kv_heads),
        "num_layers": facts.get("num_layers"),
        "hidden_size": hidden,
        # a config without head_dim splits the hidden size evenly across the query heads
        "head_dim": facts.get("head_dim") or (hidden // heads if hidden else None),
        "head_dim_from_config": bool(facts.get("head_dim")),
        "drafter": drafter,
    }
    # configurations with a variant (a temperature or options a sweep varied) are left out: the rules are
    # about D; so are an engine sweep's failed points (no figures)
    overall = newest_per_config(
        [
            p
            for p in points
            if p.get("category", "all") == "all"
            and p.get("split", "all") == "all"
            and not p.get("variant")
            and p.get("status") != "failed"
        ]
    )
    drafters = sorted({p["drafter"] for p in overall if p["drafter"] != plain_of(p["drafter"])})
    if drafter is None and drafters:  # the fastest at batch size 1, where the curve is drawn (else at any)
        candidates = [p for p in overall if p["drafter"] in drafters]
        at_one = [p for p in candidates if p["batch_size"] == 1] or candidates
        drafter = max(at_one, key=lambda p: p["throughput_tps"])["drafter"]
        report["drafter"] = drafter
    plain = plain_of(drafter or "none")
    chosen = [p for p in overall if p["drafter"] in (drafter, plain)]
    if plain != "none" and any(p["drafter"] == drafter for p in chosen):  # one deployment: the newest measured
        newest = next(p for p in chosen if p["drafter"] == drafter)
        chosen = [p for p in chosen if deployment(p) == deployment(newest)]
    baseline = next((p for p in chosen if p["drafter"] == plain and p["batch_size"] == 1), None)
    single = [p for p in chosen if p["drafter"] == drafter and p["batch_size"] == 1 and _is_int(p["draft_len"])]
    if baseline and single:
        rhos = [p["rho"] for p in single if p.get("rho") is not None and not math.isnan(p["rho"])]
        rho = sum(rhos) / len(rhos) if rhos else None
        report["rho"] = rho
        report["predicted"] = {
            str(p["draft_len"]): predicted_speedup(p["al"], rho, int(p["draft_len"])) if rho is not None else None
            for p in single
        }
        report["measured"] = {str(p["draft_len"]): p["throughput_tps"] / baseline["throughput_tps"] for p in single}
        report["al"] = {str(p["draft_len"]): p["al"] for p in single}
    if chosen:
        report["recommended_d"] = {str(size): d for size, d in recommended_d(chosen).items()}
        # engines take a fixed D (or a D per batch size): the best fixed D measured for each batch size
        fixed = {str(size): d for size, d in recommended_d([p for p in chosen if _is_int(p["draft_len"])]).items()}
        report["recommended_fixed_d"] = fixed
        if drafter and plain != "none":
            report["snippets_note"] = "measured on a serving engine: its configuration is the sweep's launch command"
        elif drafter and fixed.get("1", "0") != "0":
            report["snippets"] = config_snippets(drafter, fixed["1"], fixed)
        elif drafter:
            report["snippets_note"] = "no fixed D beat plain decoding at batch size 1 here, so none is exported"
    return report


def config_snippets(drafter: str, draft_len: str, by_batch_size: dict[str, str]) -> dict[str, str]:
    """The chosen drafter and D (and a D per batch size where the engine takes one) as each engine
    spells them: the drafter's own export (its spec, with its default options) inside each engine's
    command line. SGLang counts the current token in `--speculative-num-draft-tokens` for chains
    (EAGLE with topk 1: steps + 1), hence D + 1 in the drafters' exports."""
    fixed = int(draft_len)
    schedule = {int(b): int(d) for b, d in by_batch_size.items()}
    spec = REGISTRY.get(drafter)
    fragments = spec.export(fixed, schedule, options_for(drafter)) if spec and spec.export else {}
    vllm, sglang, trtllm = (fragments.get(engine) for engine in ("vllm", "sglang", "tensorrt_llm"))
    snippets = {}
    if vllm:
        snippets["vllm"] = f"vllm serve <model> --speculative-config '{json.dumps(vllm)}'"
    if sglang:
        snippets["sglang"] = f"python -m sglang.launch_server --model-path <model> {sglang}"
    if trtllm:
        snippets["tensorrt_llm"] = f"LLM('<model>', speculative_config={trtllm})"
    return snippets


def _is_int(value) -> bool:
    return isinstance(value, int) or (isinstance(value, str) and value.isdigit())
