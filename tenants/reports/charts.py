"""Server-rendered SVG charts: no JavaScript, no CDN, readable when printed.

Each function takes already-aggregated values and returns SVG markup; labels are escaped here.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from django.utils.safestring import SafeString, mark_safe

PALETTE = ("#417690", "#79aec8", "#e8a33d", "#5b8c5a", "#b5525c", "#8a6fb0")
WIDTH, BAR, GAP, LABEL_W = 640, 18, 8, 150


def _fmt(value: float, unit: str) -> str:
    if unit == "$":
        return f"{value:,.4f}"
    if unit == "s":
        return f"{value:.2f} s"
    return f"{value:,.0f}"


def column_chart(points: Sequence[tuple[str, float]], title: str, unit: str = "") -> SafeString:
    """Vertical bars, one per label (e.g. cost per day)."""
    height, top, bottom = 220, 24, 40
    if not points:
        return _empty(title)
    peak = max(v for _, v in points) or 1.0
    slot = (WIDTH - 20) / len(points)
    bar_w = max(min(slot * 0.7, 48), 2)
    parts = [_title(title)]
    for i, (label, value) in enumerate(points):
        h = (height - top - bottom) * value / peak
        x = 10 + i * slot + (slot - bar_w) / 2
        y = height - bottom - h
        tip = escape(f"{label}: {_fmt(value, unit)}")
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" height="{h:.1f}" '
            f'fill="{PALETTE[0]}"><title>{tip}</title></rect>'
        )
        if len(points) <= 16 or i % max(len(points) // 8, 1) == 0:
            parts.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{height - bottom + 14}" font-size="10" '
                f'text-anchor="middle">{escape(label)}</text>'
            )
    parts.append(
        f'<text x="{WIDTH - 10}" y="{top + 4}" font-size="10" text-anchor="end">'
        f"max {escape(_fmt(peak, unit))}</text>"
    )
    return _svg(height, parts, title)


def bar_chart(
    groups: Sequence[tuple[str, Sequence[tuple[str, float]]]], title: str, unit: str = ""
) -> SafeString:
    """Horizontal bars: one group per label, one coloured bar per series inside it."""
    if not groups:
        return _empty(title)
    series = list(dict.fromkeys(name for _, values in groups for name, _ in values))
    peak = max((v for _, values in groups for _, v in values), default=0.0) or 1.0
    scale = (WIDTH - LABEL_W - 90) / peak
    parts, y = [_title(title)], 34
    for label, values in groups:
        parts.append(f'<text x="4" y="{y + BAR - 5}" font-size="11">{escape(label)}</text>')
        for name, value in values:
            colour = PALETTE[series.index(name) % len(PALETTE)]
            w = max(value * scale, 1)
            tip = escape(f"{label} {name}: {_fmt(value, unit)}")
            parts.append(
                f'<rect class="bar" x="{LABEL_W}" y="{y}" width="{w:.1f}" height="{BAR - 4}" '
                f'fill="{colour}"><title>{tip}</title></rect>'
                f'<text x="{LABEL_W + w + 4:.1f}" y="{y + BAR - 7}" font-size="10">'
                f"{escape(name)} {escape(_fmt(value, unit))}</text>"
            )
            y += BAR
        y += GAP
    return _svg(y + 4, parts, title)


def _title(title: str) -> str:
    return f'<text x="4" y="16" font-size="13" font-weight="bold">{escape(title)}</text>'


def _svg(height: float, parts: list[str], title: str) -> SafeString:
    body = "".join(parts)
    # Safe: every label and value above went through escape().
    return mark_safe(
        f'<svg class="chart" role="img" aria-label="{escape(title)}" width="{WIDTH}" '
        f'height="{height:.0f}" viewBox="0 0 {WIDTH} {height:.0f}" '
        f'xmlns="http://www.w3.org/2000/svg">{body}</svg>'
    )


def _empty(title: str) -> SafeString:
    return _svg(40, [_title(title), '<text x="4" y="34" font-size="11">no data</text>'], title)
