"""The Co-design chart: ticks only at whole draft lengths, rule lines only inside the measured range, and
the legend above the plot, clear of the x-axis title."""

from __future__ import annotations

from backend.lab.draft_rules import draft_rules
from ui.charts import codesign_figure


def report(heads: int, kv_heads: int, lengths: list[int]) -> dict:
    return {
        **draft_rules(heads, kv_heads),
        "drafter": "ngram",
        "rho": 0.05,
        "predicted": {str(d): 1 + d / 10 for d in lengths},
        "measured": {str(d): 1 + d / 20 for d in lengths},
    }


def test_ticks_are_whole_measured_lengths():
    figure = codesign_figure(report(9, 3, [3, 5, 4]))
    axis = figure.layout.xaxis
    assert axis.tickmode == "array" and list(axis.tickvals) == [3, 4, 5]
    assert all(isinstance(v, int) for v in axis.tickvals)
    assert list(figure.data[0].x) == [3, 4, 5] and list(figure.data[1].y) == [1.15, 1.2, 1.25]


def test_rule_lines_inside_the_measured_range_get_a_line_and_a_tick():
    figure = codesign_figure(report(64, 8, [2, 8, 16, 20]))  # suggested 15, ladder 15, 31, 47, 63
    lines = [shape.x0 for shape in figure.layout.shapes if shape.x0 == shape.x1]
    assert lines == [15]
    assert list(figure.layout.xaxis.tickvals) == [2, 8, 15, 16, 20]
    assert tuple(figure.layout.xaxis.range) == (1.5, 20.5)


def test_legend_sits_above_the_plot():
    legend = codesign_figure(report(9, 3, [2, 4])).layout.legend
    assert legend.orientation == "h" and legend.yanchor == "bottom" and legend.y > 1
