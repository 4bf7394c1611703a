"""Which database a URL names is decided in one place, skiff/databases.py."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import skiff
from skiff.config import Settings
from skiff.databases import Backend, backend_of, sqlite_file_of
from skiff.store import open_store


@pytest.mark.parametrize(
    ("url", "backend"),
    [
        (None, Backend.SQLITE),
        ("sqlite:///var/skiff/skiff.db", Backend.SQLITE),
        ("sqlite:////abs/skiff.db", Backend.SQLITE),
        ("postgresql://skiff@db:5432/skiff", Backend.POSTGRES),
        ("postgres://skiff@db/skiff", Backend.POSTGRES),
    ],
)
def test_backend_of_reads_the_url_prefix(url: str | None, backend: Backend) -> None:
    assert backend_of(url) is backend


@pytest.mark.parametrize("url", ["", "mysql://db/skiff", "sqlite://skiff.db", "POSTGRES://db"])
def test_backend_of_refuses_an_unsupported_url_saying_what_works(url: str) -> None:
    with pytest.raises(ValueError) as caught:
        backend_of(url)
    assert str(caught.value) == (
        f"unsupported database URL {url!r}: use sqlite:///path or postgresql://..."
    )


def test_open_store_refuses_what_backend_of_refuses(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unsupported database URL 'mysql://db'"):
        open_store("mysql://db", tmp_path / "skiff.db")


def test_sqlite_file_of_is_the_path_after_the_prefix_or_none() -> None:
    assert sqlite_file_of("sqlite:///var/skiff.db") == Path("var/skiff.db")
    assert sqlite_file_of("sqlite:////abs/skiff.db") == Path("/abs/skiff.db")
    assert sqlite_file_of(None) is None
    assert sqlite_file_of("postgresql://db/skiff") is None
    assert sqlite_file_of("mysql://db") is None


def test_settings_sqlite_path_is_the_named_file_else_the_data_directory_default(
    tmp_path: Path,
) -> None:
    named = Settings(data_dir=tmp_path, database_url=f"sqlite:///{tmp_path}/other.db")
    assert named.sqlite_path() == tmp_path / "other.db"
    assert Settings(data_dir=tmp_path).sqlite_path() == tmp_path / "skiff.db"
    postgres = Settings(data_dir=tmp_path, database_url="postgresql://db/skiff")
    assert postgres.sqlite_path() == tmp_path / "skiff.db"


def _reads_a_database_prefix(node: ast.AST) -> bool:
    """A ``.startswith(...)`` or ``.removeprefix(...)`` call given a database URL prefix."""
    if not (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in ("startswith", "removeprefix")
    ):
        return False
    return any(
        isinstance(constant, ast.Constant)
        and isinstance(constant.value, str)
        and constant.value.startswith(("sqlite:", "postgres"))
        for argument in node.args
        for constant in ast.walk(argument)
    )


def test_no_module_but_databases_reads_a_database_url_prefix() -> None:
    # The store, the cluster, the server locks and the settings once each read the prefix
    # themselves; a new spelling then had to be added in every one of them.
    package = Path(skiff.__file__).parent
    readers = sorted(
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if path.name != "databases.py" or path.parent != package
        if any(_reads_a_database_prefix(node) for node in ast.walk(ast.parse(path.read_text())))
    )
    assert readers == []
