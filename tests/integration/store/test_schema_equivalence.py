"""The SQLite and the PostgreSQL migrations describe the same model.

Every SQLite migration is applied to a fresh database file, every PostgreSQL migration to a fresh
schema ``t_<hex>`` in the test database (skipped when no server is reachable; dropped
afterwards). Each side's catalogue is then read back -- SQLite through ``PRAGMA table_info``,
``index_list``, ``index_info``, ``foreign_key_list`` and ``sqlite_master``; PostgreSQL through
``information_schema.columns`` and ``pg_catalog`` restricted to that schema -- and the two are
compared: tables, column names, column types, NOT NULL, defaults, primary keys, UNIQUE
constraints, indexes (name, columns, uniqueness, partial-index predicate) and foreign keys.
The bookkeeping table ``schema_migrations`` and SQLite's own ``sqlite_*`` tables are ignored.

What counts as "the same" across the two dialects (and nothing more is forgiven):

* Types: SQLite's declared type must be one of INTEGER, REAL, TEXT, BLOB, and each PostgreSQL
  type maps to exactly one of them (``_PG_TO_SQLITE``): integer, bigint and boolean -> INTEGER
  (SQLite keeps booleans as INTEGER 0/1; which columns are booleans is read from the PostgreSQL
  side), double precision -> REAL, text -> TEXT, bytea -> BLOB.
* A generated key: SQLite ``INTEGER PRIMARY KEY AUTOINCREMENT`` (a rowid alias that never reuses
  a number) must be a bigint taking its default from a sequence (BIGSERIAL) or an identity
  column on PostgreSQL, and the other way round; its sequence default is not compared further.
* NOT NULL: a primary-key column counts as NOT NULL on both sides. PostgreSQL enforces that; a
  rowid-table SQLite column declared ``TEXT PRIMARY KEY`` without NOT NULL technically accepts
  NULL (a documented SQLite quirk kept for compatibility), which this test does not hold against
  the migrations since both declare the same thing.
* Defaults: casts are dropped (``''::text`` -> ``''``), numbers compare by value, and FALSE/TRUE
  are 0/1 (as SQLite itself reads them), so a BOOLEAN DEFAULT FALSE matches INTEGER DEFAULT 0.
* Indexes created by CREATE INDEX compare by name. The indexes behind PRIMARY KEY and UNIQUE
  constraints are named by the engine (``sqlite_autoindex_users_1`` vs ``users_name_key``), so
  those compare as the constraints they back: the primary key's columns, and the set of UNIQUE
  column lists of each table.
* An index key that is an expression, not a column, compares as its predicate signature
  would (below), marked as an expression.
* Partial-index predicates compare loosely: casts, parentheses, brackets, commas and the words
  ANY/ARRAY are dropped, IN becomes =, != becomes <>; what remains -- the columns, literals,
  operators and keywords -- must be the same multiset on both sides. So a different status
  literal, column, operator or an extra clause fails; a mere reordering or re-bracketing does
  not.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest
import pytest_asyncio

from pgtest import PG_DSN, fresh_schema
from skiff.store import postgres as pg_store
from skiff.store import sqlite as sqlite_store

#: Bookkeeping of the migration runners, not part of the model.
IGNORED_TABLES = frozenset({"schema_migrations"})

#: Each PostgreSQL type the migrations may use, as the SQLite type that stores the same values.
_PG_TO_SQLITE = {
    "integer": "INTEGER",
    "bigint": "INTEGER",
    "boolean": "INTEGER",
    "double precision": "REAL",
    "text": "TEXT",
    "bytea": "BLOB",
}
_SQLITE_TYPES = frozenset(_PG_TO_SQLITE.values())

#: SQLite's ON DELETE / ON UPDATE words by PostgreSQL's ``pg_constraint`` action codes.
_PG_FK_ACTIONS = {
    "a": "NO ACTION",
    "r": "RESTRICT",
    "c": "CASCADE",
    "n": "SET NULL",
    "d": "SET DEFAULT",
}


# -- the neutral description of a schema ---------------------------------------------------


@dataclass(frozen=True)
class Column:
    declared: str = field(compare=False)  # the type as each engine reports it, for messages
    type: str  # INTEGER, REAL, TEXT or BLOB (or the raw declared type, which then fails)
    not_null: bool
    default: str | None  # normalised (see _normalise_default)
    generated_key: bool  # AUTOINCREMENT rowid alias / BIGSERIAL or identity


@dataclass(frozen=True)
class Index:
    table: str
    columns: tuple[str, ...]
    unique: bool
    predicate: str | None  # raw text, for messages
    predicate_signature: tuple[str, ...] | None


@dataclass
class Catalogue:
    columns: dict[str, dict[str, Column]] = field(default_factory=dict)  # table -> name -> col
    primary_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    uniques: dict[str, set[tuple[str, ...]]] = field(default_factory=dict)
    indexes: dict[str, Index] = field(default_factory=dict)
    foreign_keys: dict[str, set[tuple[Any, ...]]] = field(default_factory=dict)


# -- normalisation -------------------------------------------------------------------------

_CAST = re.compile(
    r"::\s*(?:double precision|character varying|timestamp with(?:out)? time zone"
    r"|[A-Za-z_][A-Za-z0-9_]*)(?:\[\])?",
    re.IGNORECASE,
)
_TOKEN = re.compile(
    r"'(?:[^']|'')*'"  # string literal
    r'|"(?:[^"]|"")*"'  # quoted identifier
    r"|[A-Za-z_][A-Za-z0-9_$]*"  # identifier or keyword
    r"|\d+(?:\.\d+)?"  # number
    r"|<>|!=|<=|>=|==|[=<>]"  # comparison
    r"|\S"  # anything else, one character at a time
)
_PREDICATE_NOISE = frozenset({"(", ")", "[", "]", ",", "any", "array"})
_OPERATOR_SYNONYMS = {"!=": "<>", "==": "=", "in": "="}


def _strip_sql_comments(sql: str) -> str:
    return re.sub(r"--[^\n]*", "", sql)


def _number(text: str) -> str | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return repr(value)


def predicate_signature(predicate: str) -> tuple[str, ...]:
    """A partial-index predicate as the sorted multiset of what it mentions (see the module
    docstring): loose about form, strict about columns, literals and operators."""
    tokens = []
    for token in _TOKEN.findall(_CAST.sub("", predicate)):
        if token.startswith("'"):
            tokens.append(token)
        elif token.startswith('"'):
            tokens.append(token[1:-1].replace('""', '"').lower())
        elif (num := _number(token)) is not None:
            tokens.append(num)
        else:
            word = token.lower()
            if word in _PREDICATE_NOISE:
                continue
            tokens.append(_OPERATOR_SYNONYMS.get(word, word))
    return tuple(sorted(tokens))


_IDENTIFIER = re.compile(r'[A-Za-z_][A-Za-z0-9_$]*|"(?:[^"]|"")*"')


def index_key(text: str) -> str:
    """One key of an index as comparable text: a column by its name, an expression by its
    signature (``predicate_signature``: the same looseness about form)."""
    text = text.strip()
    if _IDENTIFIER.fullmatch(text):
        return _unquote(text)
    return "expression: " + " ".join(predicate_signature(text))


def _normalise_default(raw: str | None, sqlite_type: str) -> str | None:
    """A column default as comparable text: no casts or wrapping parentheses, numbers by value,
    FALSE/TRUE as 0/1 (SQLite itself reads them so), string literals as written."""
    if raw is None:
        return None
    text = _CAST.sub("", raw).strip()
    while text.startswith("(") and text.endswith(")"):
        text = text[1:-1].strip()
    text = {"false": "0", "true": "1"}.get(text.lower(), text)
    if text.startswith("'") and text.endswith("'") and sqlite_type not in ("TEXT", "BLOB"):
        # PostgreSQL writes e.g. a negative number as '-1'::integer.
        text = text[1:-1]
    if (num := _number(text)) is not None:
        return num
    return text if text.startswith("'") else text.lower()


# -- SQLite --------------------------------------------------------------------------------


def _sqlite_where(index_sql: str | None) -> str | None:
    if index_sql is None:
        return None
    match = re.search(r"\bWHERE\b(.*)$", _strip_sql_comments(index_sql), re.IGNORECASE | re.DOTALL)
    return match.group(1).strip() if match else None


def _sqlite_index_keys(index_sql: str) -> list[str]:
    """The keys of a CREATE INDEX as written: what its parentheses after ``ON table`` hold,
    split at the commas outside nested parentheses."""
    body = _strip_sql_comments(index_sql)
    start = re.search(r"\bON\s+\S+?\s*\(", body, re.IGNORECASE | re.DOTALL)
    assert start is not None, index_sql
    keys, depth, current = [], 0, ""
    for char in body[start.end() :]:
        if char == ")" and depth == 0:
            break
        if char == "," and depth == 0:
            keys.append(current)
            current = ""
            continue
        depth += {"(": 1, ")": -1}.get(char, 0)
        current += char
    return [*keys, current]


def read_sqlite_catalogue(conn: sqlite3.Connection) -> Catalogue:
    cat = Catalogue()
    tables = {
        name: sql
        for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
        if not name.startswith("sqlite_") and name not in IGNORED_TABLES
    }
    index_sql = dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'index'"))
    for table, table_sql in tables.items():
        body = _strip_sql_comments(table_sql)
        without_rowid = re.search(r"\bWITHOUT\s+ROWID\b", body, re.IGNORECASE) is not None
        autoincrement = re.search(r"\bAUTOINCREMENT\b", body, re.IGNORECASE) is not None
        info = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
        pk = tuple(row[1] for row in sorted((r for r in info if r[5] > 0), key=lambda r: r[5]))
        cat.primary_keys[table] = pk
        columns = {}
        for _cid, name, declared, notnull, default, _pk in info:
            sqlite_type = declared.upper()
            rowid_alias = pk == (name,) and sqlite_type == "INTEGER" and not without_rowid
            columns[name] = Column(
                declared=declared,
                type=sqlite_type,
                not_null=bool(notnull) or name in pk,
                default=_normalise_default(default, sqlite_type),
                generated_key=rowid_alias and autoincrement,
            )
        cat.columns[table] = columns

        cat.uniques[table] = set()
        for _seq, name, unique, origin, _partial in conn.execute(f'PRAGMA index_list("{table}")'):
            info = sorted(conn.execute(f'PRAGMA index_info("{name}")'), key=lambda r: r[0])
            # An expression key has no column name (cid -2): its text is the index's own.
            written = _sqlite_index_keys(index_sql[name]) if origin == "c" else []
            cols = tuple(
                index_key(written[seqno]) if column is None else column
                for seqno, _cid, column in info
            )
            if origin == "u":
                cat.uniques[table].add(cols)
            elif origin == "c":
                where = _sqlite_where(index_sql.get(name))
                cat.indexes[name] = Index(
                    table=table,
                    columns=cols,
                    unique=bool(unique),
                    predicate=where,
                    predicate_signature=None if where is None else predicate_signature(where),
                )

        fks: dict[int, list[Any]] = {}
        for fk_id, _seq, ref_table, frm, to, on_update, on_delete, _match in conn.execute(
            f'PRAGMA foreign_key_list("{table}")'
        ):
            fks.setdefault(fk_id, []).append((frm, to, ref_table, on_update, on_delete))
        cat.foreign_keys[table] = set()
        for parts in fks.values():
            ref_table = parts[0][2]
            to_cols = tuple(p[1] for p in parts)
            if all(c is None for c in to_cols):  # REFERENCES t without columns: t's primary key
                ref_info = conn.execute(f'PRAGMA table_info("{ref_table}")').fetchall()
                to_cols = tuple(
                    r[1] for r in sorted((r for r in ref_info if r[5]), key=lambda r: r[5])
                )
            cat.foreign_keys[table].add(
                (tuple(p[0] for p in parts), ref_table, to_cols, parts[0][3], parts[0][4])
            )
    return cat


# -- PostgreSQL ----------------------------------------------------------------------------

_PG_COLUMNS = """
SELECT table_name, column_name, data_type, is_nullable, column_default, is_identity
FROM information_schema.columns
WHERE table_schema = $1
ORDER BY table_name, ordinal_position
"""

_PG_TABLES = """
SELECT table_name FROM information_schema.tables
WHERE table_schema = $1 AND table_type = 'BASE TABLE'
"""

_PG_CONSTRAINTS = """
SELECT rel.relname AS table_name, con.contype::text AS contype,
       array(SELECT a.attname FROM unnest(con.conkey) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.attnum
             ORDER BY k.ord) AS columns,
       ref.relname AS ref_table,
       array(SELECT a.attname FROM unnest(con.confkey) WITH ORDINALITY AS k(attnum, ord)
             JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.attnum
             ORDER BY k.ord) AS ref_columns,
       con.confupdtype::text AS confupdtype, con.confdeltype::text AS confdeltype
FROM pg_constraint con
JOIN pg_class rel ON rel.oid = con.conrelid
JOIN pg_namespace n ON n.oid = rel.relnamespace
LEFT JOIN pg_class ref ON ref.oid = con.confrelid
WHERE n.nspname = $1 AND con.contype IN ('p', 'u', 'f')
"""

_PG_INDEXES = """
SELECT t.relname AS table_name, ic.relname AS index_name, i.indisunique,
       array(SELECT pg_get_indexdef(i.indexrelid, k, true)
             FROM generate_series(1, i.indnkeyatts) AS k ORDER BY k) AS columns,
       pg_get_expr(i.indpred, i.indrelid, true) AS predicate,
       EXISTS (SELECT 1 FROM pg_constraint con
               WHERE con.conindid = i.indexrelid AND con.conrelid = i.indrelid
                 AND con.contype IN ('p', 'u', 'x')) AS backs_constraint
FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
JOIN pg_class t ON t.oid = i.indrelid
JOIN pg_namespace n ON n.oid = t.relnamespace
WHERE n.nspname = $1
"""


def _unquote(ident: str) -> str:
    return ident[1:-1].replace('""', '"') if ident.startswith('"') else ident


async def read_pg_catalogue(conn: Any, schema: str) -> Catalogue:
    cat = Catalogue()
    tables = {r["table_name"] for r in await conn.fetch(_PG_TABLES, schema)} - IGNORED_TABLES
    for table in tables:
        cat.columns[table] = {}
        cat.primary_keys[table] = ()
        cat.uniques[table] = set()
        cat.foreign_keys[table] = set()
    for r in await conn.fetch(_PG_COLUMNS, schema):
        if r["table_name"] not in tables:
            continue
        data_type = r["data_type"]
        sqlite_type = _PG_TO_SQLITE.get(data_type, f"<no mapping for PostgreSQL {data_type}>")
        default = r["column_default"]
        generated = r["is_identity"] == "YES" or (
            default is not None and default.startswith("nextval(")
        )
        cat.columns[r["table_name"]][r["column_name"]] = Column(
            declared=data_type,
            # A generated key must be 64-bit like SQLite's rowid: BIGSERIAL, not SERIAL.
            type=sqlite_type if not generated or data_type == "bigint" else f"<{data_type} key>",
            not_null=r["is_nullable"] == "NO",
            default=None if generated else _normalise_default(default, sqlite_type),
            generated_key=generated,
        )
    for r in await conn.fetch(_PG_CONSTRAINTS, schema):
        table = r["table_name"]
        if table not in tables:
            continue
        cols = tuple(r["columns"])
        if r["contype"] == "p":
            cat.primary_keys[table] = cols
        elif r["contype"] == "u":
            cat.uniques[table].add(cols)
        else:
            cat.foreign_keys[table].add(
                (
                    cols,
                    r["ref_table"],
                    tuple(r["ref_columns"]),
                    _PG_FK_ACTIONS[r["confupdtype"]],
                    _PG_FK_ACTIONS[r["confdeltype"]],
                )
            )
    for r in await conn.fetch(_PG_INDEXES, schema):
        if r["table_name"] not in tables or r["backs_constraint"]:
            continue
        predicate = r["predicate"]
        cat.indexes[r["index_name"]] = Index(
            table=r["table_name"],
            columns=tuple(index_key(c) for c in r["columns"]),
            unique=r["indisunique"],
            predicate=predicate,
            predicate_signature=None if predicate is None else predicate_signature(predicate),
        )
    return cat


# -- fixtures ------------------------------------------------------------------------------


# Each side is migrated and read once per module: the tests below only look at the result.


@pytest.fixture(scope="module")
def sqlite_catalogue(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Catalogue]:
    conn = sqlite_store._connect(tmp_path_factory.mktemp("schema") / "skiff.db")
    try:
        sqlite_store.migrate(conn)
        yield read_sqlite_catalogue(conn)
    finally:
        conn.close()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pg_schema() -> AsyncIterator[str]:
    async with fresh_schema() as name:
        yield name


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pg_catalogue(pg_schema: str) -> Catalogue:
    conn = await asyncpg.connect(PG_DSN, timeout=5, server_settings={"search_path": pg_schema})
    try:
        await pg_store.migrate(conn, pg_schema)
        return await read_pg_catalogue(conn, pg_schema)
    finally:
        await conn.close()


@dataclass
class Both:
    sqlite: Catalogue
    pg: Catalogue

    def shared_tables(self) -> list[str]:
        return sorted(self.sqlite.columns.keys() & self.pg.columns.keys())

    def shared_columns(self) -> Iterator[tuple[str, str, Column, Column]]:
        for table in self.shared_tables():
            lite, pg = self.sqlite.columns[table], self.pg.columns[table]
            for name in sorted(lite.keys() & pg.keys()):
                yield table, name, lite[name], pg[name]


@pytest.fixture(scope="module")
def both(sqlite_catalogue: Catalogue, pg_catalogue: Catalogue) -> Both:
    return Both(sqlite=sqlite_catalogue, pg=pg_catalogue)


# -- the comparison ------------------------------------------------------------------------


def test_both_backends_have_the_same_tables(both: Both) -> None:
    assert sorted(both.sqlite.columns) == sorted(both.pg.columns)


def test_both_backends_have_the_same_columns_in_each_table(both: Both) -> None:
    differences = [
        f"{table}: only in {side}: {sorted(cols)}"
        for table in both.shared_tables()
        for side, cols in (
            ("sqlite", both.sqlite.columns[table].keys() - both.pg.columns[table].keys()),
            ("postgres", both.pg.columns[table].keys() - both.sqlite.columns[table].keys()),
        )
        if cols
    ]
    assert differences == []


def test_both_backends_give_each_column_a_compatible_type(both: Both) -> None:
    differences = [
        f"{table}.{name}: sqlite {lite.declared} vs postgres {pg.declared}"
        for table, name, lite, pg in both.shared_columns()
        if lite.type not in _SQLITE_TYPES or lite.type != pg.type
    ]
    assert differences == []


def test_both_backends_generate_the_same_keys(both: Both) -> None:
    """AUTOINCREMENT on SQLite exactly where PostgreSQL has BIGSERIAL (or identity)."""
    differences = [
        f"{table}.{name}: sqlite generated={lite.generated_key},"
        f" postgres generated={pg.generated_key}"
        for table, name, lite, pg in both.shared_columns()
        if lite.generated_key != pg.generated_key
    ]
    assert differences == []


def test_both_backends_agree_which_columns_are_not_null(both: Both) -> None:
    differences = [
        f"{table}.{name}: sqlite not_null={lite.not_null}, postgres not_null={pg.not_null}"
        for table, name, lite, pg in both.shared_columns()
        if lite.not_null != pg.not_null
    ]
    assert differences == []


def test_both_backends_give_each_column_the_same_default(both: Both) -> None:
    differences = [
        f"{table}.{name}: sqlite default {lite.default} vs postgres default {pg.default}"
        for table, name, lite, pg in both.shared_columns()
        # A generated key's default is its sequence: test_both_backends_generate_the_same_keys.
        if not pg.generated_key and lite.default != pg.default
    ]
    assert differences == []


def test_both_backends_have_the_same_primary_keys(both: Both) -> None:
    differences = [
        f"{table}: sqlite {both.sqlite.primary_keys[table]}"
        f" vs postgres {both.pg.primary_keys[table]}"
        for table in both.shared_tables()
        if both.sqlite.primary_keys[table] != both.pg.primary_keys[table]
    ]
    assert differences == []


def test_both_backends_have_the_same_unique_constraints(both: Both) -> None:
    differences = [
        f"{table}: sqlite {sorted(both.sqlite.uniques[table])}"
        f" vs postgres {sorted(both.pg.uniques[table])}"
        for table in both.shared_tables()
        if both.sqlite.uniques[table] != both.pg.uniques[table]
    ]
    assert differences == []


def test_both_backends_have_the_same_foreign_keys(both: Both) -> None:
    differences = [
        f"{table}: sqlite {sorted(both.sqlite.foreign_keys[table])}"
        f" vs postgres {sorted(both.pg.foreign_keys[table])}"
        for table in both.shared_tables()
        if both.sqlite.foreign_keys[table] != both.pg.foreign_keys[table]
    ]
    assert differences == []


def test_both_backends_have_the_same_indexes(both: Both) -> None:
    assert sorted(both.sqlite.indexes) == sorted(both.pg.indexes)


def test_both_backends_index_the_same_columns(both: Both) -> None:
    differences = []
    for name in sorted(both.sqlite.indexes.keys() & both.pg.indexes.keys()):
        lite, pg = both.sqlite.indexes[name], both.pg.indexes[name]
        shape_lite = (lite.table, lite.columns, lite.unique)
        shape_pg = (pg.table, pg.columns, pg.unique)
        if shape_lite != shape_pg:
            differences.append(
                f"{name}: sqlite (table, columns, unique)={shape_lite} vs postgres {shape_pg}"
            )
    assert differences == []


def test_both_backends_restrict_partial_indexes_alike(both: Both) -> None:
    differences = []
    for name in sorted(both.sqlite.indexes.keys() & both.pg.indexes.keys()):
        lite, pg = both.sqlite.indexes[name], both.pg.indexes[name]
        if lite.predicate_signature != pg.predicate_signature:
            differences.append(
                f"{name}: sqlite WHERE {lite.predicate!r} vs postgres WHERE {pg.predicate!r}"
            )
    assert differences == []


# -- the normalisation itself (no database needed) -----------------------------------------


def test_predicates_written_differently_by_each_engine_compare_equal() -> None:
    assert predicate_signature("status = 'IN_QUEUE'") == predicate_signature(
        "(status = 'IN_QUEUE'::text)"
    )
    assert predicate_signature("retain_until IS NOT NULL") == predicate_signature(
        "(retain_until IS NOT NULL)"
    )
    assert predicate_signature("status IN ('A', 'B')") == predicate_signature(
        "(status = ANY (ARRAY['A'::text, 'B'::text]))"
    )


def test_predicates_that_mean_different_rows_compare_unequal() -> None:
    queued = predicate_signature("(status = 'IN_QUEUE'::text)")
    assert predicate_signature("status = 'IN_PROGRESS'") != queued
    assert predicate_signature("state = 'IN_QUEUE'") != queued
    assert predicate_signature("status <> 'IN_QUEUE'") != queued
    assert predicate_signature("status = 'IN_QUEUE' OR stop_pending = 1") != queued


def test_index_keys_compare_as_columns_or_as_expressions() -> None:
    assert index_key("lease_until") == index_key('"lease_until"') == "lease_until"
    written = "CASE WHEN run_deadline IS NULL OR lease_until < run_deadline THEN lease_until\n"
    written += "ELSE run_deadline END"
    # PostgreSQL's pg_get_indexdef spelling of the same key.
    read_back = "(\nCASE\n    WHEN run_deadline IS NULL OR lease_until < run_deadline"
    read_back += " THEN lease_until\n    ELSE run_deadline\nEND)"
    assert index_key(written) == index_key(read_back)
    assert index_key(written).startswith("expression: ")
    assert index_key(written) != index_key(written.replace("lease_until <", "lease_until <="))
    assert index_key(written) != index_key("run_deadline")


def test_sqlite_index_keys_are_read_as_written() -> None:
    sql = "CREATE INDEX i ON jobs ((CASE WHEN a < b THEN a ELSE b END), seq) WHERE x = 1"
    assert _sqlite_index_keys(sql) == ["(CASE WHEN a < b THEN a ELSE b END)", " seq"]
    assert _sqlite_index_keys("CREATE INDEX i ON t (a, b)") == ["a", " b"]


def test_defaults_compare_without_casts_and_with_booleans_as_numbers() -> None:
    assert _normalise_default("''::text", "TEXT") == _normalise_default("''", "TEXT")
    assert _normalise_default("'pending'::text", "TEXT") == "'pending'"
    assert _normalise_default("false", "INTEGER") == _normalise_default("0", "INTEGER")
    assert _normalise_default("true", "INTEGER") == _normalise_default("1", "INTEGER")
    assert _normalise_default("0", "INTEGER") == _normalise_default("0.0", "REAL")
    assert _normalise_default("'-1'::integer", "INTEGER") == _normalise_default("-1", "INTEGER")
    assert _normalise_default("'0'", "TEXT") != _normalise_default("0", "TEXT")
    assert _normalise_default("1800000", "INTEGER") != _normalise_default("180000", "INTEGER")
