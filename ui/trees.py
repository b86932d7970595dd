"""A tree step as the dashboard draws it: the branches listed as text (for a hover), and a figure of
the whole tree: the newest committed token at the left, each drafted node one column per depth, the
kept path green, the other nodes red (rejected) or grey (never reached: an ancestor was rejected),
and the target's own token after the kept path (amber for a correction, violet for the bonus).

Reads a step record's fields only (`drafted_text`, `parents`, `accepted_path`, `target_text`, the
probabilities); the tree's shape comes from backend/core/tree_shape.py, the engine's own definitions.
"""

from __future__ import annotations

import plotly.graph_objects as go

from backend.core.tree_shape import children, depths, has_tree, path_to
from ui.charts import style

KEPT, REJECTED, UNREACHED = "#2ca02c", "#d62728", "#b0b4b9"
CORRECTION, BONUS = "#e08a00", "#6a3fc1"


def is_tree_step(step: dict) -> bool:
    return has_tree(step.get("parents"))


def branches(step: dict) -> list[list[int]]:
    """Every root-to-leaf path of the step's tree, in node order of the leaves."""
    parents = list(step["parents"])
    below = children(parents)
    return [path_to(parents, node) for node in range(len(parents)) if not below[node + 1]]


def node_fates(step: dict) -> list[str]:
    """Per node: "kept" (on the accepted path), "rejected" (its parent was kept or is the root, but
    the target chose otherwise) or "unreached" (an ancestor was rejected)."""
    parents, kept = list(step["parents"]), set(step.get("accepted_path") or [])
    return [
        "kept" if node in kept else ("rejected" if parent < 0 or parent in kept else "unreached")
        for node, parent in enumerate(parents)
    ]


def branches_text(step: dict) -> str:
    """One line per branch (✓ the kept path's branches up to where it stopped), for a hover title."""
    texts, kept = step.get("drafted_text") or [], set(step.get("accepted_path") or [])
    parents = list(step["parents"])
    lines = [
        f"token tree: {len(parents)} nodes, depth {max(depths(parents))}, {len(branches(step))} branches, "
        f"{step['accepted']} kept"
    ]
    for branch in branches(step):
        mark = "✓" if branch and branch[0] in kept else "✗"
        lines.append(f"{mark} " + " · ".join(repr(texts[node]) if node < len(texts) else "?" for node in branch))
    return "\n".join(lines)


def _layout(parents: list[int]) -> dict[int, float]:
    """A y position per node (-1 = the root): leaves one apart in depth-first order, a parent midway
    between its first and last child."""
    below, where, next_leaf = children(parents), {}, [0.0]

    def place(node: int) -> float:
        kids = below[node + 1]
        if not kids:
            where[node] = next_leaf[0]
            next_leaf[0] += 1
        else:
            spots = [place(kid) for kid in kids]
            where[node] = (spots[0] + spots[-1]) / 2
        return where[node]

    place(-1)
    return where


def tree_figure(step: dict) -> go.Figure:
    """The step's tree left to right by depth; hover a node for its text, fate and probabilities."""
    parents, texts = list(step["parents"]), step.get("drafted_text") or []
    fates, depth, y = node_fates(step), depths(parents), _layout(parents)
    path = list(step.get("accepted_path") or [])
    figure = go.Figure()
    edges_x: list[float | None] = []
    edges_y: list[float | None] = []
    for node, parent in enumerate(parents):
        edges_x += [depth[parent] if parent >= 0 else 0, depth[node], None]
        edges_y += [y[parent], y[node], None]
    figure.add_trace(
        go.Scatter(
            x=edges_x, y=edges_y, mode="lines", line=dict(color="#c8ccd0", width=1), hoverinfo="skip", showlegend=False
        )
    )
    colour = {"kept": KEPT, "rejected": REJECTED, "unreached": UNREACHED}
    for fate in ("kept", "rejected", "unreached"):
        nodes = [node for node in range(len(parents)) if fates[node] == fate]
        figure.add_trace(
            go.Scatter(
                x=[depth[node] for node in nodes],
                y=[y[node] for node in nodes],
                mode="markers+text",
                marker=dict(size=12, color=colour[fate]),
                text=[texts[node] if node < len(texts) else "?" for node in nodes],
                textposition="top center",
                hovertext=[_node_hover(step, node, fate) for node in nodes],
                hoverinfo="text",
                name=f"{fate} draft",
            )
        )
    last = path[-1] if path else -1
    bonus = not children(parents)[last + 1]
    figure.add_trace(
        go.Scatter(
            x=[len(path) + 1],
            y=[y[last]],
            mode="markers+text",
            marker=dict(size=14, symbol="diamond", color=BONUS if bonus else CORRECTION),
            text=[step.get("target_text", "")],
            textposition="top center",
            hovertext=[f"the target's {'bonus' if bonus else 'correction'}: p={step.get('target_token_prob', 0):.3f}"],
            hoverinfo="text",
            name="target's bonus" if bonus else "target's correction",
        )
    )
    figure.add_trace(
        go.Scatter(
            x=[0],
            y=[y[-1]],
            mode="markers",
            marker=dict(size=10, color="#444"),
            hovertext=["the newest committed token"],
            hoverinfo="text",
            name="committed",
        )
    )
    style(figure, f"Step {step['index']}: token tree of {len(parents)} drafts", 320, "depth")
    figure.update_yaxes(visible=False)
    figure.update_xaxes(tickmode="linear", tick0=0, dtick=1)
    return figure


def _node_hover(step: dict, node: int, fate: str) -> str:
    target = step.get("target_probs") or []
    draft = step.get("draft_probs") or []
    parts = [f"node {node + 1}: {fate}"]
    if node < len(target) and target[node] is not None:
        parts.append(f"target p={target[node]:.3f}")
    if node < len(draft) and draft[node] is not None:
        parts.append(f"drafter's confidence={draft[node]:.3f}")
    return " · ".join(parts)
