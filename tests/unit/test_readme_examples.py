"""The README's walk-through shows the files of ``examples/`` as they are (less their docstring),
so what a reader copies from the page is what the end-to-end test runs."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _without_docstring(source: str) -> str:
    tree = ast.parse(source)
    first = tree.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        source = "\n".join(source.splitlines()[first.end_lineno or 0 :])
    return source.strip()


@pytest.mark.parametrize("name", ["handler.py", "stream_handler.py", "client.py", "flash_app.py"])
def test_readme_shows_the_example_file_as_it_is(name: str) -> None:
    blocks = (ROOT / "README.md").read_text().split("```python\n")[1:]
    shown = [block.split("```", 1)[0].strip() for block in blocks]
    assert _without_docstring((ROOT / "examples" / name).read_text()) in shown
