"""The named-query loader: files parsed, parameters translated per dialect, mistakes refused."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable
from importlib import resources
from pathlib import Path

import pytest

import skiff.store.operations
import skiff.store.postgres
import skiff.store.sqlite
from skiff.domain.jobs import FINAL_STATES, JobStatus, sources_of
from skiff.store.named_queries import Dialect, QueryError, compile_query, load, parse
from skiff.store.rows import WORKER_FIELDS, finishes_in_progress, worker_update_sql
from skiff.store.sqlite import migrate


def _write(root: Path, relative: str, text: str) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_file_is_split_into_its_named_queries_without_comments_or_trailing_semicolons() -> None:
    text = (
        "-- Users: read and written alike.\n"
        "\n"
        "-- name: get_user\n"
        "-- one user by id\n"
        "SELECT id, name\n"
        "FROM users WHERE id = :id;\n"
        "\n"
        "--name:  delete_user  \n"
        "DELETE FROM users WHERE id = :id\n"
    )
    assert parse(text, "users.sql") == {
        "get_user": "SELECT id, name\nFROM users WHERE id = :id",
        "delete_user": "DELETE FROM users WHERE id = :id",
    }


def test_sqlite_gets_one_question_mark_per_use_and_binds_by_name() -> None:
    query = compile_query(
        "touch", "UPDATE w SET seen = :now, idle = :now WHERE id = :id", Dialect.SQLITE
    )
    assert query.sql == "UPDATE w SET seen = ?, idle = ? WHERE id = ?"
    assert query.params == ("now", "now", "id")
    assert query.args({"id": "w1", "now": 5.0}) == (5.0, 5.0, "w1")


def test_postgres_gets_one_numbered_placeholder_per_name_in_order_of_first_use() -> None:
    query = compile_query(
        "touch", "UPDATE w SET seen = :now, idle = :now WHERE id = :id", Dialect.POSTGRES
    )
    assert query.sql == "UPDATE w SET seen = $1, idle = $1 WHERE id = $2"
    assert query.params == ("now", "id")
    assert query.args({"id": "w1", "now": 5.0}) == (5.0, "w1")


def test_casts_string_literals_and_comments_are_not_parameters() -> None:
    sql = (
        "SELECT :t::float8 + 1, 'at :noon?', \"odd:col\" -- :not_this\n"
        "FROM x WHERE a = :a AND b = 'it''s :x'"
    )
    query = compile_query("q", sql, Dialect.POSTGRES)
    assert query.sql == (
        "SELECT $1::float8 + 1, 'at :noon?', \"odd:col\" -- :not_this\n"
        "FROM x WHERE a = $2 AND b = 'it''s :x'"
    )
    assert query.params == ("t", "a")


def test_binding_without_a_parameter_or_with_an_unknown_one_is_refused() -> None:
    query = compile_query("q", "SELECT * FROM x WHERE a = :a AND b = :b", Dialect.SQLITE)
    with pytest.raises(QueryError, match=r"missing \['b'\]"):
        query.args({"a": 1})
    with pytest.raises(QueryError, match=r"unknown \['c'\]"):
        query.args({"a": 1, "b": 2, "c": 3})


@pytest.mark.parametrize("placeholder", ["?", "$1"])
def test_a_positional_placeholder_is_refused_at_load(placeholder: str) -> None:
    with pytest.raises(QueryError, match="positional"):
        compile_query("q", f"SELECT * FROM x WHERE a = {placeholder}", Dialect.SQLITE)


def test_a_name_written_twice_in_one_file_is_refused() -> None:
    with pytest.raises(QueryError, match="'q' is written twice"):
        parse("-- name: q\nSELECT 1;\n-- name: q\nSELECT 2;\n", "a.sql")


def test_a_name_written_in_two_files_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, "a.sql", "-- name: q\nSELECT 1;\n")
    _write(tmp_path, "b.sql", "-- name: q\nSELECT 2;\n")
    with pytest.raises(QueryError, match="'q' is written twice"):
        load(Dialect.SQLITE, tmp_path)


def test_a_shared_query_also_written_for_one_dialect_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, "a.sql", "-- name: q\nSELECT 1;\n")
    _write(tmp_path, "sqlite/a.sql", "-- name: q\nSELECT 2;\n")
    _write(tmp_path, "postgres/a.sql", "-- name: q\nSELECT 3;\n")
    with pytest.raises(QueryError, match="shared and for"):
        load(Dialect.POSTGRES, tmp_path)


def test_a_dialect_query_missing_in_the_other_dialect_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, "sqlite/a.sql", "-- name: q\nINSERT OR IGNORE INTO x VALUES (:a);\n")
    with pytest.raises(QueryError, match="'q' has no postgres text"):
        load(Dialect.SQLITE, tmp_path)


def test_dialect_texts_missing_a_parameter_of_each_other_are_refused(tmp_path: Path) -> None:
    _write(tmp_path, "sqlite/a.sql", "-- name: q\nINSERT OR IGNORE INTO x VALUES (:a, :b);\n")
    _write(
        tmp_path,
        "postgres/a.sql",
        "-- name: q\nINSERT INTO x VALUES (:a) ON CONFLICT DO NOTHING;\n",
    )
    with pytest.raises(QueryError, match=r"takes \['a', 'b'\] on sqlite but \['a'\] on postgres"):
        load(Dialect.SQLITE, tmp_path)


def test_sql_before_the_first_name_or_a_name_without_sql_is_refused() -> None:
    with pytest.raises(QueryError, match="before the first"):
        parse("SELECT 1;\n-- name: q\nSELECT 2;\n", "a.sql")
    with pytest.raises(QueryError, match="'q' has no SQL"):
        parse("-- name: q\n-- nothing here\n-- name: r\nSELECT 2;\n", "a.sql")
    with pytest.raises(QueryError, match="not a valid query name"):
        parse("-- name: no-dashes\nSELECT 2;\n", "a.sql")


def test_each_dialect_loads_the_shared_queries_and_its_own(tmp_path: Path) -> None:
    _write(tmp_path, "a.sql", "-- name: get\nSELECT v FROM kv WHERE k = :k;\n")
    _write(tmp_path, "sqlite/a.sql", "-- name: put\nINSERT OR REPLACE INTO kv VALUES (:k, :v);\n")
    _write(
        tmp_path,
        "postgres/a.sql",
        "-- name: put\nINSERT INTO kv VALUES (:k, :v)"
        " ON CONFLICT (k) DO UPDATE SET v = excluded.v;\n",
    )
    sqlite_queries = load(Dialect.SQLITE, tmp_path)
    postgres_queries = load(Dialect.POSTGRES, tmp_path)
    assert sqlite_queries["put"].sql == "INSERT OR REPLACE INTO kv VALUES (?, ?)"
    assert postgres_queries["put"].sql.startswith("INSERT INTO kv VALUES ($1, $2) ON CONFLICT")
    assert sqlite_queries["get"].sql == "SELECT v FROM kv WHERE k = ?"
    assert postgres_queries["get"].sql == "SELECT v FROM kv WHERE k = $1"
    # The compiled text runs, and its rows read by name.
    conn = sqlite3.connect(":memory:")
    conn.row_factory = sqlite3.Row
    conn.execute("CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT)")
    put, get = sqlite_queries["put"], sqlite_queries["get"]
    conn.execute(put.sql, put.args({"k": "a", "v": "1"}))
    assert conn.execute(get.sql, get.args({"k": "a"})).fetchone()["v"] == "1"


def test_the_packaged_queries_load_for_both_dialects() -> None:
    sqlite_queries, postgres_queries = load(Dialect.SQLITE), load(Dialect.POSTGRES)
    assert sqlite_queries.keys() == postgres_queries.keys()
    assert "find_api_key" in sqlite_queries


# -- the packaged queries, against the adapters and the schema --------------------------------

_ADAPTERS = {
    Dialect.SQLITE: Path(skiff.store.sqlite.__file__),
    Dialect.POSTGRES: Path(skiff.store.postgres.__file__),
}
#: The operations both adapters run (operations.SqlStore).
_OPERATIONS = Path(skiff.store.operations.__file__)
# A named query is run through a connection's methods or the operations' helpers, its name the
# first string given.
_CALL = re.compile(
    r"(?:(?:\bc|\))\.(?:execute|execute_many|fetch|fetchrow|read|read_one)"
    r"|\bself\._(?:run|rows|row|create|ids_of|claim))"
    r"\(\s*(?:[\w.]+,\s*)?\"(\w+)\""
)


#: A query named in a table of one query per kind (``_COUNT_OWNED``: a user's count of each
#: kind ``SKIFF_MAX_PER_USER`` bounds), run through the table.
_TABLED = re.compile(r'^    Owned\.\w+: "(\w+)",$', re.MULTILINE)


def _names_run_by(dialect: Dialect) -> set[str]:
    text = _OPERATIONS.read_text() + _ADAPTERS[dialect].read_text()
    return set(_CALL.findall(text)) | set(_TABLED.findall(text))


def test_every_query_an_adapter_runs_is_written_and_every_written_query_is_run() -> None:
    written = load(Dialect.SQLITE).keys()
    run = {dialect: _names_run_by(dialect) for dialect in Dialect}
    for dialect, names in run.items():
        assert names, f"no named query found in the {dialect.value} adapter"
        assert names <= written, f"{dialect.value} runs unwritten queries"
    assert written <= run[Dialect.SQLITE] | run[Dialect.POSTGRES], "queries no adapter runs"


def test_each_dialect_text_is_run_by_both_adapters() -> None:
    root = resources.files("skiff.store").joinpath("queries", Dialect.SQLITE.value)
    own = {name for entry in root.iterdir() for name in parse(entry.read_text(), entry.name)}
    for dialect in Dialect:
        assert own <= _names_run_by(dialect), f"{dialect.value} skips a text of its own"


def test_shared_queries_use_no_syntax_of_one_dialect_and_compile_for_both() -> None:
    root = resources.files("skiff.store").joinpath("queries")
    own_syntax = re.compile(
        r"::|\?|\$\d|INSERT OR|FOR (NO KEY )?UPDATE|SKIP LOCKED|json_each|ANY\("
    )
    for entry in root.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        for name, sql in parse(entry.read_text(), entry.name).items():
            assert not own_syntax.search(sql), f"shared query {name!r} uses a dialect's syntax"
            for dialect in Dialect:
                compile_query(name, sql, dialect)


def _guard(states: Iterable[JobStatus]) -> str:
    return "status IN (" + ", ".join(f"'{s.value}'" for s in sorted(states)) + ")"


def test_the_state_guards_written_in_the_queries_are_the_domains() -> None:
    queries = load(Dialect.SQLITE)
    assert _guard(sources_of(JobStatus.CANCELLED)) in queries["cancel_job"].sql
    retryable = sources_of(JobStatus.IN_QUEUE) - {JobStatus.IN_PROGRESS}
    assert _guard(retryable) in queries["retry_job"].sql
    assert _guard({JobStatus.IN_PROGRESS}) in queries["finish_job"].sql
    for final in FINAL_STATES:
        assert finishes_in_progress(final)
    assert not finishes_in_progress(JobStatus.IN_PROGRESS)


def test_every_sqlite_query_prepares_on_the_migrated_schema() -> None:
    conn = sqlite3.connect(":memory:", isolation_level=None)
    migrate(conn)
    queries = dict(load(Dialect.SQLITE))
    queries["update_worker"] = compile_query(
        "update_worker", worker_update_sql(sorted(WORKER_FIELDS)), Dialect.SQLITE
    )
    for name, query in queries.items():
        try:
            conn.execute("EXPLAIN " + query.sql, (None,) * len(query.params))
        except sqlite3.Error as exc:
            raise AssertionError(f"query {name!r}: {exc}") from exc
