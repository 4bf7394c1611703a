"""``skiff migrate`` says what it did: on a new database, how many migrations it applied (the
schema made from nothing); run again, that none was due. On the test PostgreSQL, in a fresh
schema, and on SQLite."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from pgtest import PG_DSN, fresh_schema_sync
from skiff.cli import main
from skiff.store import migration_scripts
from skiff.store.named_queries import Dialect


def migrations(backend: str) -> list[str]:
    return [name for name, _sql in migration_scripts.migrations(Dialect(backend))]


def test_migrate_on_a_new_postgresql_schema_says_how_many_migrations_it_applied(
    tmp_path: Path,
) -> None:
    every = migrations("postgres")
    with fresh_schema_sync() as schema:
        env = {
            "SKIFF_DATA_DIR": str(tmp_path / "data"),
            "SKIFF_DATABASE_URL": PG_DSN,
            "SKIFF_DATABASE_SCHEMA": schema,
        }
        first = CliRunner().invoke(main, ["migrate"], env=env)
        assert first.exit_code == 0, first.output
        assert first.output.startswith(f"applied {len(every)} migrations ({every[0]} .. ")
        assert f"(schema {schema})" in first.output
        again = CliRunner().invoke(main, ["migrate"], env=env)
        assert again.exit_code == 0, again.output
        assert again.output.startswith("schema already up to date in ")
        assert "no migration to apply" in again.output


def test_migrate_on_a_new_sqlite_database_says_how_many_migrations_it_applied(
    tmp_path: Path,
) -> None:
    every = migrations("sqlite")
    env: dict[str, str | None] = {
        "SKIFF_DATA_DIR": str(tmp_path / "data"),
        "SKIFF_DATABASE_URL": None,  # unset: the data directory's SQLite file
        "SKIFF_DATABASE_SCHEMA": None,
    }
    first = CliRunner().invoke(main, ["migrate"], env=env)
    assert first.exit_code == 0, first.output
    assert first.output.startswith(f"applied {len(every)} migrations ({every[0]} .. {every[-1]})")
    again = CliRunner().invoke(main, ["migrate"], env=env)
    assert again.output.startswith("schema already up to date in ")
