"""Migrations written once for both databases, or once per dialect where their SQL differs."""

from __future__ import annotations

from pathlib import Path

import pytest

from skiff.store.migration_scripts import MigrationError, migrations
from skiff.store.named_queries import Dialect


def write(folder: Path, dialect: str, name: str, sql: str) -> None:
    (folder / dialect).mkdir(parents=True, exist_ok=True)
    (folder / dialect / name).write_text(sql)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for dialect in ("sqlite", "postgres", "shared"):
        (tmp_path / dialect).mkdir()
    return tmp_path


def test_shared_and_own_migrations_come_in_the_order_of_their_names(folder: Path) -> None:
    write(folder, "sqlite", "0001_init.sql", "CREATE TABLE a (x INTEGER);")
    write(folder, "postgres", "0001_init.sql", "CREATE TABLE a (x BIGINT);")
    write(folder, "shared", "0002_b.sql", "CREATE TABLE b (y TEXT);")
    write(folder, "sqlite", "0003_c.sql", "CREATE TABLE c (z BLOB);")
    write(folder, "sqlite", "README", "not a migration")
    assert [name for name, _sql in migrations(Dialect.SQLITE, folder)] == [
        "0001_init.sql",
        "0002_b.sql",
        "0003_c.sql",
    ]
    assert migrations(Dialect.POSTGRES, folder) == [
        ("0001_init.sql", "CREATE TABLE a (x BIGINT);"),
        ("0002_b.sql", "CREATE TABLE b (y TEXT);"),
    ]


def test_a_shared_migration_gets_sqlites_type_names_on_sqlite_only(folder: Path) -> None:
    sql = (
        "-- a flag and a time\n"
        "ALTER TABLE t ADD COLUMN at DOUBLE PRECISION NOT NULL DEFAULT 0;\n"
        "ALTER TABLE t ADD COLUMN done BOOLEAN NOT NULL DEFAULT FALSE;\n"
        "ALTER TABLE t ADD COLUMN on_ BOOLEAN NOT NULL DEFAULT TRUE;\n"
    )
    write(folder, "shared", "0001_t.sql", sql)
    assert migrations(Dialect.POSTGRES, folder) == [("0001_t.sql", sql)]
    assert migrations(Dialect.SQLITE, folder) == [
        (
            "0001_t.sql",
            "-- a flag and a time\n"
            "ALTER TABLE t ADD COLUMN at REAL NOT NULL DEFAULT 0;\n"
            "ALTER TABLE t ADD COLUMN done INTEGER NOT NULL DEFAULT 0;\n"
            "ALTER TABLE t ADD COLUMN on_ INTEGER NOT NULL DEFAULT 1;\n",
        )
    ]


@pytest.mark.parametrize(
    "sql",
    [
        "CREATE TABLE t (x REAL);",
        "CREATE TABLE t (x BYTEA);",
        "CREATE TABLE t (id BIGSERIAL PRIMARY KEY);",
        "CREATE TABLE t (id INTEGER PRIMARY KEY AUTOINCREMENT);",
        "CREATE FUNCTION f() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN END $$;",
    ],
)
def test_a_shared_migration_that_one_database_would_read_otherwise_is_refused(
    folder: Path, sql: str
) -> None:
    write(folder, "shared", "0001_t.sql", sql)
    with pytest.raises(MigrationError, match=r"0001_t\.sql .*write it per dialect"):
        migrations(Dialect.SQLITE, folder)


def test_a_comment_may_name_any_type(folder: Path) -> None:
    write(folder, "shared", "0001_t.sql", "-- not REAL: DOUBLE PRECISION\nCREATE TABLE t (x TEXT);")
    assert len(migrations(Dialect.POSTGRES, folder)) == 1


def test_a_name_both_shared_and_a_dialects_own_is_refused(folder: Path) -> None:
    write(folder, "shared", "0001_t.sql", "CREATE TABLE t (x TEXT);")
    write(folder, "postgres", "0001_t.sql", "CREATE TABLE t (x TEXT);")
    with pytest.raises(MigrationError, match=r"\['0001_t.sql'\] written both shared and for"):
        migrations(Dialect.POSTGRES, folder)


def test_the_packaged_migrations_are_numbered_alike_on_both_databases() -> None:
    sqlite = [name for name, _sql in migrations(Dialect.SQLITE)]
    assert sqlite == [name for name, _sql in migrations(Dialect.POSTGRES)]
    assert sqlite[0] == "0001_init.sql"
