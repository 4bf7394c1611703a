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


def _confirm_delete(error: str | None) -> str:
    source = (
        '{% from "_macros.html" import confirm_delete %}'
        '{{ confirm_delete(visitor, "/c/pods/p1/delete", "my <pod>", "pod", "/c/pods/p1", error) }}'
    )
    visitor = {"csrf": "tok"}
    template = render.environment(TEMPLATES).from_string(source)
    return template.render(visitor=visitor, error=error)


def test_a_delete_form_asks_for_the_name_typed_again_with_the_csrf_token() -> None:
    html = _confirm_delete(None)
    assert (
        '<form method="post" action="/c/pods/p1/delete" class="card"'
        ' data-confirm-name="my &lt;pod&gt;">'
    ) in html
    assert '<input type="hidden" name="csrf" value="tok">' in html
    assert 'Type <strong class="mono">my &lt;pod&gt;</strong> to confirm' in html
    assert 'name="confirm_name"' in html
    assert '<button type="submit" class="danger">Delete this pod</button>' in html
    assert '<a href="/c/pods/p1">Cancel</a>' in html
    assert "aria-invalid" not in html


def test_a_delete_forms_error_is_tied_to_the_name_field() -> None:
    html = _confirm_delete("Not <its> name")
    assert 'aria-invalid="true" aria-describedby="e-confirm_name"' in html
    assert '<p class="error" id="e-confirm_name" role="alert">Not &lt;its&gt; name</p>' in html
    assert 'class="field invalid"' in html
