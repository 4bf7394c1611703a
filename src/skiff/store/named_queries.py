"""Named SQL queries, read from ``.sql`` files and compiled for one dialect.

The store's SQL lives in ``store/queries/``: a file holds queries, each after a
``-- name: query_name`` line, written with named parameters (``:job_id``). A query both
databases run alike is written once in ``queries/*.sql``; one whose text really differs is
written once per dialect, in ``queries/sqlite/*.sql`` and ``queries/postgres/*.sql``, under the
same name and with the same parameters. The loader turns the named parameters into the
dialect's own: ``?`` for sqlite3 (one per use, so a parameter may appear twice) and ``$1..$n``
for asyncpg (one per name); the query keeps the order, so ``args`` binds a mapping either way.

Mistakes are refused when the queries load (at import of an adapter), not at the first call:
a name written twice, a dialect text with no counterpart in the other dialect or with other
parameters than it, a positional placeholder, a header without a query.
"""

from __future__ import annotations

import enum
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from importlib.resources.abc import Traversable


class Dialect(enum.Enum):
    SQLITE = "sqlite"
    POSTGRES = "postgres"


class QueryError(ValueError):
    """A query file, or the values given to a query, is not as the loader requires."""


@dataclass(frozen=True)
class Query:
    """One query in one dialect's placeholder style."""

    name: str
    sql: str
    #: The parameter each placeholder binds, in placeholder order.
    params: tuple[str, ...]

    #: The parameters it takes, each once.
    names: frozenset[str] = field(init=False, repr=False, compare=False)
    _pick: Callable[[Mapping[str, object]], tuple[object, ...]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", frozenset(self.params))
        object.__setattr__(self, "_pick", _picker(self.params))

    def args(self, values: Mapping[str, object]) -> tuple[object, ...]:
        """The positional arguments for ``sql``; every parameter must be given, nothing else."""
        # Every job's claim and finish binds through here: as many values as parameters, each
        # found, is the whole check when all is well.
        if len(values) == len(self.names):
            try:
                return self._pick(values)
            except KeyError:
                pass
        missing = self.names - values.keys()
        extra = values.keys() - self.names
        raise QueryError(
            f"query {self.name!r} takes {sorted(self.names)};"
            f" missing {sorted(missing)}, unknown {sorted(extra)}"
        )


def _picker(params: tuple[str, ...]) -> Callable[[Mapping[str, object]], tuple[object, ...]]:
    """The values of ``params`` from a mapping, as a tuple (itemgetter of one gives no tuple)."""
    if len(params) > 1:
        return operator.itemgetter(*params)
    if params:
        (name,) = params
        return lambda values: (values[name],)
    return lambda values: ()


_HEADER = re.compile(r"^--\s*name:\s*(\S*)\s*$")
_IDENT = re.compile(r"[A-Za-z_]\w*\Z")
# String literals, quoted identifiers and comments are skipped whole, so a colon or question
# mark inside them is no placeholder; ``::type`` casts are no parameter (the lookbehind).
_TOKENS = re.compile(
    r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*"
    r"|(?<![:\w]):(?P<name>[A-Za-z_]\w*)"
    r"|(?P<positional>\?|\$\d+)"
)


def parse(text: str, source: str) -> dict[str, str]:
    """The queries of one file, name -> SQL with named parameters."""
    queries: dict[str, str] = {}
    name: str | None = None
    lines: list[str] = []

    def close() -> None:
        if name is None:
            if "\n".join(lines).strip():
                raise QueryError(f"{source}: SQL before the first '-- name:' line")
            return
        sql = "\n".join(lines).strip().rstrip(";").strip()
        if not sql:
            raise QueryError(f"{source}: query {name!r} has no SQL")
        queries[name] = sql

    for line in text.splitlines():
        header = _HEADER.match(line.strip())
        if header is None:
            # Comments of a file (its preamble, a query's explanation) are not SQL to run.
            if not line.strip().startswith("--"):
                lines.append(line)
            continue
        close()
        name, lines = header.group(1), []
        if not _IDENT.match(name):
            raise QueryError(f"{source}: {name!r} is not a valid query name")
        if name in queries:
            raise QueryError(f"{source}: query {name!r} is written twice")
    close()
    return queries


def compile_query(name: str, sql: str, dialect: Dialect) -> Query:
    """``sql`` with its ``:name`` parameters in the dialect's placeholder style."""
    uses: list[str] = []
    order: list[str] = []

    def placeholder(match: re.Match[str]) -> str:
        if match.group("positional") is not None:
            raise QueryError(
                f"query {name!r} uses the positional {match.group('positional')!r};"
                " write named parameters (:name)"
            )
        param = match.group("name")
        if param is None:
            return match.group(0)
        if dialect is Dialect.SQLITE:
            uses.append(param)
            return "?"
        if param not in order:
            order.append(param)
        return f"${order.index(param) + 1}"

    text = _TOKENS.sub(placeholder, sql)
    return Query(name, text, tuple(uses if dialect is Dialect.SQLITE else order))


def _read_folder(folder: Traversable) -> dict[str, str]:
    found: dict[str, str] = {}
    if not folder.is_dir():
        return found
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.is_file() or not entry.name.endswith(".sql"):
            continue
        for name, sql in parse(entry.read_text(encoding="utf-8"), entry.name).items():
            if name in found:
                raise QueryError(f"{entry.name}: query {name!r} is written twice")
            found[name] = sql
    return found


def load(dialect: Dialect, root: Traversable | None = None) -> dict[str, Query]:
    """Every query for ``dialect``: the shared ones and the dialect's own, checked together."""
    if root is None:
        root = resources.files("skiff.store").joinpath("queries")
    shared = _read_folder(root)
    own = {d: _read_folder(root.joinpath(d.value)) for d in Dialect}
    for d, texts in own.items():
        for name in texts.keys() & shared.keys():
            raise QueryError(f"query {name!r} is written twice: shared and for {d.value}")
    sqlite_names, postgres_names = own[Dialect.SQLITE].keys(), own[Dialect.POSTGRES].keys()
    for name in sorted(sqlite_names ^ postgres_names):
        lacking = Dialect.POSTGRES if name in sqlite_names else Dialect.SQLITE
        raise QueryError(f"query {name!r} has no {lacking.value} text")
    for name in sorted(sqlite_names):
        wanted = {
            d: set(compile_query(name, own[d][name], Dialect.POSTGRES).params) for d in Dialect
        }
        if wanted[Dialect.SQLITE] != wanted[Dialect.POSTGRES]:
            raise QueryError(
                f"query {name!r} takes {sorted(wanted[Dialect.SQLITE])} on sqlite"
                f" but {sorted(wanted[Dialect.POSTGRES])} on postgres"
            )
    texts = {**shared, **own[dialect]}
    return {name: compile_query(name, sql, dialect) for name, sql in texts.items()}
