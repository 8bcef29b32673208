"""The inline SVG charts of a suite report: rooflines, S per shape, weight against score.

Owns reading ``SuiteRun.ceilings`` (a plain dict in ``results.json``), the choice of the compute
ceiling drawn on an operator's roofline, and the three charts of ``report.html``:

- ``roofline_chart``: per operator, log-log; arithmetic intensity (FLOP/byte) on x, achieved FLOP/s
  on y, the bandwidth slope and one compute ceiling, one marker per (shape, entrant);
- ``shape_score_chart``: per operator, S per shape as grouped bars, one bar per entrant;
- ``weight_score_chart``: the suite, one dot per (operator, entrant) at (weight, S_op on tune).

The compute ceiling drawn is the rate of the unit recorded with the shapes (``compute_unit``); for
results without one it is inferred from the ``T_sol`` the scorer priced (see ``compute_ceiling``),
and the caption says which. Drawing primitives
come from ``aka.core.svg``, which escapes every text. Must not import torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from aka.bench.suite_result import OperatorInfo, ShapeScore, SuiteRun
from aka.core.svg import (
    SERIES_COLOURS,
    Bar,
    Box,
    LinearScale,
    LogScale,
    Point,
    axis_lines,
    escape,
    format_si,
    grouped_bars,
    legend,
    linear_ticks,
    log_ticks,
    markers,
    polyline,
    svg_document,
    x_grid,
    x_label,
    y_grid,
    y_label,
)

__all__ = [
    "Ceilings",
    "ComputeCeiling",
    "compute_ceiling",
    "entrant_colours",
    "op_shapes",
    "parse_ceilings",
    "roofline_chart",
    "shape_failed",
    "shape_score_chart",
    "weight_score_chart",
]

_SPLIT_ORDER = {"tune": 0, "holdout": 1, "smoke": 2}


@dataclass(frozen=True)
class Ceilings:
    """The ceilings T_sol was priced on, as far as ``results.json`` records them."""

    bandwidth_bytes_per_s: float
    rates_flops_per_s: dict[str, float]
    launch_floor_us: float | None
    source: str


@dataclass(frozen=True)
class ComputeCeiling:
    """The compute ceiling drawn on an operator's roofline, and how it was chosen."""

    unit: str
    rate_flops_per_s: float
    how: str


def _number(value: object) -> float | None:
    """A finite positive number from JSON, else None (booleans are not numbers here)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def parse_ceilings(raw: Mapping[str, object] | None) -> Ceilings | None:
    """Read ``SuiteRun.ceilings``; None when it is absent or has no usable bandwidth."""
    if not raw:
        return None
    bandwidth = _number(raw.get("bandwidth_bytes_per_s"))
    if bandwidth is None:
        return None
    rates_raw = raw.get("rates_flops_per_s")
    rates: dict[str, float] = {}
    if isinstance(rates_raw, Mapping):
        for unit, value in rates_raw.items():
            rate = _number(value)
            if rate is not None:
                rates[str(unit)] = rate
    source = raw.get("source")
    return Ceilings(
        bandwidth_bytes_per_s=bandwidth,
        rates_flops_per_s=rates,
        launch_floor_us=_number(raw.get("launch_floor_us")),
        source=source if isinstance(source, str) else "unknown",
    )


def entrant_colours(entrants: Sequence[str]) -> dict[str, str]:
    """One colour per entrant, stable across every chart of a report."""
    return {e: SERIES_COLOURS[i % len(SERIES_COLOURS)] for i, e in enumerate(entrants)}


def shape_failed(shape: ShapeScore) -> bool:
    """Whether the entrant failed this shape (it then scores 0; see ``ShapeScore.s_or_zero``)."""
    return shape.correct is False or shape.verdict not in ("accepted", "not_measured")


def op_shapes(run: SuiteRun, op: str) -> list[ShapeScore]:
    """One record per (split, shape id) of ``op`` over all entrants: tune, holdout, smoke order.

    T_sol, bound, FLOPs and bytes describe the shape, not the entrant, so any entrant's record
    serves; the first one found is kept.
    """
    seen: dict[tuple[str, str], ShapeScore] = {}
    for result in run.results:
        if result.op != op:
            continue
        for shape in result.shapes:
            seen.setdefault((shape.split, shape.shape_id), shape)
    order = list(seen)
    return [
        seen[k] for k in sorted(order, key=lambda k: (_SPLIT_ORDER.get(k[0], 3), order.index(k)))
    ]


def compute_ceiling(shapes: Sequence[ShapeScore], ceilings: Ceilings) -> ComputeCeiling | None:
    """Choose the compute ceiling of an operator's dominant unit from the T_sol it was priced at.

    A compute-bound shape has ``T_sol = FLOPs / rate``, so ``FLOPs / T_sol`` is the rate of its
    unit (of its unit mix): the unit whose rate is nearest (in log) gets the shape's FLOPs as
    votes, and the unit with most votes wins. Without a compute-bound shape, ``FLOPs / T_sol`` only
    bounds the rate from below; the slowest unit at or above every bound is chosen.

    Returns:
        The unit, its rate and how it was chosen; None when the ceilings have no rates or no shape
        has FLOPs and a T_sol.
    """
    recorded: dict[str, float] = {}
    for shape in shapes:
        if shape.compute_unit and shape.compute_unit in ceilings.rates_flops_per_s:
            recorded[shape.compute_unit] = recorded.get(shape.compute_unit, 0.0) + (
                shape.flops or 0
            )
    if recorded:
        unit = max(recorded, key=lambda u: recorded[u])
        how = "the unit recorded with the shapes (the one whose FLOPs take longest at peak)"
        return ComputeCeiling(unit, ceilings.rates_flops_per_s[unit], how)
    rates = sorted(ceilings.rates_flops_per_s.items(), key=lambda kv: kv[1])
    votes: dict[str, float] = {}
    lower_bound = 0.0
    for shape in shapes:
        if not shape.flops or not shape.t_sol_us or shape.flops <= 0 or shape.t_sol_us <= 0:
            continue
        rate = shape.flops / (shape.t_sol_us * 1e-6)
        if shape.bound == "compute" and rates:
            unit = min(rates, key=lambda kv: abs(math.log(kv[1] / rate)))[0]
            votes[unit] = votes.get(unit, 0.0) + shape.flops
        else:
            lower_bound = max(lower_bound, rate)
    if not rates or (not votes and lower_bound == 0.0):
        return None
    if votes:
        unit = max(votes, key=lambda u: votes[u])
        how = "the unit whose rate matches T_sol of the operator's compute-bound shapes"
        return ComputeCeiling(unit, ceilings.rates_flops_per_s[unit], how)
    fitting = [kv for kv in rates if kv[1] >= lower_bound * (1 - 1e-9)]
    unit, rate = fitting[0] if fitting else rates[-1]
    how = "no shape is compute-bound: the slowest unit consistent with every shape's T_sol"
    return ComputeCeiling(unit, rate, how)


# --------------------------------------------------------------------------------------------
# Roofline
# --------------------------------------------------------------------------------------------


def _roofline_points(run: SuiteRun, op: str) -> dict[str, list[Point]]:
    """Per entrant, one point per timed, passed shape with FLOPs and bytes."""
    out: dict[str, list[Point]] = {}
    for entrant in run.entrants:
        result = run.result(entrant, op)
        for shape in result.shapes if result is not None else []:
            lat, flops, nbytes = shape.latency_us, shape.flops, shape.bytes
            if shape_failed(shape) or not lat or not flops or not nbytes:
                continue
            if lat <= 0 or flops <= 0 or nbytes <= 0:
                continue
            intensity, achieved = flops / nbytes, flops / (lat * 1e-6)
            s_text = "" if shape.s is None else f", S = {shape.s:.3f}"
            label = (
                f"{entrant}, shape {shape.shape_id} ({shape.split}): {format_si(intensity)} "
                f"FLOP/B, {format_si(achieved)}FLOP/s, {lat:.2f} µs{s_text}"
            )
            out.setdefault(entrant, []).append(Point(intensity, achieved, label))
    return out


def _roof_coords(
    bandwidth: float, peak: float | None, xs: LogScale, ys: LogScale
) -> list[tuple[float, float]]:
    """Pixel coordinates of min(bandwidth·x, peak) across the plot, clipped to it."""
    cap = ys.hi if peak is None else min(peak, ys.hi)
    knee = cap / bandwidth  # where the slope meets the cap
    coords: list[tuple[float, float]] = []
    start = max(xs.lo, ys.lo / bandwidth)  # the slope enters through the bottom or the left
    if start < min(knee, xs.hi):
        coords.append((start, bandwidth * start))
    if knee < xs.hi:
        coords.append((max(knee, xs.lo), cap))
        if peak is not None:
            coords.append((xs.hi, cap))
    else:
        coords.append((xs.hi, bandwidth * xs.hi))
    return [(xs(x), ys(y)) for x, y in coords]


def roofline_chart(
    run: SuiteRun, op: OperatorInfo, ceilings: Ceilings | None
) -> tuple[str, str] | None:
    """The roofline of one operator: ``(svg, caption)``, or None when no shape can be placed.

    A shape is placed when it was timed, passed, and has FLOPs and bytes (a pure copy has no
    FLOPs, so its intensity 0 has no place on a log axis).
    """
    points = _roofline_points(run, op.name)
    if not points:
        return None
    colours = entrant_colours(run.entrants)
    ceiling = compute_ceiling(op_shapes(run, op.name), ceilings) if ceilings else None
    peak = ceiling.rate_flops_per_s if ceiling else None
    xs_data = [p.x for pts in points.values() for p in pts]
    ys_data = [p.y for pts in points.values() for p in pts]
    if ceilings is not None and peak is not None:
        xs_data.append(peak / ceilings.bandwidth_bytes_per_s)  # the ridge point
        ys_data.append(peak)
    x_ticks, y_ticks = log_ticks(min(xs_data), max(xs_data)), log_ticks(min(ys_data), max(ys_data))
    box = Box(height=300.0, top=26.0, bottom=44.0)
    xs = LogScale(x_ticks[0], x_ticks[-1], box.x0, box.x1)
    ys = LogScale(y_ticks[0], y_ticks[-1], box.y_base, box.y_top)
    body = x_grid(box, x_ticks, xs, format_si) + y_grid(box, y_ticks, ys, format_si)
    body += axis_lines(box)
    if ceilings is not None:
        bw = ceilings.bandwidth_bytes_per_s
        coords = _roof_coords(bw, peak, xs, ys)
        if len(coords) > 1:
            roof = f"bandwidth {format_si(bw)}B/s"
            if ceiling is not None:
                roof += f", {ceiling.unit} {format_si(ceiling.rate_flops_per_s)}FLOP/s"
            body.append(polyline(coords, colour="#444", css_class="roof", title=roof))
            body += _roof_labels(ceilings, ceiling, coords, box)
    for entrant, pts in points.items():
        body += markers(pts, xs, ys, colour=colours[entrant])
    body += legend(box, [(e, colours[e]) for e in run.entrants if e in points])
    body += [x_label(box, "arithmetic intensity (FLOP/byte)"), y_label(box, "achieved FLOP/s")]
    svg = svg_document(f"Roofline of {op.name}", body, box, css_class="roofline")
    return svg, _roofline_caption(ceilings, ceiling)


def _roof_labels(
    ceilings: Ceilings, ceiling: ComputeCeiling | None, coords: list[tuple[float, float]], box: Box
) -> list[str]:
    """Name the bandwidth slope at its middle and the compute ceiling at its right end."""
    (x0, y0), (x1, y1) = coords[0], coords[1]
    x, y = (x0 + x1) / 2, (y0 + y1) / 2
    parts = [
        f'<text class="roof-label" x="{x - 6:.1f}" y="{y - 6:.1f}" text-anchor="end" fill="#444">'
        f"{escape(format_si(ceilings.bandwidth_bytes_per_s))}B/s</text>"
    ]
    if ceiling is not None:
        cap_y = coords[-1][1]
        parts.append(
            f'<text class="roof-label" x="{box.x1 - 4:.1f}" y="{cap_y - 5:.1f}" '
            f'text-anchor="end" fill="#444">{escape(ceiling.unit)} '
            f"{escape(format_si(ceiling.rate_flops_per_s))}FLOP/s</text>"
        )
    return parts


def _roofline_caption(ceilings: Ceilings | None, ceiling: ComputeCeiling | None) -> str:
    text = "One marker per (shape, entrant) that passed and was timed, log-log. "
    if ceilings is None:
        return text + "The run recorded no ceilings, so the roofline lines are not drawn."
    text += (
        f"Grey line: the {ceilings.source} ceilings, bandwidth "
        f"{format_si(ceilings.bandwidth_bytes_per_s)}B/s"
    )
    if ceiling is None:
        return text + " (no compute rate to draw: the ceilings or the shapes lack one)."
    return (
        f"{text} and the {ceiling.unit} rate {format_si(ceiling.rate_flops_per_s)}FLOP/s, "
        f"chosen as {ceiling.how}."
    )


# --------------------------------------------------------------------------------------------
# S per shape, weight against score
# --------------------------------------------------------------------------------------------


def _bar(run: SuiteRun, entrant: str, op: str, key: tuple[str, str]) -> Bar:
    result = run.result(entrant, op)
    shape = None
    if result is not None:
        shape = next((s for s in result.shapes if (s.split, s.shape_id) == key), None)
    where = f"{entrant}, shape {key[1]} ({key[0]})"
    if shape is None:
        return Bar(None, f"{where}: not run")
    if shape_failed(shape):
        return Bar(0.0, f"{where}: {shape.verdict} (S = 0)")
    if shape.s is None:
        return Bar(None, f"{where}: not timed")
    lat = "" if shape.latency_us is None else f", {shape.latency_us:.2f} µs"
    return Bar(shape.s, f"{where}: S = {shape.s:.3f}{lat}")


def shape_score_chart(run: SuiteRun, op: OperatorInfo) -> tuple[str, str] | None:
    """S per shape and entrant as grouped bars: ``(svg, caption)``; None if nothing was timed."""
    shapes = op_shapes(run, op.name)
    results = [r for r in run.results if r.op == op.name]
    if not any(s.s is not None for r in results for s in r.shapes):
        return None
    colours = entrant_colours(run.entrants)
    keys = [(s.split, s.shape_id) for s in shapes]
    groups = [sid if split == "tune" else f"{split[0]}:{sid}" for split, sid in keys]
    bars = [[_bar(run, e, op.name, k) for e in run.entrants] for k in keys]
    svg = grouped_bars(
        f"S per shape of {op.name}",
        groups,
        [(e, colours[e]) for e in run.entrants],
        bars,
        y_ticks=[0.0, 0.25, 0.5, 0.75, 1.0],
        y_fmt="{:g}",
        y_title="S = T_sol / T",
        x_title="shape (h: holdout, s: smoke)",
        css_class="shape-scores",
    )
    caption = (
        "S per shape (1 = at the roofline), one bar per entrant. A failed shape scores 0 and "
        "shows as a stub; a grey cross marks a shape not run or not timed."
    )
    return svg, caption


def weight_score_chart(run: SuiteRun) -> tuple[str, str] | None:
    """Operators as dots at (weight, S_op on tune), one series per entrant; None if none timed."""
    colours = entrant_colours(run.entrants)
    series: dict[str, list[Point]] = {}
    for op in run.operators:
        for entrant in run.entrants:
            result = run.result(entrant, op.name)
            score = None if result is None else result.score("tune")
            if score is None:
                continue
            label = f"{op.name}, {entrant}: weight {op.weight:.4f}, S_op = {score:.3f}"
            series.setdefault(entrant, []).append(Point(op.weight, score, label))
    if not series:
        return None
    box = Box(height=280.0, top=26.0, bottom=44.0)
    x_ticks = linear_ticks(max(p.x for pts in series.values() for p in pts))
    y_ticks = [0.0, 0.25, 0.5, 0.75, 1.0]
    xs = LinearScale(0.0, x_ticks[-1], box.x0, box.x1)
    ys = LinearScale(0.0, 1.0, box.y_base, box.y_top)
    body = x_grid(box, x_ticks, xs, "{:g}") + y_grid(box, y_ticks, ys, "{:g}") + axis_lines(box)
    for entrant, pts in series.items():
        body += markers(pts, xs, ys, colour=colours[entrant])
    body += legend(box, [(e, colours[e]) for e in run.entrants if e in series])
    body += [x_label(box, "operator weight in the suite"), y_label(box, "S_op (tune)")]
    svg = svg_document("Weight against score", body, box, css_class="weight-score")
    caption = (
        "Scatter: one dot per operator and entrant, x = the operator's weight, y = its score "
        "S_op on tune shapes. Dots low and to the right cost the suite most (gap w·(1 − S_op))."
    )
    return svg, caption
