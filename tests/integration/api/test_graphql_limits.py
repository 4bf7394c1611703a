"""``/graphql`` against a hostile key holder, through the whole app in-process: a body past
1 MB is a 413 before it is read (a declared length or a chunked one); a query with thousands
of aliases, or too deep, is refused at once with a short answer that quotes nothing of it; NUL
or a lone surrogate in a variable is a clear error, never an internal one (on PostgreSQL too);
an expected error is logged in one line at INFO, an unexpected one at ERROR with its traceback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from in_process import InProcess, running
from pgtest import PG_DSN, fresh_schema
from skiff.api.graphql import MAX_DOCKER_ARGS
from skiff.api.graphql_limits import BODY_LIMIT, MAX_DEPTH, NUL_REFUSED

TOO_LARGE = {"errors": [{"message": "the request body is larger than 1 MB"}]}
PIECE = 64 * 1024
#: 2 MB in 64 KB pieces.
PIECES = 2 * BODY_LIMIT // PIECE


class Pieces:
    """A request body sent a piece at a time, counting how many pieces were taken from it."""

    def __init__(self) -> None:
        self.taken = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        yield b'{"query": "' + b" " * (PIECE - 11)
        self.taken += 1
        for _ in range(PIECES - 1):
            yield b" " * PIECE
            self.taken += 1


async def ask(app: InProcess, query: str, variables: Any = None) -> httpx.Response:
    body: dict[str, Any] = {"query": query}
    if variables is not None:
        body["variables"] = variables
    return await app.http.post("/graphql", json=body)


async def test_a_2mb_body_of_declared_length_is_a_413_before_a_byte_of_it_is_read(
    in_process: InProcess,
) -> None:
    body = Pieces()
    answer = await in_process.http.post(
        "/graphql",
        content=body.__aiter__(),
        headers={"Content-Length": str(PIECES * PIECE), "Content-Type": "application/json"},
    )
    assert answer.status_code == 413
    assert answer.json() == TOO_LARGE
    assert answer.headers["connection"] == "close"
    assert body.taken == 0


async def test_a_2mb_chunked_body_is_a_413_once_past_1mb_the_rest_unread(
    in_process: InProcess,
) -> None:
    body = Pieces()
    answer = await in_process.http.post(
        "/graphql", content=body.__aiter__(), headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 413
    assert answer.json() == TOO_LARGE
    assert body.taken <= BODY_LIMIT // PIECE + 1 < PIECES


async def test_a_large_body_without_a_valid_key_is_a_401_before_it_is_read(
    in_process: InProcess,
) -> None:
    body = Pieces()
    answer = await in_process.anonymous.post(
        "/graphql",
        content=body.__aiter__(),
        headers={"Content-Length": str(PIECES * PIECE), "Content-Type": "application/json"},
    )
    assert answer.status_code == 401
    assert answer.json()["errors"][0]["message"]
    assert body.taken == 0


async def test_a_body_just_under_the_cap_is_read_and_answered(in_process: InProcess) -> None:
    query = "{ myself { id } }" + " " * (BODY_LIMIT - 100)
    answer = await ask(in_process, query)
    assert answer.status_code == 200, answer.text
    assert answer.json()["data"]["myself"]["id"]


async def test_3000_aliases_are_refused_at_once_with_a_small_answer_quoting_nothing(
    in_process: InProcess,
) -> None:
    query = "{ " + " ".join(f"a{i}: myself {{ id pods {{ id }} }}" for i in range(3000)) + " }"
    started = time.perf_counter()
    answer = await ask(in_process, query)
    assert time.perf_counter() - started < 2.0
    assert answer.status_code == 200
    assert len(answer.content) < 300
    assert "data" not in answer.json()
    (error,) = answer.json()["errors"]
    assert "more than 10000 tokens" in error["message"]
    assert "a1:" not in answer.text and "myself" not in answer.text


async def test_many_short_aliases_are_refused_by_the_alias_limit(in_process: InProcess) -> None:
    query = "{ myself { " + " ".join(f"a{i}: id" for i in range(3000)) + " } }"
    answer = await ask(in_process, query)
    assert "data" not in answer.json()
    messages = [error["message"] for error in answer.json()["errors"]]
    assert "the query has too many aliases: at most 50" in messages
    assert len(answer.content) < 300


async def test_a_query_too_deep_is_refused(in_process: InProcess) -> None:
    depth = MAX_DEPTH + 5
    query = "{ " + "myself { " * (depth - 1) + "id" + " }" * (depth - 1) + " }"
    answer = await ask(in_process, query)
    assert answer.json() == {
        "errors": [
            {"message": f"the query is too deep: {depth} fields nested, at most {MAX_DEPTH}"}
        ]
    }


async def test_a_syntax_error_in_a_huge_query_does_not_quote_it(in_process: InProcess) -> None:
    # A token the parser does not expect: its error names it.
    query = '{ myself { "' + "x" * 500_000 + '" } }'
    answer = await ask(in_process, query)
    assert answer.status_code == 200
    assert len(answer.content) < 500
    assert answer.json()["errors"][0]["message"].startswith("Syntax Error")


async def test_introspection_is_off(in_process: InProcess) -> None:
    answer = await ask(in_process, "{ __schema { types { name } } }")
    assert "data" not in answer.json()
    assert "introspection" in answer.json()["errors"][0]["message"].lower()


async def test_a_variable_not_an_object_is_a_400(in_process: InProcess) -> None:
    body = {"query": "{ myself { id } }", "variables": [1] * 10}
    answer = await in_process.http.post("/graphql", json=body)
    assert answer.status_code == 400
    assert "variables" in answer.json()["errors"][0]["message"]


#: The operations that look a NUL-holding id up (PostgreSQL answered them with an internal
#: error), each taking it from a variable.
BY_ID = {
    "pod": "query ($id: String!) { pod(input: {podId: $id}) { id } }",
    "podStop": "mutation ($id: String!) { podStop(input: {podId: $id}) { id } }",
    "podResume": "mutation ($id: String!) { podResume(input: {podId: $id}) { id } }",
    "podTerminate": "mutation ($id: String!) { podTerminate(input: {podId: $id}) }",
    "deleteRegistryAuth": "mutation ($id: String!) { deleteRegistryAuth(registryAuthId: $id) }",
    "podTemplate": "query ($id: String!) { podTemplate(id: $id) { id } }",
    "endpoint": "query ($id: String!) { myself { endpoint(id: $id) { id } } }",
    "deleteEndpoint": "mutation ($id: String!) { deleteEndpoint(id: $id) }",
}


async def assert_nul_refused_everywhere(app: InProcess) -> None:
    for name, query in BY_ID.items():
        answer = await ask(app, query, {"id": "pod\x00x"})
        assert answer.status_code == 200, (name, answer.text)
        assert answer.json() == {"errors": [{"message": NUL_REFUSED}]}, name
        # The id written in the query, NUL as GraphQL's braced escape.
        written = query.replace("($id: String!) ", "").replace("$id", '"pod\\u{0}x"')
        answer = await ask(app, written)
        assert answer.json() == {"errors": [{"message": NUL_REFUSED}]}, name


async def test_nul_in_a_variable_or_a_braced_escape_is_refused_before_any_lookup(
    in_process: InProcess,
) -> None:
    await assert_nul_refused_everywhere(in_process)


async def test_nul_in_a_variables_key_is_refused(in_process: InProcess) -> None:
    answer = await ask(in_process, "{ myself { id } }", {"x\x00": 1})
    assert answer.json() == {"errors": [{"message": NUL_REFUSED}]}


async def test_a_lone_surrogate_in_a_variable_is_a_400_not_an_internal_error(
    in_process: InProcess,
) -> None:
    body = b'{"query": "query ($id: String!) { pod(input: {podId: $id}) { id } }",'
    body += b' "variables": {"id": "a\\udfffb"}}'
    answer = await in_process.http.post(
        "/graphql", content=body, headers={"Content-Type": "application/json"}
    )
    assert answer.status_code == 400
    assert answer.json() == {"errors": [{"message": "the body is not JSON"}]}


async def test_nul_in_a_variable_is_refused_on_postgresql_too(tmp_path: Path) -> None:
    async with (
        fresh_schema() as schema,
        running(tmp_path / "data", database_url=PG_DSN, database_schema=schema) as app,
    ):
        await assert_nul_refused_everywhere(app)
        # The same lookups with a storable id: answered, not refused.
        answer = await ask(app, BY_ID["pod"], {"id": "no-such-pod"})
        assert answer.json() == {"data": {"pod": None}}


def graphql_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith(("skiff.api.graphql", "ariadne"))]


@pytest.mark.parametrize(
    "query",
    [
        'mutation { podStop(input: {podId: "no-such-pod"}) { id } }',
        "{ myself { id ",
        "{ myself { savingsPlans { id } } }",
    ],
    ids=["not found", "syntax", "validation"],
)
async def test_an_expected_error_is_logged_in_one_line_at_info_without_traceback(
    in_process: InProcess, caplog: pytest.LogCaptureFixture, query: str
) -> None:
    caplog.set_level(logging.INFO)
    answer = await ask(in_process, query)
    assert answer.json()["errors"]
    records = graphql_records(caplog)
    assert records, "the error was not logged"
    for record in records:
        assert record.levelno == logging.INFO
        assert record.exc_info is None
        assert "\n" not in record.getMessage()


async def test_an_unexpected_failure_is_logged_at_error_with_its_traceback_and_not_sent(
    in_process: InProcess, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*_args: Any) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr(in_process.services.pods, "all", broken)
    answer = await ask(in_process, "{ myself { pods { id } } }")
    (error,) = answer.json()["errors"]
    assert error["message"] == "internal error: the server's log has the details"
    assert "secret" not in answer.text
    (record,) = [r for r in graphql_records(caplog) if r.levelno >= logging.WARNING]
    assert record.levelno == logging.ERROR and record.exc_info is not None


async def test_a_docker_args_past_its_bound_is_refused_and_one_within_it_splits(
    in_process: InProcess,
) -> None:
    """A megabyte of ``dockerArgs`` in a variable that 50 aliases named was split 50 times by
    ``shlex``, about 20 s each on the event loop: one request held every tenant's for minutes."""
    save = "mutation($t: SaveTemplateInput) { saveTemplate(input: $t) { id dockerArgs } }"
    template = {"name": "t", "imageName": "local/worker"}
    too_long = {**template, "dockerArgs": "a" * (MAX_DOCKER_ARGS + 1)}
    answer = await ask(in_process, save, {"t": too_long})
    assert [e["message"] for e in answer.json()["errors"]] == [
        f"dockerArgs: at most {MAX_DOCKER_ARGS} characters"
    ]
    quoted = {**template, "dockerArgs": "python -c 'print(1)' \"a b\" c\\ d"}
    answer = await ask(in_process, save, {"t": quoted})
    assert "errors" not in answer.json(), answer.text
    assert answer.json()["data"]["saveTemplate"]["dockerArgs"] == "python -c 'print(1)' 'a b' 'c d'"
