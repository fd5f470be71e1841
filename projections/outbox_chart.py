"""The outbox page's chart: 24 hours of mail by hour and state, drawn as SVG on the server.

A pure function of the counts (``infra.delivery.overview.hourly_counts``):
for each hour a stacked bar of the messages that finished in it (sent,
skipped, failed, abandoned) and a point for the messages queued in it.
Accessible: ``role="img"`` with a ``<title>`` and a ``<desc>`` that says the
totals in words, labelled axes, and a ``<title>`` on every bar. Every bar
segment and point carries ``data-hour``, ``data-state`` and ``data-count``
for tests and scripts. Colours are presentation attributes and classes, not
``style`` attributes, so a strict Content-Security-Policy allows them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from xml.sax.saxutils import escape, quoteattr

from attrs import frozen

FINISHED_STATES = ("sent", "skipped", "failed", "abandoned")
CHART_STATES = ("queued", *FINISHED_STATES)
COLOURS = {"sent": "#2e7d32", "skipped": "#9e9e9e", "failed": "#c62828", "abandoned": "#ef6c00",
           "queued": "#1565c0"}

WIDTH, HEIGHT = 760, 300
LEFT, RIGHT, TOP, BOTTOM = 56, 16, 36, 56  # margins: room for the axes' ticks and labels
PLOT_W, PLOT_H = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM


@frozen
class HourCounts:
    """Messages of one hour: ``counts`` by state (queued, and each finished outcome)."""

    start: datetime
    counts: Mapping[str, int]


def _scale_top(highest: int) -> int:
    """A round axis maximum at or above ``highest``: 1, 2, 5, 10, 20, 50, ..."""
    magnitude = 1
    while True:
        for step in (1, 2, 5):
            if step * magnitude >= highest:
                return step * magnitude
        magnitude *= 10


def _y(value: int, top: int) -> float:
    return TOP + PLOT_H - PLOT_H * value / top


def _hour(start: datetime) -> str:
    return start.strftime("%Y-%m-%dT%H:%MZ")


def _totals(hours: Sequence[HourCounts]) -> dict[str, int]:
    return {state: sum(h.counts.get(state, 0) for h in hours) for state in CHART_STATES}


def render_outbox_chart(hours: Sequence[HourCounts], *, chart_id: str = "outbox-chart") -> str:
    """The SVG document fragment (an ``<svg>`` element) for these hours, oldest first."""
    totals = _totals(hours)
    highest = max([sum(h.counts.get(s, 0) for s in FINISHED_STATES) for h in hours]
                  + [h.counts.get("queued", 0) for h in hours] + [1])
    top = _scale_top(highest)
    slot = PLOT_W / max(len(hours), 1)
    title = "Outbound email over the last 24 hours, by hour (UTC)"
    desc = (f"{totals['queued']} queued; finished: " + ", ".join(f"{totals[s]} {s}" for s in FINISHED_STATES)
            + (f". Hours from {_hour(hours[0].start)} to {_hour(hours[-1].start)}." if hours else "."))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" id={quoteattr(chart_id)} class="outbox-chart" role="img" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}" '
        f'aria-labelledby="{chart_id}-title {chart_id}-desc">',
        f'<title id="{chart_id}-title">{escape(title)}</title>',
        f'<desc id="{chart_id}-desc">{escape(desc)}</desc>',
        *_axes(hours, top, slot),
    ]
    for index, hour in enumerate(hours):
        parts.append(_bar(hour, index, slot, top))
    parts.append(_queued_points(hours, slot, top))
    parts.append(_legend())
    parts.append("</svg>")
    return "\n".join(parts)


def _axes(hours: Sequence[HourCounts], top: int, slot: float) -> list[str]:
    baseline = TOP + PLOT_H
    lines = [
        f'<g class="axis axis-y" aria-hidden="true">'
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{baseline}" stroke="#555"/>',
    ]
    for tick in (0, top // 2, top) if top > 1 else (0, 1):
        y = _y(tick, top)
        lines.append(f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11">{tick}</text>'
                     f'<line x1="{LEFT - 3}" y1="{y:.1f}" x2="{LEFT + PLOT_W}" y2="{y:.1f}" stroke="#ddd"/>')
    lines.append(f'<text class="axis-label" x="14" y="{TOP + PLOT_H / 2:.1f}" font-size="12" text-anchor="middle" '
                 f'transform="rotate(-90 14 {TOP + PLOT_H / 2:.1f})">Messages</text></g>')
    lines.append(f'<g class="axis axis-x" aria-hidden="true">'
                 f'<line x1="{LEFT}" y1="{baseline}" x2="{LEFT + PLOT_W}" y2="{baseline}" stroke="#555"/>')
    for index, hour in enumerate(hours):
        if index % 3 == 0:
            x = LEFT + slot * index + slot / 2
            lines.append(f'<text x="{x:.1f}" y="{baseline + 16}" text-anchor="middle" font-size="11">'
                         f'{hour.start.strftime("%H:00")}</text>')
    lines.append(f'<text class="axis-label" x="{LEFT + PLOT_W / 2:.1f}" y="{HEIGHT - 22}" font-size="12" '
                 f'text-anchor="middle">Hour (UTC)</text></g>')
    return lines


def _bar(hour: HourCounts, index: int, slot: float, top: int) -> str:
    x, width = LEFT + slot * index + slot * 0.15, slot * 0.7
    stacked, segments = 0, []
    for state in FINISHED_STATES:
        count = hour.counts.get(state, 0)
        y_top, y_bottom = _y(stacked + count, top), _y(stacked, top)
        segments.append(
            f'<rect class="bar state-{state}" x="{x:.1f}" y="{y_top:.1f}" width="{width:.1f}" '
            f'height="{y_bottom - y_top:.1f}" fill="{COLOURS[state]}" data-hour="{_hour(hour.start)}" '
            f'data-state="{state}" data-count="{count}"><title>{_hour(hour.start)}: {count} {state}</title></rect>'
        )
        stacked += count
    return f'<g class="hour" data-hour="{_hour(hour.start)}">' + "".join(segments) + "</g>"


def _queued_points(hours: Sequence[HourCounts], slot: float, top: int) -> str:
    points, marks = [], []
    for index, hour in enumerate(hours):
        count = hour.counts.get("queued", 0)
        x, y = LEFT + slot * index + slot / 2, _y(count, top)
        points.append(f"{x:.1f},{y:.1f}")
        marks.append(f'<circle class="point state-queued" cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{COLOURS["queued"]}" '
                     f'data-hour="{_hour(hour.start)}" data-state="queued" data-count="{count}">'
                     f'<title>{_hour(hour.start)}: {count} queued</title></circle>')
    line = (f'<polyline points="{" ".join(points)}" fill="none" stroke="{COLOURS["queued"]}" stroke-width="1.5"/>'
            if points else "")
    return '<g class="queued">' + line + "".join(marks) + "</g>"


def _legend() -> str:
    items = []
    for index, state in enumerate(CHART_STATES):
        x = LEFT + index * 110
        items.append(f'<rect x="{x}" y="10" width="10" height="10" fill="{COLOURS[state]}"/>'
                     f'<text x="{x + 14}" y="19" font-size="11">{state}</text>')
    return '<g class="legend" aria-hidden="true">' + "".join(items) + "</g>"
