"""Geometry of the charts the pages draw as inline SVG (templates/charts.html): no JavaScript and no plotting
library at run time.

The pairwise accuracy heatmap of A (paper Fig. 3), each cell linking to its pair's gallery, and line charts
for the ranking's history and its stability versus k (paper Fig. 5).
"""

from collections.abc import Sequence
from dataclasses import dataclass

VIRIDIS = (
    (0.0, (68, 1, 84)),
    (0.25, (59, 82, 139)),
    (0.5, (33, 145, 140)),
    (0.75, (94, 201, 98)),
    (1.0, (253, 231, 37)),
)
"""Stops of matplotlib's viridis colour map: perceptually uniform, readable in greyscale."""
SERIES_COLOURS = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#000000", "#b8a000")
"""Okabe–Ito colours (yellow darkened for contrast): told apart with common colour-vision deficiencies."""
DASHES = ("", "6 3", "2 3", "8 3 2 3")
"""Dash patterns that tell apart series beyond the eighth colour."""
CELL = 52
CHAR_WIDTH = 8
MAX_NAME_CHARS = 24
SLANT = 0.7072
"""cos 45° = sin 45°: how far a column name slanted at 45° reaches across and up per unit of length."""
LEGEND_GAP, LEGEND_HEIGHT = 16, 12
CHART_WIDTH, CHART_HEIGHT, MARGIN = 640, 300, 48


def viridis(value: float) -> tuple[int, int, int]:
    """The viridis colour of a value in [0, 1], interpolated linearly between stops."""
    value = min(max(value, 0.0), 1.0)
    for (low, low_rgb), (high, high_rgb) in zip(VIRIDIS, VIRIDIS[1:], strict=False):
        if value <= high:
            t = (value - low) / (high - low)
            red, green, blue = (round(a + (b - a) * t) for a, b in zip(low_rgb, high_rgb, strict=True))
            return red, green, blue
    return VIRIDIS[-1][1]


def relative_luminance(rgb: tuple[int, int, int]) -> float:
    """L = 0.2126 R + 0.7152 G + 0.0722 B over linearised sRGB channels (WCAG 2.2, "relative luminance")."""
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in (v / 255 for v in rgb)]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast_ratio(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    """(L_lighter + 0.05) / (L_darker + 0.05) (WCAG 2.2, "contrast ratio")."""
    low, high = sorted((relative_luminance(a), relative_luminance(b)))
    return (high + 0.05) / (low + 0.05)


BLACK, WHITE = (0, 0, 0), (255, 255, 255)
BLANK = "#eef1f4"
"""The fill of a cell without a value: the diagonal, a pair without labels."""


def text_colour(rgb: tuple[int, int, int]) -> str:
    """Black or white, whichever contrasts more with the cell (at least 4.58:1 on any colour, above WCAG
    AA's 4.5:1 for small text)."""
    return "#000" if contrast_ratio(rgb, BLACK) >= contrast_ratio(rgb, WHITE) else "#fff"


@dataclass(frozen=True)
class AxisLabel:
    """A classifier name on an axis, at its row (y) or column (x) centre."""

    text: str
    x: float
    y: float


@dataclass(frozen=True)
class HeatmapCell:
    """A drawn cell: a_ij with its colours, hover text and the pair gallery it links to (None: diagonal).
    The label starts with the cell's visible text, so that speech input finds the link by what it shows."""

    x: float
    y: float
    fill: str
    text_fill: str
    text: str
    label: str
    href: str | None


@dataclass(frozen=True)
class Tick:
    """A tick's position along its axis and its text."""

    at: float
    text: str


@dataclass(frozen=True)
class LegendStop:
    """A stop of the legend's gradient: offset in [0, 1] along it and its colour."""

    offset: float
    colour: str


@dataclass(frozen=True)
class Legend:
    """The colour scale under the matrix: a gradient bar from a = 0 to a = 1 with ticks."""

    x: float
    y: float
    width: float
    height: int
    stops: list[LegendStop]
    ticks: list[Tick]


@dataclass(frozen=True)
class Heatmap:
    """Where everything of the heatmap goes."""

    width: float
    height: float
    cell: int
    rows: list[AxisLabel]
    columns: list[AxisLabel]
    cells: list[HeatmapCell]
    legend: Legend


def shown_name(name: str) -> str:
    """A classifier's name as the axes show it: at most MAX_NAME_CHARS characters."""
    return name if len(name) <= MAX_NAME_CHARS else name[: MAX_NAME_CHARS - 1] + "…"


def accuracy_heatmap(
    names: Sequence[str],
    accuracy: Sequence[Sequence[float | None]],
    labelled: Sequence[Sequence[int]],
    hrefs,
) -> Heatmap:
    """Row i, column j shows a_ij (brighter = higher, as in paper Fig. 3); the diagonal is blank, and so is
    a pair without labels (a_ij None), which still links to its gallery; `hrefs(i, j)` is the gallery of
    pair (i, j). Column names slant up at 45°: the top margin and the
    right edge make room for the longest one and the last one, and the colour scale sits below."""
    m = len(names)
    widths = [len(shown_name(name)) * CHAR_WIDTH for name in names]
    left = max(widths, default=4 * CHAR_WIDTH) + 20
    top = round(max(widths, default=0) * SLANT) + 16
    cells = []
    for i in range(m):
        for j in range(m):
            x, y = left + j * CELL, top + i * CELL
            value = accuracy[i][j]
            if i == j:
                cells.append(HeatmapCell(x, y, BLANK, "#57606a", "", names[i], None))
                continue
            if value is None:
                label = f"no labels yet: {names[i]} on the images selected with {names[j]}"
                cells.append(HeatmapCell(x, y, BLANK, "#57606a", "", label, hrefs(i, j)))
                continue
            rgb = viridis(value)
            text = f"{value:.2f}"
            label = f"{text}: {names[i]} on the images selected with {names[j]}, {labelled[i][j]} labelled"
            cells.append(HeatmapCell(x, y, f"rgb{rgb}", text_colour(rgb), text, label, hrefs(i, j)))
    centres = [index * CELL + CELL / 2 for index in range(m)]
    right = max([left + m * CELL, *(left + c + w * SLANT + 8 for c, w in zip(centres, widths, strict=True))])
    legend_y = top + m * CELL + LEGEND_GAP
    legend = Legend(
        x=left,
        y=legend_y,
        width=max(m * CELL, 4 * CELL),
        height=LEGEND_HEIGHT,
        stops=[LegendStop(offset, "rgb" + str(rgb)) for offset, rgb in VIRIDIS],
        ticks=[Tick(left + value * max(m * CELL, 4 * CELL), f"{value:g}") for value in (0, 0.5, 1)],
    )
    return Heatmap(
        width=round(max(right, legend.x + legend.width + 8)),
        height=legend_y + LEGEND_HEIGHT + 22,
        cell=CELL,
        rows=[AxisLabel(shown_name(n), left - 8, top + c) for n, c in zip(names, centres, strict=True)],
        columns=[AxisLabel(shown_name(n), left + c, top - 8) for n, c in zip(names, centres, strict=True)],
        cells=cells,
        legend=legend,
    )


@dataclass(frozen=True)
class Series:
    """One line of a line chart; a y of None leaves a gap."""

    label: str
    x: Sequence[float]
    y: Sequence[float | None]


@dataclass(frozen=True)
class DrawnSeries:
    """A series as polylines (one per run without gaps) in its colour and dash pattern."""

    label: str
    colour: str
    dash: str
    runs: list[str]
    dots: list[tuple[float, float]]


@dataclass(frozen=True)
class LineChart:
    """Where everything of a line chart goes."""

    width: int
    height: int
    left: int
    top: int
    plot_width: int
    plot_height: int
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    series: list[DrawnSeries]


def series_style(index: int) -> tuple[str, str]:
    """(colour, dash pattern) of the index-th series."""
    return SERIES_COLOURS[index % len(SERIES_COLOURS)], DASHES[index // len(SERIES_COLOURS) % len(DASHES)]


def line_chart(
    series: Sequence[Series], y_range: tuple[float, float], y_ticks: Sequence[float], descending: bool = False
) -> LineChart:
    """Lines over a shared x axis; `descending` puts the lowest y on top (ranks: 1 at the top)."""
    xs = [x for line in series for x in line.x]
    x_low, x_high = (min(xs), max(xs)) if xs else (0.0, 1.0)
    y_low, y_high = y_range
    plot_width, plot_height = CHART_WIDTH - 2 * MARGIN, CHART_HEIGHT - 2 * MARGIN

    def px(x: float) -> float:
        return round(MARGIN + (x - x_low) / ((x_high - x_low) or 1) * plot_width, 1)

    def py(y: float) -> float:
        share = (y - y_low) / ((y_high - y_low) or 1)
        return round(MARGIN + (share if descending else 1 - share) * plot_height, 1)

    drawn = []
    for index, line in enumerate(series):
        colour, dash = series_style(index)
        runs = _runs(line)
        drawn.append(
            DrawnSeries(
                label=line.label,
                colour=colour,
                dash=dash,
                runs=[" ".join(f"{px(x)},{py(y)}" for x, y in run) for run in runs if len(run) > 1],
                dots=[(px(run[0][0]), py(run[0][1])) for run in runs if len(run) == 1],
            )
        )
    x_ticks = sorted({x_low, round((x_low + x_high) / 2), x_high}) if xs else []
    return LineChart(
        width=CHART_WIDTH,
        height=CHART_HEIGHT,
        left=MARGIN,
        top=MARGIN,
        plot_width=plot_width,
        plot_height=plot_height,
        x_ticks=[Tick(px(x), f"{x:g}") for x in x_ticks],
        y_ticks=[Tick(py(y), f"{y:g}") for y in y_ticks],
        series=drawn,
    )


def _runs(line: Series) -> list[list[tuple[float, float]]]:
    """The line's points split where y is None."""
    runs: list[list[tuple[float, float]]] = [[]]
    for x, y in zip(line.x, line.y, strict=True):
        if y is None:
            runs.append([])
        else:
            runs[-1].append((x, y))
    return [run for run in runs if run]
