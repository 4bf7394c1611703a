"""Property-based fuzzing of both interfaces from their own OpenAPI descriptions (schemathesis):
no input, however odd, gets a 5xx, and every answer matches what the description documents."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from harness import Server, running
from hypothesis import HealthCheck, given, settings
from schemathesis import checks

pytestmark = pytest.mark.e2e

#: What the interfaces promise: never a 5xx, and every answer documented (status, content type,
#: body schema, headers); input the description calls invalid is refused. Schema-valid input
#: may still be refused for what the description cannot say (an unknown templateId, say), so
#: positive-data acceptance is not among them.
CHECKS = [
    checks.not_a_server_error,
    checks.status_code_conformance,
    checks.content_type_conformance,
    checks.response_schema_conformance,
    checks.response_headers_conformance,
    checks.negative_data_rejection,
]

FUZZ = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with running(tmp_path_factory.mktemp("fuzz") / "data", env={"SKIFF_RATE_LIMITS": "off"}) as s:
        yield s


@pytest.fixture(scope="module")
def parked_endpoint(fuzz_server: Server) -> str:
    """A real endpoint with no workers, so fuzzed job requests reach the real handlers."""
    return str(fuzz_server.create_endpoint(workersMax=0)["id"])


@pytest.fixture(scope="module")
def v1_schema(fuzz_server: Server) -> Any:
    return schemathesis.openapi.from_url(f"{fuzz_server.url}/v1/openapi.json")


@pytest.fixture(scope="module")
def v2_schema(fuzz_server: Server) -> Any:
    schema = schemathesis.openapi.from_url(f"{fuzz_server.url}/v2/openapi.json")
    # The worker protocol answers only worker tokens, and the OpenAI routes wait for a worker
    # (tests/e2e covers both); the client routes are what users fuzz.
    return schema.exclude(tag="worker protocol").exclude(tag="openai")


def _fuzz(schema: Any, prepare: Any, headers: dict[str, str]) -> None:
    """Run every operation of ``schema`` through Hypothesis; collect what fails."""
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @FUZZ
        @given(case=operation.as_strategy())
        def check(case: Any) -> None:
            prepare(case)
            case.call_and_validate(headers=headers, checks=CHECKS)

        try:
            check()
        except Exception as exc:  # report every operation, not only the first
            failures.append(f"{operation.label}: {exc}")
    assert not failures, "\n\n".join(failures)


def test_management_api_never_fails_and_matches_its_description(
    fuzz_server: Server, v1_schema: Any
) -> None:
    _fuzz(v1_schema, lambda case: None, {"Authorization": f"Bearer {fuzz_server.key}"})


def test_job_interface_never_fails_and_matches_its_description(
    fuzz_server: Server, v2_schema: Any, parked_endpoint: str
) -> None:
    def prepare(case: Any) -> None:
        if case.path_parameters and "endpoint_id" in case.path_parameters:
            case.path_parameters["endpoint_id"] = parked_endpoint
        if case.operation.path.endswith("/runsync"):
            # An endpoint without workers holds a runsync to the end of its wait: keep it short.
            query = case.query if case.query is not None else {}
            wait = query.get("wait")
            if wait is None or (isinstance(wait, int) and 1000 <= wait <= 300000):
                query["wait"] = 1000
            case.query = query

    _fuzz(v2_schema, prepare, {"Authorization": f"Bearer {fuzz_server.key}"})
