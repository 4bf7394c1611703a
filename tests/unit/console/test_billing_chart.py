"""The billing chart (``console/billing_chart``): stacked bars drawn as SVG on the server,
the costliest series by name and the rest as "others", every name escaped."""

from __future__ import annotations

from skiff.console.billing_chart import PALETTE, Series, chart, stacked


def test_the_costliest_series_keep_their_names_and_the_rest_are_summed() -> None:
    series = [Series(f"s{i}", [float(i), 1.0]) for i in range(10)]
    shown = stacked(series)
    assert len(shown) == len(PALETTE)
    assert [s.name for s in shown[:3]] == ["s9", "s8", "s7"]
    assert shown[-1].name == "5 others" and shown[-1].amounts == [0 + 1 + 2 + 3 + 4, 5.0]


def test_a_bar_part_per_day_and_series_with_spend_and_a_legend_entry_per_series() -> None:
    drawn = str(chart(["d1", "d2"], [Series("a", [1.0, 0.0]), Series("b", [2.0, 3.0])]))
    assert drawn.startswith("<svg") and drawn.endswith("</svg>")
    # 3 parts with spend (a on d1, b on d1 and d2), 2 legend squares.
    assert drawn.count("<rect") == 5
    assert "<title>d2 · b: $3.00</title>" in drawn


def test_names_are_escaped() -> None:
    drawn = str(chart(["d1"], [Series('<script>alert("x")</script>', [1.0])]))
    assert "<script>" not in drawn and "&lt;script&gt;" in drawn


def test_nothing_spent_draws_an_empty_chart() -> None:
    drawn = str(chart(["d1", "d2"], []))
    assert "<rect" not in drawn and "$0" in drawn
