"""Charts as inline SVG, drawn with matplotlib (already a dependency, for `prep inspect --plot`).

matplotlib rather than a JavaScript plotting library: the page needs no script to
show its charts, the SVG is plain markup in the HTML (text stays text, so class names
can be searched on the page), and nothing new is installed. Output is deterministic:
no date in the metadata, a fixed salt for element ids.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

import numpy as np

from prep.report.content import ChartBars, HeatMap

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType  # matplotlib >= 3.8; only the checker needs it

_RC: dict[RcKeyType, Any] = {
    "svg.fonttype": "none",
    "font.size": 9,
    "font.family": "DejaVu Sans",
}  # bundled with matplotlib


def _svg(fig) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    text = buf.getvalue()
    return text[text.index("<svg") :]  # drop the XML declaration and DOCTYPE: the SVG is inline


def class_chart(bars: ChartBars, title: str, salt: str = "classes") -> str:
    """One horizontal bar chart per split, side by side, a row per class (or aggregate)."""
    import matplotlib
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend

    splits = list(bars.values)
    # ids inside an SVG derive from the salt: one salt per chart, or two inline charts could share an id
    with matplotlib.rc_context(_RC | {"svg.hashsalt": salt}):
        height = 1.2 + 0.22 * len(bars.names)
        fig = Figure(figsize=(2.2 + 2.6 * max(1, len(splits)), height), layout="constrained")
        axes = fig.subplots(1, max(1, len(splits)), sharey=True, squeeze=False)[0]
        y = np.arange(len(bars.names))
        for ax, split in zip(axes, splits):
            values = bars.values[split]
            colors = ["#9aa5b1" if i == bars.others else "#3b6ea8" for i in range(len(values))]
            ax.barh(y, values, color=colors, height=0.75)
            ax.set_title(split)
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.set_xlabel("records")
            ax.grid(axis="x", color="#e3e6ea")
            ax.set_axisbelow(True)
            ax.spines[["top", "right"]].set_visible(False)
        axes[0].set_yticks(y, [_short(n) for n in bars.names])
        axes[0].invert_yaxis()
        fig.suptitle(title)
        return _svg(fig)


def heat_map(heat: HeatMap, labels: list[str], title: str, salt: str = "heat") -> str:
    """Classes (rows) by shards (columns), coloured by the distance from the class's mean per shard."""
    import matplotlib
    from matplotlib.figure import Figure

    rows, columns = heat.cells.shape
    # ids inside an SVG derive from the salt: one salt per chart, or two inline charts could share an id
    with matplotlib.rc_context(_RC | {"svg.hashsalt": salt}):
        fig = Figure(figsize=(min(10.0, 3.4 + 0.25 * columns), min(6.5, 1.5 + 0.22 * rows)), layout="constrained")
        ax = fig.subplots()
        # the rule keeps every cell within (-1, 1): such cells stay pale, a break of it shows dark
        limit = max(2.0, float(np.abs(heat.cells).max(initial=0)))
        image = ax.imshow(heat.cells, aspect="auto", interpolation="nearest", cmap="RdBu_r", vmin=-limit, vmax=limit)
        if heat.counts is not None and rows * columns <= 300:  # small enough to print the counts
            for (row, column), value in np.ndenumerate(heat.counts):
                ax.text(column, row, str(value), ha="center", va="center", fontsize=7)
        fig.colorbar(
            image,
            ax=ax,
            label="records - class mean per shard"
            if heat.counts is not None
            else "largest (records - class mean) in the cell",
        )
        if rows <= 40:
            r = heat.row_edges
            names = [
                labels[r[i]] if r[i + 1] - r[i] == 1 else f"{labels[r[i]]} … (+{r[i + 1] - r[i] - 1})"
                for i in range(rows)
            ]
            ax.set_yticks(range(rows), [_short(n) for n in names])
        else:
            ax.set_yticks([0, rows - 1], [f"label {heat.row_edges[0]}", f"label {heat.row_edges[-1] - 1}"])
        ticks = sorted({0, columns - 1} | set(range(0, columns, max(1, columns // 8))))
        ax.set_xticks(ticks, [str(heat.column_edges[t]) for t in ticks])
        ax.set_xlabel("shard index")
        ax.set_title(title)
        return _svg(fig)


def _short(name: str, width: int = 28) -> str:
    name = name if len(name) <= width else name[: width - 1] + "…"
    return name.replace("$", r"\$")  # a "$" would start mathtext
