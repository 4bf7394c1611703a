"""The billing page's chart: spend per day as stacked bars, drawn on the server as SVG (no
script, nothing from the network); each bar's parts carry a title for the pointer."""

from __future__ import annotations

from dataclasses import dataclass

from markupsafe import Markup, escape

#: Bars are coloured by series, in this order; past it, series share "other".
PALETTE = ("#2f6fdf", "#e0803b", "#2e9e6b", "#9b59b6", "#d64545", "#7a8b99")
WIDTH, HEIGHT = 720, 220
LEFT, BOTTOM, TOP = 56, 28, 12


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    #: One amount (USD) per day, in the order of the chart's days.
    amounts: list[float]


def stacked(series: list[Series], limit: int = len(PALETTE) - 1) -> list[Series]:
    """The ``limit`` series that cost the most, and the rest as one "other" series."""
    ranked = sorted(series, key=lambda s: -sum(s.amounts))
    if len(ranked) <= limit + 1:
        return ranked
    rest = ranked[limit:]
    other = [sum(s.amounts[i] for s in rest) for i in range(len(rest[0].amounts))]
    return [*ranked[:limit], Series(f"{len(rest)} others", other)]


def _money(value: float) -> str:
    return f"${value:,.2f}" if value >= 0.01 or value == 0 else f"${value:.4f}"


def chart(days: list[str], series: list[Series]) -> Markup:
    """The SVG: a bar per day (``days``, labels), a colour per series, a legend below."""
    shown = stacked(series)
    totals = [sum(s.amounts[i] for s in shown) for i in range(len(days))]
    top = max(totals, default=0.0) or 1.0
    plot_w, plot_h = WIDTH - LEFT - 8, HEIGHT - TOP - BOTTOM
    step = plot_w / max(len(days), 1)
    bar = max(step * 0.7, 1.0)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} '
        f'{HEIGHT + 22 * ((len(shown) + 2) // 3)}" role="img" class="chart" '
        f'aria-label="Spend per day, last {len(days)} days">',
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - 8}" y2="{TOP + plot_h}" '
        'stroke="#9aa5b1"/>',
        f'<text x="{LEFT - 6}" y="{TOP + 10}" text-anchor="end" font-size="11">'
        f"{escape(_money(top if any(totals) else 0))}</text>",
        f'<text x="{LEFT - 6}" y="{TOP + plot_h}" text-anchor="end" font-size="11">$0</text>',
    ]
    for i, day in enumerate(days):
        x = LEFT + i * step + (step - bar) / 2
        y = float(TOP + plot_h)
        for colour, one in zip(PALETTE, shown, strict=False):
            amount = one.amounts[i]
            if amount <= 0:
                continue
            h = amount / top * plot_h
            y -= h
            parts.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                f'fill="{colour}"><title>{escape(day)} · {escape(one.name)}: '
                f"{escape(_money(amount))}</title></rect>"
            )
        if i in (0, len(days) - 1) or (len(days) > 10 and i == len(days) // 2):
            # The first and last labels are anchored inward, so neither is cut off.
            anchor = "start" if i == 0 else "end" if i == len(days) - 1 else "middle"
            at = x if i == 0 else x + bar if i == len(days) - 1 else x + bar / 2
            parts.append(
                f'<text x="{at:.1f}" y="{TOP + plot_h + 16}" text-anchor="{anchor}" '
                f'font-size="11">{escape(day)}</text>'
            )
    for n, (colour, one) in enumerate(zip(PALETTE, shown, strict=False)):
        x = LEFT + (n % 3) * 220
        y = HEIGHT + 22 * (n // 3)
        parts.append(f'<rect x="{x}" y="{y - 10}" width="12" height="12" fill="{colour}"/>')
        parts.append(
            f'<text x="{x + 18}" y="{y}" font-size="12">{escape(one.name[:32])} '
            f"({escape(_money(sum(one.amounts)))})</text>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
