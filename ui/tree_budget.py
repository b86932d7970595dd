"""AL against the tree budget on the Acceptance page: which acceptance groups form its lines (a drafter
and D measured with token trees, its chain included as budget 0) and the figure, drawn with the colours,
dashes and layout every chart shares (ui/charts.py). Knows nothing about how the groups are counted: the
worker's acceptance groups carry AL, its CI, the drafter without its variant and the tree budget."""

from __future__ import annotations

import plotly.graph_objects as go

from backend.lab.labels import drafter_label, variant_label
from ui.charts import REPEAT_DASHES, al_trace, drafter_colour, repeats, style


def groups_by_budget(groups: list[dict]) -> list[dict]:
    """The groups the AL-vs-tree-budget figure draws: those of every drafter and D measured with a tree
    budget > 0, chains (budget 0) included, that varied nothing but the tree budget (a group named
    'ngram [T=0.7, tree=16]' varied its temperature too, and is left to the AL vs D table)."""
    plain = [
        g for g in groups if g["drafter"] == drafter_label(g["base_drafter"], variant_label(0.0, {}, g["tree_budget"]))
    ]
    treed = {(g["base_drafter"], str(g["draft_len"])) for g in plain if g["tree_budget"] > 0}
    return [g for g in plain if (g["base_drafter"], str(g["draft_len"])) in treed]


def al_figure(groups: list[dict]) -> go.Figure:
    """AL against the tree budget (0 = a chain), one line per drafter and D, coloured by drafter (a second
    D of one drafter dashed), with the 95% bootstrap CI as error bars (groups_by_budget picks them)."""
    figure = go.Figure()
    lines = sorted({(g["base_drafter"], str(g["draft_len"])) for g in groups})
    for (drafter, draft_len), repeat in zip(lines, repeats([drafter for drafter, _ in lines]), strict=True):
        line = sorted(
            (g for g in groups if (g["base_drafter"], str(g["draft_len"])) == (drafter, draft_len)),
            key=lambda g: g["tree_budget"],
        )
        name = f"{drafter} D={draft_len}"
        look = dict(color=drafter_colour(drafter), dash=REPEAT_DASHES[repeat % len(REPEAT_DASHES)])
        x = [g["tree_budget"] for g in line]
        figure.add_trace(al_trace(name, x, line, f"{name} tree budget %{{x}}", line=look))
    style(
        figure,
        "AL vs tree budget (95% bootstrap CI)",
        320,
        "tree budget: nodes verified per step (0 = chain)",
        "AL = 1 + accepted / drafting steps",
    )
    budgets = sorted({g["tree_budget"] for g in groups})
    return figure.update_xaxes(tickmode="array", tickvals=budgets, tickformat="d")
