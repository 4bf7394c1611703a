"""Property-based fuzzing of both interfaces from their own OpenAPI descriptions (schemathesis):
no input, however odd, gets a 5xx, and every answer matches what the description documents.

Schemathesis draws values a schema allows or plainly breaks; what broke skiff was hostile input
it does not draw: lone surrogates, NUL characters, JSON nested deeper than orjson writes,
numbers past 64 bits or past a double, and header bytes beyond ASCII. Hypothesis puts those
into every body field, path id, query parameter and key header of every route here, the worker
protocol and the OpenAI routes included. Everything runs on both stores (SQLite and PostgreSQL:
PostgreSQL text cannot hold NUL).
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from harness import Server, running
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import checks

from pgtest import PG_DSN, fresh_schema_sync

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


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def fuzz_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    env: dict[str, str | None] = {"SKIFF_RATE_LIMITS": "off"}
    data = tmp_path_factory.mktemp("fuzz") / "data"
    if request.param == "sqlite":
        with running(data, env=env) as server:
            yield server
        return
    with fresh_schema_sync() as schema:
        env.update(SKIFF_DATABASE_URL=PG_DSN, SKIFF_DATABASE_SCHEMA=schema)
        with running(data, env=env) as server:
            yield server


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


# -- hostile input ------------------------------------------------------------------------------

HOSTILE = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)


def _deep(depth: int, opener: str) -> str:
    closer = "]" if opener == "[" else "}"
    return (opener if opener == "[" else '{"a":') * depth + "1" * (opener != "[") + closer * depth


#: Hostile JSON values, as JSON text (so a lone surrogate travels as the escape a client sends).
SURROGATES = st.sampled_from(['"\\udfff"', '"a\\ud800"', '"\\udc80\\ud800"'])
NULS = st.sampled_from(['"\\u0000"', '"id\\u0000x"', '{"\\u0000": "v"}'])
DEEP = st.builds(_deep, st.integers(129, 1100), st.sampled_from(["[", "{"]))
NUMBERS = st.one_of(
    st.sampled_from(["1e308", "-1e308", "1e400", "1e-400", "NaN", "Infinity", "3.0", "true"]),
    st.integers(2**63, 2**200).map(str),
    st.integers(-(2**200), -(2**63)).map(str),
)
HOSTILE_JSON = st.one_of(SURROGATES, NULS, DEEP, NUMBERS)
#: Hostile path ids and query values, as they are written in a URL.
HOSTILE_PARAMS = st.sampled_from(
    ["%00", "a%00b", "%ED%BF%BF", "%C3%BC", "%FF%FE", "x" * 5000, "%5B" * 300, "-1", "1e400"]
)
#: Authorization values with bytes beyond ASCII (a header is bytes on the wire).
HOSTILE_KEYS = st.sampled_from(
    [
        b"Bearer \xff\xfe",
        b"\xc3\xbc",
        b"Bearer sk_\xe9\xff",
        b"skw_\xff",
        b"Bearer " + b"\x80" * 300,
    ]
)


def _not_a_server_error(answer: httpx.Response, what: str) -> None:
    assert answer.status_code < 500, f"{what}: {answer.status_code} {answer.text[:300]}"


def _with(base: dict[str, str], field: str, value: str) -> bytes:
    """``base`` (values as JSON text) with ``field`` set to ``value``, as a JSON body."""
    fields = {**base, field: value}
    return ("{" + ",".join(f'"{k}":{v}' for k, v in fields.items()) + "}").encode()


@pytest.fixture(scope="module")
def hostile_ids(fuzz_server: Server, parked_endpoint: str) -> dict[str, str]:
    """Real ids of every kind, so hostile bodies reach the real handlers and stores."""
    http = fuzz_server.http
    template = http.post("/v1/templates", json={"name": "hostile", "imageName": "x"}).json()
    auth = http.post(
        "/v1/containerregistryauth", json={"name": "hostile", "username": "u", "password": "p"}
    ).json()
    job = http.post(f"/v2/{parked_endpoint}/run", json={"input": {}}).json()
    volume = http.post("/v1/networkvolumes", json={"name": "hostile", "size": 1}).json()
    # A CPU pod, stopped at once, so hostile bodies reach the real pod handlers with little
    # running (a pod with nothing to run is refused).
    pod = http.post(
        "/v1/pods",
        json={
            "imageName": "x",
            "computeType": "CPU",
            "volumeInGb": 0,
            "dockerStartCmd": ["sleep", "3600"],
        },
    ).json()
    assert http.post(f"/v1/pods/{pod['id']}/stop").status_code == 200
    printed = subprocess.run(
        [
            sys.executable,
            "-m",
            "skiff",
            "worker-token",
            parked_endpoint,
            "--url",
            fuzz_server.url,
            "--data-dir",
            str(fuzz_server.data_dir),
        ],
        env=fuzz_server.env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    token = next(
        line.partition("=")[2].strip("'")
        for line in printed.splitlines()
        if "RUNPOD_AI_API_KEY=" in line
    )
    return {
        "template": template["id"],
        "auth": auth["id"],
        "endpoint": parked_endpoint,
        "job": job["id"],
        "token": token,
        "volume": volume["id"],
        "pod": pod["id"],
    }


#: Body routes with a body the route accepts, each value as JSON text.
def _body_routes(ids: dict[str, str]) -> list[tuple[str, str, dict[str, str]]]:
    endpoint, template, volume, pod = ids["endpoint"], ids["template"], ids["volume"], ids["pod"]
    t = f'"{template}"'
    return [
        ("POST", "/v1/templates", {"name": '"h-t"', "imageName": '"x"', "env": "{}"}),
        ("PATCH", f"/v1/templates/{template}", {"readme": '"r"', "dockerStartCmd": "[]"}),
        ("POST", f"/v1/templates/{template}/update", {"imageName": '"x"', "ports": "[]"}),
        ("POST", "/v1/endpoints", {"templateId": t, "computeType": '"CPU"', "workersMax": "0"}),
        ("POST", "/v1/endpoints", {"templateId": t, "type": '"LB"', "workersMax": "0"}),
        ("POST", "/v1/models", {"modelId": '"h-m"', "endpointId": f'"{endpoint}"'}),
        ("PATCH", f"/v1/endpoints/{endpoint}", {"workersMax": "0", "scalerValue": "4"}),
        ("POST", f"/v1/endpoints/{endpoint}/update", {"name": '"h"', "gpuTypeIds": "[]"}),
        ("PATCH", f"/v1/endpoints/{endpoint}", {"networkVolumeId": "null"}),
        ("POST", "/v1/networkvolumes", {"name": '"h-v"', "size": "1", "dataCenterId": '"d"'}),
        ("PATCH", f"/v1/networkvolumes/{volume}", {"name": '"h-v"', "size": "1"}),
        ("POST", f"/v1/networkvolumes/{volume}/update", {"name": '"h-v"', "size": "1"}),
        ("POST", "/v1/containerregistryauth", {"name": '"h-r"', "username": '"u"'}),
        ("POST", "/v1/pods", {"imageName": '"x"', "computeType": '"CPU"', "ports": "[]"}),
        ("PATCH", f"/v1/pods/{pod}", {"name": '"h-p"', "env": "{}", "volumeInGb": "20"}),
        ("POST", f"/v1/pods/{pod}/update", {"volumeMountPath": '"/w"', "dockerStartCmd": "[]"}),
        ("POST", f"/v2/{endpoint}/run", {"input": "{}", "webhook": '"https://example.com/"'}),
        ("POST", f"/v2/{endpoint}/runsync?wait=1000", {"input": "{}", "policy": "{}"}),
    ]


#: One value of each hostile class, for the sweep of every field.
REPRESENTATIVES = [
    '"\\udfff"',
    '"a\\u0000b"',
    '{"\\u0000": "v"}',
    _deep(300, "["),
    _deep(1100, "{"),
    str(2**64),
    "1e400",
    "NaN",
    '"3"',
    "true",
]


def test_every_body_field_holds_up_against_each_hostile_class(
    fuzz_server: Server, hostile_ids: dict[str, str]
) -> None:
    """The sweep: each class in each field, as it is and inside an object or a list."""
    failures = []
    for method, path, base in _body_routes(hostile_ids):
        for field in [*base, "password", "s3Config", "unknownField"]:
            for value in REPRESENTATIVES:
                for shown in (value, f'{{"K": {value}}}', f"[{value}]"):
                    answer = fuzz_server.http.request(
                        method,
                        path,
                        content=_with(base, field, shown),
                        headers={"Content-Type": "application/json"},
                    )
                    if answer.status_code >= 500:
                        failures.append(f"{method} {path} {field}={shown[:60]}: {answer.text}")
    assert not failures, "\n".join(failures[:20])


def test_hostile_bodies_never_get_a_server_error(
    fuzz_server: Server, hostile_ids: dict[str, str]
) -> None:
    routes = _body_routes(hostile_ids)
    fields = st.sampled_from(range(len(routes))).flatmap(
        lambda i: st.tuples(
            st.just(routes[i]),
            st.sampled_from([*routes[i][2], "password", "s3Config", "unknownField"]),
        )
    )

    @HOSTILE
    @given(route=fields, value=HOSTILE_JSON, nested=st.booleans())
    def check(route: tuple[tuple[str, str, dict[str, str]], str], value: str, nested: bool) -> None:
        (method, path, base), field = route
        if nested:  # the value inside an object or list the field holds
            value = f'{{"K": {value}}}' if field in ("env", "input", "s3Config") else f"[{value}]"
        body = _with(base, field, value)
        answer = fuzz_server.http.request(
            method, path, content=body, headers={"Content-Type": "application/json"}
        )
        _not_a_server_error(answer, f"{method} {path} {field}={value[:80]}")

    check()


def test_hostile_openai_bodies_are_refused_not_failed(
    fuzz_server: Server, hostile_ids: dict[str, str]
) -> None:
    endpoint = hostile_ids["endpoint"]

    # Only what must be refused: an accepted call waits for a worker the endpoint never starts.
    @HOSTILE
    @given(value=st.one_of(SURROGATES, DEEP, st.just("1e400")))
    def check(value: str) -> None:
        for route in ("chat/completions", "completions"):
            body = ('{"model": "m", "messages": ' + value + "}").encode()
            answer = fuzz_server.http.post(f"/v2/{endpoint}/openai/v1/{route}", content=body)
            assert answer.status_code == 400, f"{route} {value[:80]}: {answer.text[:300]}"

    check()


def test_hostile_path_ids_and_queries_never_get_a_server_error(
    fuzz_server: Server, hostile_ids: dict[str, str]
) -> None:
    endpoint, job, pod = hostile_ids["endpoint"], hostile_ids["job"], hostile_ids["pod"]
    worker = {"Authorization": hostile_ids["token"]}
    shapes = [
        ("GET", "/v1/templates/{x}", None),
        ("DELETE", "/v1/templates/{x}", None),
        ("GET", "/v1/endpoints/{x}?includeWorkers=true", None),
        ("DELETE", "/v1/endpoints/{x}", None),
        ("GET", "/v1/containerregistryauth/{x}", None),
        ("GET", f"/v1/endpoints/{endpoint}/logs?worker={{x}}&since={{x}}", None),
        ("GET", "/v2/{x}/health", None),
        ("GET", f"/v2/{endpoint}/status/{{x}}?ttl={{x}}", None),
        ("POST", f"/v2/{endpoint}/cancel/{{x}}", None),
        ("POST", f"/v2/{endpoint}/retry/{{x}}", None),
        ("GET", f"/v2/{endpoint}/stream/{{x}}", None),
        ("GET", f"/v2/{endpoint}/requests?cursor={{x}}&limit={{x}}", None),
        ("POST", f"/v2/{endpoint}/runsync?wait={{x}}", None),
        ("GET", f"/v2/{endpoint}/ping/{{x}}?job_id={{x}},{job}", worker),
        ("POST", f"/v2/{endpoint}/job-done/{{x}}/{{x}}", worker),
        ("POST", f"/v2/{endpoint}/job-stream/{{x}}/{job}", worker),
        ("GET", f"/v2/{endpoint}/job-take-batch/{{x}}?batch_size={{x}}", worker),
        ("GET", "/console/endpoints/{x}", None),
        ("GET", "/v1/pods/{x}", None),
        ("POST", "/v1/pods/{x}/reset", None),
        ("GET", f"/v1/pods/{pod}/logs?since={{x}}&tail={{x}}", None),
        ("GET", "/v1/pods?name={x}&gpuTypeId={x}&computeType={x}", None),
        ("GET", "/console/pods/{x}", None),
        ("GET", "/v1/billing/endpoints?bucketSize={x}&startTime={x}&grouping={x}", None),
        ("GET", "/v1/billing/pods?endTime={x}&podId={x}&gpuTypeId={x}", None),
        ("GET", "/v1/billing/networkvolumes?startTime={x}&networkVolumeId={x}", None),
        ("GET", "/lb/{x}/generate?q={x}", None),
        ("POST", "/lb/{x}", None),
        ("PATCH", f"/lb/{endpoint}/{{x}}?{{x}}", None),
        ("GET", "/v1/models/{x}", None),
        ("DELETE", "/v1/models/{x}", None),
        ("POST", "/v2/{x}/runsync", None),
        ("GET", "/console/models?{x}", None),
    ]

    @HOSTILE
    @given(shape=st.sampled_from(shapes), param=HOSTILE_PARAMS)
    def check(shape: tuple[str, str, dict[str, str] | None], param: str) -> None:
        method, template, headers = shape
        path = template.replace("{x}", param)
        body = b'{"input": {}, "output": 1}' if method == "POST" else None
        # A worker route's long-poll must not hold the test: a take that gets past the checks
        # may wait its hold time (10 s here), which is no error either.
        try:
            answer = fuzz_server.http.request(
                method, path, content=body, headers=headers, timeout=3
            )
        except httpx.ReadTimeout:
            assert "job-take" in path, path
            return
        _not_a_server_error(answer, f"{method} {path[:120]}")

    check()


def test_hostile_worker_bodies_never_get_a_server_error(
    fuzz_server: Server, hostile_ids: dict[str, str]
) -> None:
    endpoint = hostile_ids["endpoint"]
    worker = {"Authorization": hostile_ids["token"]}

    @HOSTILE
    @given(
        route=st.sampled_from(["job-done", "job-stream"]),
        field=st.sampled_from(["output", "error", "metrics", "status"]),
        value=HOSTILE_JSON,
    )
    def check(route: str, field: str, value: str) -> None:
        # A job of its own each time, held by a worker, so the body reaches the store.
        job = fuzz_server.http.post(f"/v2/{endpoint}/run", json={"input": {}}).json()["id"]
        path = f"/v2/{endpoint}/{route}/hostile-worker/{job}"
        answer = fuzz_server.http.post(path, content=_with({}, field, value), headers=worker)
        _not_a_server_error(answer, f"{route} {field}={value[:80]}")

    check()


def test_authorization_bytes_beyond_ascii_never_get_a_server_error(
    fuzz_server: Server, hostile_ids: dict[str, str]
) -> None:
    endpoint = hostile_ids["endpoint"]
    routes = [
        ("GET", "/v1/templates"),
        ("GET", f"/v2/{endpoint}/health"),
        ("POST", f"/v2/{endpoint}/run"),
        ("GET", f"/v2/{endpoint}/ping/hostile-worker"),
        ("POST", f"/v2/{endpoint}/job-done/hostile-worker/{hostile_ids['job']}"),
        ("GET", "/console/endpoints"),
        ("POST", f"/lb/{endpoint}/generate"),
    ]

    @HOSTILE
    @given(route=st.sampled_from(routes), key=HOSTILE_KEYS)
    def check(route: tuple[str, str], key: bytes) -> None:
        method, path = route
        with httpx.Client(base_url=fuzz_server.url, timeout=30) as client:
            answer = client.request(
                method, path, content=b'{"input": {}}', headers={"Authorization": key}
            )
        _not_a_server_error(answer, f"{method} {path} {key!r}")
        if not path.startswith("/console"):
            assert answer.status_code == 401, (path, key, answer.text)

    check()


def test_hostile_text_is_refused_naming_its_field_on_every_store(
    fuzz_server: Server, hostile_ids: dict[str, str]
) -> None:
    """The examples of the issue, exactly: each a 400 that names the field."""
    http = fuzz_server.http
    cases = [
        ("/v1/templates", b'{"name": "s", "imageName": "x", "env": {"A": "\\udfff"}}', "env"),
        (
            "/v1/containerregistryauth",
            b'{"name": "n", "username": "u", "password": "\\u0000"}',
            "password",
        ),
        ("/v1/endpoints", b'{"templateId": "a\\u0000b", "computeType": "CPU"}', "templateId"),
        ("/v1/endpoints", b'{"templateId": "t", "workersMax": "3"}', "workersMax"),
        ("/v1/endpoints", b'{"templateId": "t", "workersMax": true}', "workersMax"),
        (
            "/v1/endpoints",
            b'{"templateId": "t", "scalerValue": 18446744073709551616}',
            "scalerValue",
        ),
        ("/v1/endpoints", b'{"templateId": "t", "type": "L\\u0000B"}', "type"),
        ("/v1/models", b'{"modelId": "m\\u0000", "endpointId": "e"}', "modelId"),
        (
            "/v1/models",
            b'{"modelId": "m", "endpointId": "e", "description": "\\udfff"}',
            "description",
        ),
        ("/v1/models", b'{"modelId": "Not An Id", "endpointId": "e"}', "modelId"),
        (
            f"/v2/{hostile_ids['endpoint']}/run",
            b'{"input": {}, "webhok": "https://x.example/"}',
            "webhok",
        ),
        (
            f"/v2/{hostile_ids['endpoint']}/run",
            ('{"input": ' + _deep(300, "[") + "}").encode(),
            "body",
        ),
    ]
    for path, body, field in cases:
        answer = http.post(path, content=body, headers={"Content-Type": "application/json"})
        assert answer.status_code == 400 and answer.json().get("field") == field, (
            path,
            body[:80],
            answer.text,
        )
    assert http.get("/v1/templates/a%00b").status_code == 404
