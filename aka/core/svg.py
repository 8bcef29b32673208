"""Inline SVG for self-contained HTML reports: escaping, scales, ticks, axes and small charts.

Owns the drawing primitives the HTML reports share (the agent's run report, the bench's suite
report): text escaping, linear and logarithmic scales, tick choice, axes with grid lines, point
markers, lines, a legend, grouped bars, and the ``<svg>`` document around them. Everything is
returned as markup strings. Every text argument is escaped here, so callers pass raw (untrusted)
text; numbers are formatted here. No script and no external asset is ever emitted.

Must not import anything heavy: ``aka.core`` stays importable on a bare CPU install.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "SERIES_COLOURS",
    "Bar",
    "Box",
    "LinearScale",
    "LogScale",
    "Point",
    "Scale",
    "axis_lines",
    "escape",
    "format_si",
    "grouped_bars",
    "legend",
    "linear_ticks",
    "log_ticks",
    "markers",
    "polyline",
    "svg_document",
    "x_grid",
    "x_label",
    "x_tick_labels",
    "y_grid",
    "y_label",
]

SERIES_COLOURS = ("#1f5fa8", "#c0392b", "#2e8b57", "#b35900", "#7b3fa0", "#00838f", "#5d6d7e")
"""Colours for series, in order; distinguishable from each other and readable on white."""

TickFormat = str | Callable[[float], str]
"""A ``str.format`` pattern with one field (``"{:.0f} %"``) or a function of the tick value."""


def escape(text: str) -> str:
    """Escape text for HTML or SVG content and attribute values (quotes included)."""
    return html.escape(text, quote=True)


def _label(fmt: TickFormat, value: float) -> str:
    return fmt.format(value) if isinstance(fmt, str) else fmt(value)


# --------------------------------------------------------------------------------------------
# Geometry
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Box:
    """The canvas of one chart and the margins around its plot area, in SVG user units."""

    width: float = 640.0
    height: float = 240.0
    left: float = 64.0
    right: float = 16.0
    top: float = 18.0
    bottom: float = 40.0

    @property
    def x0(self) -> float:
        """Left edge of the plot area."""
        return self.left

    @property
    def x1(self) -> float:
        """Right edge of the plot area."""
        return self.width - self.right

    @property
    def y_top(self) -> float:
        """Top edge of the plot area."""
        return self.top

    @property
    def y_base(self) -> float:
        """Bottom edge of the plot area (where the x axis is drawn)."""
        return self.height - self.bottom


class Scale(Protocol):
    """Maps a data value to a pixel coordinate."""

    lo: float
    hi: float

    def __call__(self, value: float) -> float:
        """Return the pixel coordinate of ``value`` (clamped to ``[lo, hi]``)."""
        ...


@dataclass(frozen=True)
class LinearScale:
    """Linear map of ``[lo, hi]`` onto ``[px_lo, px_hi]``; values outside are clamped."""

    lo: float
    hi: float
    px_lo: float
    px_hi: float

    def __call__(self, value: float) -> float:
        """Return the pixel coordinate of ``value``."""
        span = self.hi - self.lo
        fraction = 0.0 if span <= 0 else (min(max(value, self.lo), self.hi) - self.lo) / span
        return self.px_lo + fraction * (self.px_hi - self.px_lo)


@dataclass(frozen=True)
class LogScale:
    """Base-10 logarithmic map of ``[lo, hi]`` (both > 0) onto ``[px_lo, px_hi]``, clamped."""

    lo: float
    hi: float
    px_lo: float
    px_hi: float

    def __post_init__(self) -> None:
        if not (0 < self.lo < self.hi):
            raise ValueError(f"a log scale needs 0 < lo < hi, got lo={self.lo}, hi={self.hi}")

    def __call__(self, value: float) -> float:
        """Return the pixel coordinate of ``value``; values <= 0 map to ``lo``."""
        clamped = min(max(value, self.lo), self.hi)
        span = math.log10(self.hi) - math.log10(self.lo)
        fraction = (math.log10(clamped) - math.log10(self.lo)) / span
        return self.px_lo + fraction * (self.px_hi - self.px_lo)


@dataclass(frozen=True)
class Point:
    """One marker: data coordinates and a tooltip."""

    x: float
    y: float
    label: str


@dataclass(frozen=True)
class Bar:
    """One bar of a grouped bar chart: its value (None: no value, drawn as a cross) and tooltip."""

    value: float | None
    label: str


# --------------------------------------------------------------------------------------------
# Ticks and labels
# --------------------------------------------------------------------------------------------


def linear_ticks(top: float, *, integer: bool = False) -> list[float]:
    """Return 0, step, 2*step, ... up to the first multiple of a round step at or above ``top``.

    The step is 1, 2 or 5 times a power of ten, chosen so about four intervals cover ``top``.

    Args:
        top: The largest value to cover (values <= 0 are treated as tiny).
        integer: Round the step up to a whole number (for counts).
    """
    top = max(top, 1e-9)
    raw = top / 4
    power = 10.0 ** math.floor(math.log10(raw))
    step = next(f * power for f in (1.0, 2.0, 5.0, 10.0) if f * power >= raw - 1e-12)
    if integer:
        step = float(max(1, math.ceil(step)))
    count = max(1, math.ceil(top / step - 1e-9))
    return [step * i for i in range(count + 1)]


def log_ticks(lo: float, hi: float) -> list[float]:
    """Return the powers of ten from the one at or below ``lo`` to the one at or above ``hi``.

    The first and last ticks are powers of ten, so the result also serves as a decade-rounded
    range (at least one decade). When it spans two decades or fewer, 2× and 5× ticks are added
    inside each decade so the axis keeps a readable number of labels.

    Raises:
        ValueError: ``lo`` or ``hi`` is not positive.
    """
    if lo <= 0 or hi <= 0:
        raise ValueError(f"log ticks need positive bounds, got lo={lo}, hi={hi}")
    first = math.floor(math.log10(min(lo, hi)) + 1e-9)
    last = math.ceil(math.log10(max(lo, hi)) - 1e-9)
    last = max(last, first + 1)
    steps = (1.0, 2.0, 5.0) if last - first <= 2 else (1.0,)
    ticks = [f * 10.0**e for e in range(first, last) for f in steps]
    return [*ticks, 10.0**last]


_SI_PREFIXES = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def format_si(value: float) -> str:
    """Format a number with an SI prefix and 3 significant digits: ``2.5e12`` -> ``"2.5T"``."""
    magnitude = abs(value)
    for scale, prefix in _SI_PREFIXES:
        if magnitude >= scale:
            return f"{value / scale:.3g}{prefix}"
    return f"{value:.3g}"


def y_grid(
    box: Box, ticks: Sequence[float], to_y: Callable[[float], float], fmt: TickFormat
) -> list[str]:
    """Horizontal grid lines with their labels left of the plot area, one per tick."""
    parts: list[str] = []
    for t in ticks:
        y = to_y(t)
        parts.append(
            f'<line class="grid" x1="{box.x0:.1f}" y1="{y:.1f}" x2="{box.x1:.1f}" y2="{y:.1f}" '
            'stroke="#e3e3e3"/>'
        )
        parts.append(
            f'<text x="{box.x0 - 6:.1f}" y="{y + 4:.1f}" text-anchor="end">'
            f"{escape(_label(fmt, t))}</text>"
        )
    return parts


def x_grid(
    box: Box, ticks: Sequence[float], to_x: Callable[[float], float], fmt: TickFormat
) -> list[str]:
    """Vertical grid lines with their labels below the x axis, one per tick."""
    parts: list[str] = []
    for t in ticks:
        x = to_x(t)
        parts.append(
            f'<line class="grid" x1="{x:.1f}" y1="{box.y_top:.1f}" x2="{x:.1f}" '
            f'y2="{box.y_base:.1f}" stroke="#e3e3e3"/>'
        )
    return parts + x_tick_labels(box, ticks, to_x, fmt)


def x_tick_labels(
    box: Box, ticks: Sequence[float], to_x: Callable[[float], float], fmt: TickFormat
) -> list[str]:
    """Tick labels centred below the x axis (no grid lines)."""
    return [
        f'<text x="{to_x(t):.1f}" y="{box.y_base + 16:.1f}" text-anchor="middle">'
        f"{escape(_label(fmt, t))}</text>"
        for t in ticks
    ]


def axis_lines(box: Box) -> list[str]:
    """The x axis (along the bottom of the plot area) and the y axis (along its left edge)."""
    return [
        f'<line x1="{box.x0:.1f}" y1="{box.y_base:.1f}" x2="{box.x1:.1f}" y2="{box.y_base:.1f}" '
        'stroke="#555"/>',
        f'<line x1="{box.x0:.1f}" y1="{box.y_top:.1f}" x2="{box.x0:.1f}" y2="{box.y_base:.1f}" '
        'stroke="#555"/>',
    ]


def x_label(box: Box, text: str) -> str:
    """The x axis title, centred under the tick labels."""
    return (
        f'<text x="{(box.x0 + box.x1) / 2:.1f}" y="{box.height - 6:.1f}" text-anchor="middle">'
        f"{escape(text)}</text>"
    )


def y_label(box: Box, text: str) -> str:
    """The y axis title, rotated, centred on the left margin."""
    middle = (box.y_top + box.y_base) / 2
    return (
        f'<text x="12" y="{middle:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 12 {middle:.1f})">{escape(text)}</text>'
    )


# --------------------------------------------------------------------------------------------
# Series
# --------------------------------------------------------------------------------------------


def markers(
    points: Sequence[Point],
    to_x: Callable[[float], float],
    to_y: Callable[[float], float],
    *,
    colour: str,
    css_class: str = "pt",
    radius: float = 3.5,
) -> list[str]:
    """One filled circle per point, each with its tooltip as an SVG ``<title>``."""
    return [
        f'<circle class="{escape(css_class)}" cx="{to_x(p.x):.1f}" cy="{to_y(p.y):.1f}" '
        f'r="{radius:.1f}" fill="{escape(colour)}" fill-opacity="0.8">'
        f"<title>{escape(p.label)}</title></circle>"
        for p in points
    ]


def polyline(
    coords: Sequence[tuple[float, float]],
    *,
    colour: str,
    css_class: str,
    title: str | None = None,
    dash: str | None = None,
    width: float = 2.0,
) -> str:
    """A polyline through pixel coordinates (already scaled), with an optional tooltip."""
    points = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    dashed = f' stroke-dasharray="{escape(dash)}"' if dash else ""
    tip = f"<title>{escape(title)}</title>" if title else ""
    return (
        f'<polyline class="{escape(css_class)}" points="{points}" fill="none" '
        f'stroke="{escape(colour)}" stroke-width="{width:.1f}"{dashed}>{tip}</polyline>'
    )


def legend(box: Box, entries: Sequence[tuple[str, str]]) -> list[str]:
    """A one-line legend along the top margin: a coloured square and a name per series.

    Args:
        box: The chart's box; the legend starts at the plot area's left edge.
        entries: ``(name, colour)`` per series, in order.
    """
    parts: list[str] = []
    x = box.x0
    for name, colour in entries:
        parts.append(
            f'<rect class="legend" x="{x:.1f}" y="{box.y_top - 12:.1f}" width="9" height="9" '
            f'fill="{escape(colour)}"/>'
        )
        parts.append(f'<text x="{x + 12:.1f}" y="{box.y_top - 4:.1f}">{escape(name)}</text>')
        x += 24 + 6.5 * len(name)
    return parts


def grouped_bars(
    title: str,
    groups: Sequence[str],
    series: Sequence[tuple[str, str]],
    bars: Sequence[Sequence[Bar]],
    *,
    y_ticks: Sequence[float],
    y_fmt: TickFormat,
    y_title: str,
    x_title: str,
    css_class: str | None = None,
) -> str:
    """A grouped bar chart as a complete ``<svg>``: per group one bar per series.

    The canvas widens with the number of bars (at least 6 units per bar). A bar of value 0 is a
    thin stub, so a zero stays visible; a bar without a value is a small grey cross.

    Args:
        title: The chart's title (its ``<title>``).
        groups: The group labels along x (long labels are shortened; tooltips carry them whole).
        series: ``(name, colour)`` per series, as in the legend.
        bars: ``bars[g][s]``: the bar of series ``s`` in group ``g``.
        y_ticks: Ticks of the y axis from 0; the last one is the top of the axis.
        y_fmt: Format of the y tick labels.
        y_title: The y axis title.
        x_title: The x axis title.
        css_class: A class for the ``<svg>`` element.
    """
    per_group, count = max(1, len(series)), max(1, len(groups))
    box = Box(width=max(640.0, 80.0 + 6.0 * (per_group + 1) * count), height=260.0, top=26.0)
    group_width = (box.x1 - box.x0) / count
    slot = min(18.0, group_width / (per_group + 1))  # one slot of room between groups
    y = LinearScale(0.0, y_ticks[-1], box.y_base, box.y_top)
    body = y_grid(box, y_ticks, y, y_fmt) + axis_lines(box) + legend(box, series)
    every = max(1, math.ceil(count * 40 / (box.x1 - box.x0)))  # labels ~40 units apart
    for g, group in enumerate(groups):
        centre = box.x0 + (g + 0.5) * group_width
        if g % every == 0:
            short = group if len(group) <= 8 else group[:7] + "…"
            body.append(
                f'<text x="{centre:.1f}" y="{box.y_base + 14:.1f}" text-anchor="middle">'
                f"{escape(short)}<title>{escape(group)}</title></text>"
            )
        start = centre - slot * per_group / 2
        for s, bar in enumerate(bars[g]):
            colour = series[s][1] if s < len(series) else SERIES_COLOURS[0]
            body.append(_bar(start + s * slot, slot * 0.85, bar, colour, y, box))
    body += [x_label(box, x_title), y_label(box, y_title)]
    return svg_document(title, body, box, css_class=css_class)


def _bar(x: float, width: float, bar: Bar, colour: str, y: LinearScale, box: Box) -> str:
    tip = f"<title>{escape(bar.label)}</title>"
    if bar.value is None:
        cx, cy = x + width / 2, box.y_base - 4
        return (
            f'<path class="bar-none" d="M{cx - 3:.1f},{cy - 3:.1f} L{cx + 3:.1f},{cy + 3:.1f} '
            f'M{cx - 3:.1f},{cy + 3:.1f} L{cx + 3:.1f},{cy - 3:.1f}" stroke="#999">{tip}</path>'
        )
    top = min(y(bar.value), box.y_base - 1.5)  # a zero stays visible as a stub
    return (
        f'<rect class="bar" x="{x:.1f}" y="{top:.1f}" width="{width:.1f}" '
        f'height="{box.y_base - top:.1f}" fill="{escape(colour)}">{tip}</rect>'
    )


def svg_document(title: str, body: Sequence[str], box: Box, *, css_class: str | None = None) -> str:
    """Wrap chart parts in an ``<svg>`` element sized to ``box``, with ``title`` as its title."""
    cls = f' class="{escape(css_class)}"' if css_class else ""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg"{cls} viewBox="0 0 {box.width:.0f} '
        f'{box.height:.0f}" width="{box.width:.0f}" height="{box.height:.0f}" role="img" '
        f'font-size="11" font-family="system-ui, sans-serif"><title>{escape(title)}</title>'
        + "".join(body)
        + "</svg>"
    )
