"""The report's charts as inline SVG, drawn by matplotlib: nothing to run, fetch or load to view them.

Each chart is one SVG element, ready to sit in an HTML page. Every data mark (a bar, a
point of a line) is drawn inside a group whose id starts with ``mark-``, and
:attr:`Chart.marks` says how many marks were drawn, so a browser test can check that
what it sees rendered is what was plotted. Figures are made without pyplot (no global
state, no GUI backend), and the SVG is deterministic: fixed id salt, no date.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass

import matplotlib
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

_STYLE = {
    "svg.fonttype": "none",  # text stays text: smaller, selectable, drawn in the page's font
    "svg.hashsalt": "tracerl-report",  # ids the same on every run
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
}


@dataclass(frozen=True)
class Chart:
    name: str
    svg: str
    marks: int  # data marks drawn with a visible size: points, and bars of a non-zero value


def _svg(figure: Figure) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None}, bbox_inches="tight")
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # the XML declaration and DOCTYPE do not belong inside HTML


def _figure(width: float = 6.4, height: float = 3.0) -> Figure:
    return Figure(figsize=(width, height), layout="constrained")


def lines(name: str, series: dict[str, Sequence[tuple[float, float]]], *, xlabel: str, ylabel: str) -> Chart:
    """One line with a marker per point for each series (``label -> [(x, y), ...]``)."""
    with matplotlib.rc_context(_STYLE):
        figure = _figure()
        axes = figure.add_subplot()
        marks = 0
        for i, (label, points) in enumerate(series.items()):
            xs, ys = zip(*points)
            line, = axes.plot(xs, ys, marker="o", label=label)
            line.set_gid(f"mark-{name}-{i}")
            marks += len(points)
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # versions and rounds are whole numbers
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        axes.legend(loc="best", frameon=False)
        return Chart(name, _svg(figure), marks)


def bars(name: str, labels: Sequence[str], series: dict[str, Sequence[float]], *, xlabel: str,
         log: bool = False) -> Chart:
    """Horizontal bars, one group per label, one bar per series in it (``series label -> value per label``)."""
    with matplotlib.rc_context(_STYLE):
        figure = _figure(height=max(1.6, 0.32 * len(labels) * len(series) + 0.9))
        axes = figure.add_subplot()
        height = 0.8 / len(series)
        marks = 0
        for i, (label, values) in enumerate(series.items()):
            offsets = [row + (i - (len(series) - 1) / 2) * height for row in range(len(labels))]
            drawn = axes.barh(offsets, values, height=height, label=label)
            for j, patch in enumerate(drawn.patches):
                patch.set_gid(f"mark-{name}-{i}-{j}")
            axes.bar_label(drawn, labels=[f"{v:g}" for v in values], padding=3, fontsize=8)
            marks += sum(1 for v in values if v)
        axes.set_yticks(range(len(labels)), labels)
        axes.invert_yaxis()  # the first label on top, as a table reads
        axes.set_xlabel(xlabel)
        if log:
            axes.set_xscale("symlog")
        if len(series) > 1:
            figure.legend(loc="outside upper center", ncols=len(series), frameon=False)
        return Chart(name, _svg(figure), marks)


def small_multiples(name: str, x: Sequence[float], metrics: dict[str, Sequence[float | None]], *, xlabel: str) -> Chart:
    """One small line chart per metric over the same x (values ``None`` where a row lacks the metric)."""
    with matplotlib.rc_context(_STYLE):
        columns = min(3, len(metrics))
        rows = -(-len(metrics) // columns)
        figure = _figure(height=2.2 * rows)
        marks = 0
        for i, (metric, values) in enumerate(metrics.items()):
            axes = figure.add_subplot(rows, columns, i + 1)
            points = [(xv, v) for xv, v in zip(x, values) if v is not None]
            line, = axes.plot(*zip(*points), marker="o", markersize=3)
            line.set_gid(f"mark-{name}-{i}")
            marks += len(points)
            axes.xaxis.set_major_locator(MaxNLocator(integer=True))
            axes.set_title(metric, fontsize=9)
            axes.set_xlabel(xlabel)
        return Chart(name, _svg(figure), marks)
