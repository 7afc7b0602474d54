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
CHART_WIDTH, CHART_HEIGHT, MARGIN = 640, 300, 48


def viridis(value: float) -> tuple[int, int, int]:
    """The viridis colour of a value in [0, 1], interpolated linearly between stops."""
    value = min(max(value, 0.0), 1.0)
    for (low, low_rgb), (high, high_rgb) in zip(VIRIDIS, VIRIDIS[1:], strict=False):
        if value <= high:
            t = (value - low) / (high - low)
            return tuple(round(a + (b - a) * t) for a, b in zip(low_rgb, high_rgb, strict=True))
    return VIRIDIS[-1][1]


def text_colour(rgb: tuple[int, int, int]) -> str:
    """Dark text on light cells, white on dark ones (relative luminance above or below 0.4)."""
    red, green, blue = (channel / 255 for channel in rgb)
    return "#111" if 0.2126 * red + 0.7152 * green + 0.0722 * blue > 0.4 else "#fff"


@dataclass(frozen=True)
class AxisLabel:
    """A classifier name on an axis, at its row (y) or column (x) centre."""

    text: str
    x: float
    y: float


@dataclass(frozen=True)
class HeatmapCell:
    """A drawn cell: a_ij with its colours, hover text and the pair gallery it links to (None: diagonal)."""

    x: float
    y: float
    fill: str
    text_fill: str
    text: str
    label: str
    href: str | None


@dataclass(frozen=True)
class Heatmap:
    """Where everything of the heatmap goes."""

    width: float
    height: float
    cell: int
    rows: list[AxisLabel]
    columns: list[AxisLabel]
    cells: list[HeatmapCell]


def accuracy_heatmap(
    names: Sequence[str], accuracy: Sequence[Sequence[float]], labelled: Sequence[Sequence[int]], hrefs
) -> Heatmap:
    """Row i, column j shows a_ij (brighter = higher, as in paper Fig. 3); the diagonal is blank;
    `hrefs(i, j)` is the gallery of pair (i, j)."""
    m = len(names)
    margin = round(min(max((len(name) for name in names), default=4), MAX_NAME_CHARS) * CHAR_WIDTH) + 20
    cells = []
    for i in range(m):
        for j in range(m):
            x, y = margin + j * CELL, margin + i * CELL
            if i == j:
                cells.append(HeatmapCell(x, y, "#eef1f4", "#57606a", "", f"{names[i]}", None))
                continue
            rgb = viridis(accuracy[i][j])
            cells.append(
                HeatmapCell(
                    x,
                    y,
                    f"rgb{rgb}",
                    text_colour(rgb),
                    f"{accuracy[i][j]:.2f}",
                    f"{names[i]} on the images selected with {names[j]}: a = {accuracy[i][j]:.3f} "
                    f"({labelled[i][j]} labelled)",
                    hrefs(i, j),
                )
            )
    centres = [margin + index * CELL + CELL / 2 for index in range(m)]
    return Heatmap(
        width=margin + m * CELL + 4,
        height=margin + m * CELL + 4,
        cell=CELL,
        rows=[AxisLabel(name, margin - 8, centre) for name, centre in zip(names, centres, strict=True)],
        columns=[AxisLabel(name, centre, margin - 8) for name, centre in zip(names, centres, strict=True)],
        cells=cells,
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
class Tick:
    """A tick's position along its axis and its text."""

    at: float
    text: str


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
