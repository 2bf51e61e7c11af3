"""Offsets over time as an inline SVG line chart (no JavaScript, no external assets)."""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape

WIDTH, HEIGHT = 640, 200
LEFT, RIGHT, TOP, BOTTOM = 70, 10, 10, 40


def svg_chart(times: list[float], series: list[tuple[str, list[int], str]]) -> str:
    """A chart of each (label, values, colour) against ``times`` (epoch seconds); every sample is
    drawn as a point (a <circle class="point">) on its line."""
    if not times or not any(values for _, values, _ in series):
        return '<p class="muted">No samples yet: the console samples offsets every few seconds.</p>'
    t0, t1 = times[0], times[-1]
    lows = [min(v) for _, v, _ in series if v]
    highs = [max(v) for _, v, _ in series if v]
    lo, hi = min(lows), max(highs)
    if hi == lo:
        hi = lo + 1
    span_t = (t1 - t0) or 1.0
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + (t - t0) / span_t * plot_w if t1 > t0 else LEFT + plot_w / 2

    def y(v: int) -> float:
        return TOP + plot_h - (v - lo) / (hi - lo) * plot_h

    out = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'xmlns="http://www.w3.org/2000/svg" role="img">',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#ccc"/>',
        f'<text x="{LEFT - 4}" y="{TOP + 10}" text-anchor="end" font-size="10">{hi:,}</text>',
        f'<text x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end" font-size="10">{lo:,}</text>',
    ]
    for t, anchor in ((t0, "start"), (t1, "end")):
        label = datetime.fromtimestamp(t, tz=UTC).strftime("%H:%M:%S")
        out.append(
            f'<text x="{x(t):.1f}" y="{HEIGHT - BOTTOM + 14}" text-anchor="{anchor}" font-size="10">{label}</text>'
        )
    legend_x = LEFT
    for label, values, colour in series:
        pts = [(x(t), y(v)) for t, v in zip(times[-len(values) :], values, strict=False)]
        if len(pts) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in pts)
            out.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{path}"/>')
        for (px, py), v in zip(pts, values, strict=False):
            out.append(
                f'<circle class="point" cx="{px:.1f}" cy="{py:.1f}" r="2" fill="{colour}">'
                f"<title>{escape(label)}: {v:,}</title></circle>"
            )
        out.append(
            f'<rect x="{legend_x}" y="{HEIGHT - 14}" width="10" height="10" fill="{colour}"/>'
            f'<text x="{legend_x + 14}" y="{HEIGHT - 5}" font-size="11">{escape(label)}</text>'
        )
        legend_x += 20 + 7 * len(label) + 20
    out.append("</svg>")
    return "".join(out)
