"""What the Live and Compare pages say about a run besides its tokens: a lane's name (its drafter with its
tree budget, as the store names the run), how its speedup was measured
and when, whether its output matches plain decoding, how warm its drafter's memory was, and how a
stream that did not finish ended (the Stop button, or a rerun of the page).

A Streamlit rerun ends the script, and with it a stream in progress: any widget changed while a run
streams does that. The pages mark a stream as running when it starts and as over when it ends; a
mark still there on the next run means the stream was cut short, by Stop (which says so first) or
else by a rerun, and the page says which instead of dropping the run silently. Streamlit's own
"Stop" in its running indicator would end the script the same way without saying so; the pages hide
that one, so the Stop beside Run is the only one.

Knows nothing about the worker beyond the records it streams and the runs it stores.
"""

from __future__ import annotations

from datetime import datetime

import streamlit as st

from backend.lab.labels import drafter_label, variant_label

HOW_MEASURED = {
    "interleaved": "decoded in this job, interleaved token for token with the drafting lanes",
    "before": "decoded in this job just before the lanes (the rollout replay scores them against)",
    "plain lane": "this job's plain lane",
}
INTERRUPTED = (
    "The run was interrupted: changing a setting (or leaving the page) while it streams reruns the page, "
    "which ends the stream. What had arrived is kept below; press Run to start again."
)
STOPPED = "Stopped before the end."
# Streamlit's running indicator offers its own Stop, which ends the script without the page knowing
HIDE_STREAMLIT_STOP = (
    '<style>[data-testid="stStatusWidget"]:has([data-testid="stStatusWidgetRunningIcon"]) button '
    "{ display: none; }</style>"
)


def lane_name(spec: dict) -> str:
    """A lane's drafter as every table and chart names it: 'ngram [tree=16]' for a lane with a tree budget,
    'eagle3 [conf=0.2]' with a confidence stop, 'ngram' for a plain chain (the variant its stored run gets:
    RunRequest.plan)."""
    variant = variant_label(0.0, {}, spec.get("tree_budget", 0), spec.get("min_confidence", 0.0))
    return drafter_label(spec["drafter"], variant)


def speedup_text(speedup: float | None) -> str:
    return f"{speedup:.2f}x" if speedup else "…"


def moment(iso: str | None) -> str:
    """An ISO 8601 time as 'YYYY-MM-DD HH:MM:SS UTC' (stored times are UTC)."""
    if not iso:
        return "an unknown time"
    return datetime.fromisoformat(str(iso)).strftime("%Y-%m-%d %H:%M:%S UTC")


def baseline_note(summary: dict) -> str:
    """How and when the plain decoding a speedup divides by was measured."""
    if not summary.get("baseline_tokens_per_s"):
        return "No speedup: plain decoding was not measured in this job."
    how = HOW_MEASURED.get(summary.get("baseline_how"), "decoded in this job")
    return (
        f"Speedup over plain decoding of the same prompt and settings, {how}, at "
        f"{moment(summary.get('baseline_measured_at'))}: {summary['baseline_tokens_per_s']:.1f} tokens/s."
    )


def stored_speedup_note(run: dict, baseline_run: dict | None) -> str:
    """The speedup of a stored run, opened again: not measured now, so said to be estimated."""
    note = f"Estimated from a stored run of {moment(run.get('created_at'))}"
    if baseline_run is not None:
        return f"{note}; its plain decoding was measured in the same job at {moment(baseline_run.get('finished_at'))}."
    return f"{note}; when its plain decoding was measured was not recorded."


def shown_token(text: str | None) -> str:
    """A token for a sentence: quoted, with newlines and tabs visible; None is the end of the output."""
    if text is None:
        return "the end of the output"
    return "“" + text.replace("\n", "↵").replace("\t", "→") + "”"


def identity_note(identity: dict | None) -> tuple[str, str] | None:
    """(kind, sentence) on whether the output equals plain decoding token for token; kind is
    success, warning or info. None when there was no plain run to compare with."""
    if not identity:
        return None
    if identity["identical"]:
        if identity["expected"]:
            return "success", f"Token-identical to plain decoding ({identity['tokens']} tokens)."
        return "info", f"Same {identity['tokens']} tokens as plain decoding, though sampling does not promise it."
    where = (
        f"first differs at output token {identity['index']}: {shown_token(identity['lane_text'])} here, "
        f"{shown_token(identity['plain_text'])} in plain decoding"
    )
    if identity["expected"]:
        return "warning", f"Not identical to plain decoding: it {where}."
    return (
        "info",
        f"Sampling (T > 0) is lossless in distribution, not token by token, so this output need not match "
        f"plain decoding with the same seed; it {where}.",
    )


def identity_cell(identity: dict | None) -> str:
    """The same verdict, short, for a table cell."""
    if not identity:
        return "-"
    if identity["identical"]:
        return "identical"
    return f"differs at {identity['index']}" + ("" if identity["expected"] else " (T > 0: not expected)")


MEMORY_POLICY = (
    "Drafter memory: a drafter that learns across requests (suffix's global tree of earlier outputs) is "
    "copied for every lane at the start of the job, so all lanes start from the same snapshot and none "
    "sees another's output; this job's outputs are added to it after the job, so the next run starts warmer."
)


def memory_note(start: dict | None) -> str | None:
    """How warm the drafter's memory across requests was when the run started; None if it has none."""
    memory = (start or {}).get("memory")
    if memory is None:
        return None
    if not memory["sequences"]:
        return "global suffix tree empty at the start (cold)"
    return f"global suffix tree warm at the start: {memory['sequences']} earlier output(s), {memory['tokens']} tokens"


def memory_cell(start: dict | None) -> str:
    memory = (start or {}).get("memory")
    if memory is None:
        return "-"
    return f"{memory['sequences']} outputs, {memory['tokens']} tokens" if memory["sequences"] else "empty"


def stream_buttons(prefix: str, run_column, stop_column, run_label: str, disabled: bool = False) -> bool:
    """The Run and Stop buttons; True when Run was pressed (Run is off while `disabled`, e.g. an input is
    out of range). Call `previous_stream_end` first."""
    stop_column.button(
        "Stop",
        key=f"{prefix}_stop",
        width="stretch",
        on_click=_mark_stopped,
        args=(prefix,),
        help="Stops the run: the stream closes and the worker cancels the job.",
    )
    st.html(HIDE_STREAMLIT_STOP)
    return run_column.button(
        run_label,
        type="primary",
        key=f"{prefix}_run",
        width="stretch",
        disabled=disabled,
        on_click=_end_mark,
        args=(prefix,),
    )


def stream_started(prefix: str) -> None:
    st.session_state[f"{prefix}_streaming"] = True


def stream_ended(prefix: str) -> None:
    _end_mark(prefix)


def previous_stream_end(prefix: str) -> str | None:
    """How the page's last stream ended if it did not end by itself: "stopped" (the Stop button) or
    "interrupted" (any other rerun); None if it ended by itself or none was running."""
    state = st.session_state
    running = state.pop(f"{prefix}_streaming", False)
    stopped = state.pop(f"{prefix}_stopped", False)
    if not running:
        return None
    return "stopped" if stopped else "interrupted"


def show_end(slot, ended: str | None) -> None:
    if ended == "interrupted":
        slot.warning(INTERRUPTED)
    elif ended == "stopped":
        slot.warning(STOPPED)


def _mark_stopped(prefix: str) -> None:
    st.session_state[f"{prefix}_stopped"] = True


def _end_mark(prefix: str) -> None:
    """A new run replaces the last one: nothing to say about how that one ended."""
    st.session_state.pop(f"{prefix}_streaming", None)
    st.session_state.pop(f"{prefix}_stopped", None)
