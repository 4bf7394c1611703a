"""The template macros the console's list pages share (templates/_macros.html)."""

from __future__ import annotations

from pathlib import Path

import skiff.console
from skiff.console import render

TEMPLATES = Path(skiff.console.__file__).parent / "templates"


def _list_table(call: str, **context: object) -> str:
    source = '{% from "_macros.html" import list_table %}' + call
    return render.environment(TEMPLATES).from_string(source).render(**context)


ROWS = (
    '{% call(x) list_table(items, ["Name", ("Size", "num"), ("Actions", "sr-only")], '
    '"Nothing <yet>.", class="things") %}<tr data-x="{{ x }}"></tr>{% endcall %}'
)


def test_a_list_table_has_its_column_heads_and_a_row_per_item() -> None:
    html = _list_table(ROWS, items=["a", "b<"])
    assert '<div class="table-wrap">' in html
    assert '<table class="things">' in html
    assert (
        '<thead><tr><th scope="col">Name</th><th scope="col" class="num">Size</th>'
        '<th scope="col"><span class="sr-only">Actions</span></th></tr></thead>'
    ) in html
    assert '<tr data-x="a"></tr>' in html
    assert '<tr data-x="b&lt;"></tr>' in html
    assert "empty" not in html


def test_an_empty_list_says_so_in_its_escaped_sentence_instead_of_a_table() -> None:
    html = _list_table(ROWS, items=[])
    assert "<table" not in html
    assert '<p class="empty">Nothing &lt;yet&gt;.</p>' in html


def test_an_empty_list_without_a_sentence_shows_nothing() -> None:
    call = '{% call(x) list_table(items, ["Name"]) %}<tr></tr>{% endcall %}'
    assert _list_table(call, items=[]).strip() == ""
    assert "<table>" in _list_table(call, items=[1])
