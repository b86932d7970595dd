"""The table `bench speed` prints: the summary per configuration (AL, tokens/s, speedups end to end and
decode-only, worst category, lossless), speedup and AL with CIs by category, and the share of tree steps
that branched. Knows only the report's keys (backend/lab/bench.py), not how it was measured."""

from __future__ import annotations

LABEL = 24  # width of the config column: fits `suffix@auto/tree=16`


def format_speed_table(report: dict) -> str:
    plain = report["summary"]["plain@0"]
    lines = [
        f"{report['dtype']}, {precision_label(report['cpu_features'])}; "
        f"{report['prompts']} prompts; plain decoding {plain['tokens_per_s']:.1f} tok/s end to end, "
        f"{plain['decode_tokens_per_s']:.1f} prefill left out (compile "
        f"{plain['compile']}, one-row passes: {plain['graphs']}); "
        f"engine plain vs HF generate {plain['vs_hf_generate']:.2f}x "
        f"(HF greedy equal to ours on {report['hf_generate_lossless']})",
        "",
    ]
    for where in reversed(report["hf_generate_disagreements"]):  # inserted one by one: reversed keeps the order
        lines.insert(
            1,
            f"  HF greedy differs on question {where['question_id']} ({where['category']}): turn "
            f"{where.get('turn')}, token {where.get('position')}, ours {where.get('ours')} vs HF's "
            f"{where.get('theirs')}, logit margin {where.get('margin')}",
        )
    lines += [
        f"  {where['config']} differs from plain decoding on question {where['question_id']}: turn "
        f"{where.get('turn')}, token {where.get('position')}, {where.get('ours')} vs {where.get('theirs')}, "
        f"logit margin {where.get('margin')}"
        for where in report.get("lossless_disagreements", [])
    ]
    configs = {label: row for label, row in report["summary"].items() if label != "plain@0"}
    lines.append(
        f"{'config':<{LABEL}}{'AL':>6}{'tok/s':>8}{'vs plain':>10}{'decode-only':>13}{'vs HF PLD':>11}"
        f"{'worst cat':>11}{'lossless':>10}"
    )
    for label, row in configs.items():
        al = f"{row['al']:.2f}" if row["al"] is not None else "-"
        versus_hf, decode_only = row["geomean_speedup_vs_hf_assisted"], row["geomean_decode_speedup_vs_plain"]
        lines.append(
            f"{label:<{LABEL}}{al:>6}{row['tokens_per_s']:>8.1f}{row['geomean_speedup_vs_plain']:>9.2f}x"
            f"{_times(decode_only):>13}{_times(versus_hf):>11}{row['worst_category_speedup']:>10.2f}x"
            f"{row['lossless']:>10}"
        )
    lines.append("(vs plain: end to end, prefill included; decode-only: drafting and verification alone)")
    lines += ["", "speedup vs plain by category:"]
    categories = sorted({row["category"] for row in report["results"]})
    lines.append(f"{'config':<{LABEL}}" + "".join(f"{c[:11]:>12}" for c in categories))
    for label in configs:
        cells = {r["category"]: r["speedup_vs_plain"] for r in report["results"] if r["config"] == label}
        lines.append(f"{label:<{LABEL}}" + "".join(f"{cells[c]:>11.2f}x" for c in categories))
    lines += ["", "AL by category (95% bootstrap CI over prompts):"]
    lines.append(f"{'config':<{LABEL}}" + "".join(f"{c[:17]:>18}" for c in categories))
    for label in configs:
        cells = {r["category"]: _al_with_ci(r) for r in report["results"] if r["config"] == label}
        lines.append(f"{label:<{LABEL}}" + "".join(f"{cells[c]:>18}" for c in categories))
    branched = {label: row["branched_steps"] for label, row in configs.items() if "branched_steps" in row}
    if branched:
        lines += ["", "tree steps that branched: " + ", ".join(f"{k} {v:.0%}" for k, v in branched.items())]
    return "\n".join(lines)


def precision_label(features: list[str]) -> str:
    """'CPU features amx_bf16 avx512_bf16 avx2' ('none' where none were recorded: off the CPU)."""
    return f"CPU features {' '.join(features) or 'none'}"


def _times(ratio: float | None) -> str:
    return f"{ratio:.2f}x" if ratio else "-"


def _al_with_ci(row: dict) -> str:
    if row["al"] is None:
        return "-"
    return f"{row['al']:.2f} ({row['al_ci_low']:.2f}-{row['al_ci_high']:.2f})"
