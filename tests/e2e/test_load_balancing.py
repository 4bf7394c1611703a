"""Load-balancing endpoints end to end: the real server starts real FastAPI workers (their own
HTTP servers, ``tests/e2e/workers/lb_worker.py``) and passes requests straight to them."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import Server, running

from skiff.served_ports import reserved_ports


@pytest.fixture(scope="module")
def lb_server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    data = tmp_path_factory.mktemp("skiff-lb") / "data"
    with running(
        data, env={"SKIFF_LB_WAIT_SECONDS": "30", "SKIFF_LB_DOMAIN": "lb.skiff.test"}
    ) as srv:
        yield srv


def lb_endpoint(server: Server, **fields: Any) -> dict[str, Any]:
    return server.create_endpoint("lb_worker.py", type="LB", **fields)


def workers_of(server: Server, endpoint_id: str) -> list[dict[str, Any]]:
    found = server.http.get(f"/v1/endpoints/{endpoint_id}", params={"includeWorkers": "true"})
    assert found.status_code == 200, found.text
    return list(found.json()["workers"] or [])


def ready_workers(server: Server, endpoint_id: str) -> list[dict[str, Any]]:
    return [w for w in workers_of(server, endpoint_id) if w["state"] in ("idle", "running")]


def test_a_request_starts_a_worker_from_zero_and_gets_its_answer(lb_server: Server) -> None:
    endpoint = lb_endpoint(lb_server)
    assert endpoint["type"] == "LB"
    assert endpoint["scalerType"] == "REQUEST_COUNT"
    assert workers_of(lb_server, endpoint["id"]) == []

    answer = lb_server.http.post(
        f"/lb/{endpoint['id']}/generate?temperature=0.5", json={"prompt": "hello"}
    )

    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["prompt"] == "hello"
    assert body["query"] == "temperature=0.5"
    # The caller's key is for skiff: the worker's code never sees it.
    assert body["authorization"] is None
    assert body["forwarded_prefix"] == f"/lb/{endpoint['id']}"
    assert [w["id"] for w in workers_of(lb_server, endpoint["id"])] == [body["worker"]]
    # A port no other tenant's process could be handed first (served_ports.py).
    kept = reserved_ports()
    assert kept is None or body["port"] in kept


def test_the_worker_answer_comes_back_as_the_worker_wrote_it(lb_server: Server) -> None:
    endpoint = lb_endpoint(lb_server)
    url = f"/lb/{endpoint['id']}"

    teapot = lb_server.http.get(f"{url}/teapot")
    cookies = lb_server.http.get(f"{url}/cookies")
    missing = lb_server.http.get(f"{url}/no/such/path")

    assert (teapot.status_code, teapot.text) == (418, "short and stout")
    assert cookies.headers.get_list("set-cookie") == [
        "a=1; Path=/; SameSite=lax",
        "b=2; Path=/; SameSite=lax",
    ]
    assert len(cookies.headers.get_list("date")) == 1
    # The worker's own 404, not skiff's.
    assert missing.status_code == 404
    assert missing.json() == {"detail": "Not Found"}


def test_a_connection_the_worker_closed_while_idle_is_not_reused(lb_server: Server) -> None:
    endpoint = lb_endpoint(lb_server)
    url = f"/lb/{endpoint['id']}/generate"
    first = lb_server.http.post(url, json={"prompt": "before"})
    # uvicorn, in the worker, closes a connection idle for 5 s; skiff's pool would keep it
    # longer.
    time.sleep(6)

    after = [lb_server.http.post(url, json={"prompt": "after"}) for _ in range(3)]

    assert first.status_code == 200, first.text
    assert [a.status_code for a in after] == [200] * 3, [a.text for a in after]


def test_a_large_header_in_the_answer_passes_through(lb_server: Server) -> None:
    endpoint = lb_endpoint(lb_server)

    answer = lb_server.http.get(f"/lb/{endpoint['id']}/big-header", params={"size": 40_000})

    assert answer.status_code == 200, answer.text
    assert answer.headers["x-big"] == "b" * 40_000


def test_the_worker_gets_the_request_as_the_caller_sent_it(lb_server: Server) -> None:
    endpoint = lb_endpoint(lb_server)
    url = f"/lb/{endpoint['id']}/echo/a%20b/caf%C3%A9?q=a+b&r=%2B1&r=2"
    body = os.urandom(300_000)

    def pieces() -> Iterator[bytes]:  # a body of unknown length: sent chunked
        for start in range(0, len(body), 65_536):
            yield body[start : start + 65_536]

    sized = lb_server.http.put(url, content=body, headers={"X-Trace": "t1"})
    chunked = lb_server.http.post(url, content=pieces())

    assert sized.status_code == 200, sized.text
    seen = sized.json()
    assert (seen["method"], seen["raw_path"], seen["query"]) == (
        "PUT",
        "/echo/a%20b/caf%C3%A9",
        "q=a+b&r=%2B1&r=2",
    )
    assert (seen["body_length"], seen["body_sha"]) == (len(body), hashlib.sha256(body).hexdigest())
    headers = {name.lower(): value for name, value in seen["headers"]}
    assert headers["x-trace"] == "t1"
    assert headers["content-length"] == str(len(body))
    assert headers["x-forwarded-prefix"] == f"/lb/{endpoint['id']}"
    # The caller's client's own headers pass as they are; skiff adds none of its own (no
    # user agent or accepted encodings the caller did not send), and never the caller's key.
    assert headers["user-agent"].startswith("python-httpx")
    assert "authorization" not in headers
    assert chunked.status_code == 200, chunked.text
    streamed = chunked.json()
    assert (streamed["body_length"], streamed["body_sha"]) == (
        len(body),
        hashlib.sha256(body).hexdigest(),
    )


def test_skiff_adds_no_headers_of_its_own_but_the_endpoints_key(lb_server: Server) -> None:
    endpoint = lb_endpoint(lb_server)
    raw = _raw_request(
        lb_server, f"GET /lb/{endpoint['id']}/echo/x HTTP/1.1", "X-Skiff-Lb-Key: forged"
    )

    names = [name.lower() for name, _ in raw["headers"]]
    assert sorted(names) == [
        "host",
        "x-forwarded-for",
        "x-forwarded-host",
        "x-forwarded-prefix",
        "x-forwarded-proto",
        "x-skiff-lb-key",
    ], raw["headers"]
    # The caller's own copy is dropped: the worker sees the key skiff gave it, and can refuse
    # a request that reaches its port any other way (another tenant's, on this host).
    sent = dict((name.lower(), value) for name, value in raw["headers"])["x-skiff-lb-key"]
    assert raw["lb_key"] and sent == raw["lb_key"] != "forged"


def test_a_callers_forwarding_and_one_hop_headers_do_not_reach_the_worker(
    lb_server: Server,
) -> None:
    """The worker is told who called by skiff alone: a caller's ``X-Forwarded-*``,
    ``Forwarded`` and ``X-Real-IP`` are dropped, and so is a header its ``Connection`` names;
    an escaped slash in the path stays escaped, as when the worker is called straight."""
    endpoint = lb_endpoint(lb_server)
    raw = _raw_request(
        lb_server,
        f"GET /lb/{endpoint['id']}/echo/a%2Fb/c HTTP/1.1",
        "X-Forwarded-For: 203.0.113.66",
        "X-Forwarded-Proto: https",
        "X-Forwarded-Host: bank.example",
        "X-Forwarded-Prefix: /admin",
        "X-Forwarded-Port: 1",
        "Forwarded: for=203.0.113.66",
        "X-Real-IP: 203.0.113.66",
        "X-Hop: secret",
        "Connection: X-Hop",
        "X-Kept: yes",
    )

    assert raw["raw_path"] == "/echo/a%2Fb/c"
    headers = {name.lower(): value for name, value in raw["headers"]}
    assert headers["x-kept"] == "yes"
    assert "x-hop" not in headers and "forwarded" not in headers and "x-real-ip" not in headers
    # Skiff's own view: its Host and prefix. (This test's peer is the loopback, which uvicorn
    # trusts as a front proxy by default, so its X-Forwarded-For and -Proto are skiff's view
    # here; an untrusted caller's are replaced: tests/unit/services/test_lb_request_head.py.)
    assert headers["x-forwarded-host"] == httpx.URL(lb_server.url).host
    assert headers["x-forwarded-prefix"] == f"/lb/{endpoint['id']}"
    names = [name.lower() for name, _ in raw["headers"]]
    assert all(names.count(f"x-forwarded-{h}") == 1 for h in ("for", "proto", "host", "prefix"))
    assert "x-forwarded-port" not in names


def _raw_request(server: Server, request_line: str, *more: str) -> dict[str, Any]:
    """A request with nothing but a host, the key and ``more`` header lines (no client's
    defaults); its JSON answer."""
    url = httpx.URL(server.url)
    key = str(server.http.headers["authorization"])
    extra = "".join(f"{line}\r\n" for line in more)
    with socket.create_connection((url.host, url.port), timeout=30) as conn:
        conn.sendall(
            f"{request_line}\r\nHost: {url.host}\r\nAuthorization: {key}\r\n{extra}"
            "Connection: close\r\n\r\n".encode()
        )
        answer = b""
        while chunk := conn.recv(65_536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    if b"transfer-encoding: chunked" in head.lower():
        body = _dechunk(body)
    return dict(json.loads(body))


def _dechunk(body: bytes) -> bytes:
    out = b""
    while True:
        size_line, _, rest = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            return out
        out += rest[:size]
        body = rest[size + 2 :]


def test_a_streamed_answer_arrives_as_the_worker_writes_it(lb_server: Server) -> None:
    endpoint = lb_endpoint(lb_server)
    arrivals: list[tuple[float, str]] = []
    with lb_server.http.stream(
        "GET", f"/lb/{endpoint['id']}/stream", params={"n": 5, "pause": 0.4}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data:"):
                arrivals.append((time.monotonic(), line))

    assert [line for _, line in arrivals] == [f"data: {i}" for i in range(5)]
    # Gathered, all five would arrive together after the last; passed through, they are
    # about 0.4 s apart.
    assert arrivals[-1][0] - arrivals[0][0] >= 1.2


def test_requests_are_spread_across_the_workers(lb_server: Server) -> None:
    endpoint = lb_endpoint(lb_server, workersMin=2, workersMax=2, scalerValue=1, idleTimeout=30)
    url = f"/lb/{endpoint['id']}/generate"
    # Both up first: how fast a second one starts on a loaded machine is not this test's subject.
    lb_server.wait_for(
        lambda: len(ready_workers(lb_server, endpoint["id"])) == 2, what="two ready workers"
    )

    def call(i: int) -> tuple[int, str]:
        answer = lb_server.http.post(url, json={"prompt": str(i), "sleep": 0.05})
        return answer.status_code, answer.json().get("worker", "") if answer.is_success else ""

    with ThreadPoolExecutor(max_workers=20) as pool:
        results = list(pool.map(call, range(200)))

    assert [status for status, _ in results] == [200] * 200
    by_worker = Counter(worker for _, worker in results)
    assert len(by_worker) == 2, by_worker
    # Least outstanding requests first: neither worker is left idle while the other queues.
    assert min(by_worker.values()) >= 40, by_worker


def test_a_killed_worker_fails_only_its_requests_in_flight_and_is_replaced(
    lb_server: Server,
) -> None:
    endpoint = lb_endpoint(lb_server, workersMax=2, workersMin=2, scalerValue=1, idleTimeout=30)
    lb_server.wait_for(
        lambda: len(ready_workers(lb_server, endpoint["id"])) == 2, what="two ready workers"
    )
    [victim, survivor] = ready_workers(lb_server, endpoint["id"])
    url = f"/lb/{endpoint['id']}/generate"
    stop = threading.Event()
    results: list[tuple[float, int, str]] = []

    def keep_calling() -> None:
        with httpx.Client(
            base_url=lb_server.url, headers={"Authorization": f"Bearer {lb_server.key}"}
        ) as client:
            while not stop.is_set():
                answer = client.post(url, json={"sleep": 0.3}, timeout=30)
                worker = answer.json().get("worker", "") if answer.is_success else answer.text
                results.append((time.monotonic(), answer.status_code, worker))

    callers = [threading.Thread(target=keep_calling) for _ in range(6)]
    for caller in callers:
        caller.start()
    lb_server.wait_for(
        lambda: {victim["id"], survivor["id"]} <= {worker for _, _, worker in results},
        what="both workers serving the callers",
    )
    killed_at = time.monotonic()
    os.killpg(victim["pid"], signal.SIGKILL)
    lb_server.wait_for(
        lambda: any(
            w["id"] not in (victim["id"], survivor["id"])
            for w in ready_workers(lb_server, endpoint["id"])
        ),
        what="a replacement worker",
    )
    # A few answers per caller from well after the kill, to check they all went well.
    lb_server.wait_for(
        lambda: sum(at > killed_at + 1.0 for at, _, _ in results) >= 3 * len(callers),
        what="answers from after the kill",
    )
    stop.set()
    for caller in callers:
        caller.join()

    failed = [(at, status, text) for at, status, text in results if status != 200]
    # Only requests that were on the killed worker when it died fail, each with a 502 that
    # says so; at most one per caller, none started after the kill.
    assert len(failed) <= len(callers), failed
    assert all(status == 502 and victim["id"] in text for _, status, text in failed), failed
    after = [r for r in results if r[0] > killed_at + 1.0]
    assert after and all(status == 200 for _, status, _ in after), after
    served_after = {worker for at, status, worker in results if at > killed_at + 1.0}
    assert victim["id"] not in served_after


def test_a_worker_answering_204_gets_no_traffic_until_it_answers_200(
    lb_server: Server, outside_tmp: Path
) -> None:
    # Outside /tmp: the sandboxed worker sees the host's files (read-only), not its /tmp.
    warm = outside_tmp / "warm"
    endpoint = lb_endpoint(lb_server, env={"LB_WARMUP_FILE": str(warm)})
    answers: list[httpx.Response] = []
    caller = threading.Thread(
        target=lambda: answers.append(
            lb_server.http.post(f"/lb/{endpoint['id']}/generate", json={"prompt": "x"})
        )
    )
    caller.start()
    lb_server.wait_for(
        lambda: [w for w in workers_of(lb_server, endpoint["id"]) if w["state"] == "initializing"],
        what="a starting worker",
    )
    time.sleep(2.0)  # deliberate: a while in which no request may reach the starting worker
    assert answers == []
    assert [w["state"] for w in workers_of(lb_server, endpoint["id"])] == ["initializing"]

    warm.write_text("ready")
    caller.join(timeout=30)

    assert [a.status_code for a in answers] == [200]


def test_no_worker_ready_in_time_is_a_503_with_retry_after(tmp_path: Path) -> None:
    with running(tmp_path / "data", env={"SKIFF_LB_WAIT_SECONDS": "2"}) as server:
        never = tmp_path / "never"
        endpoint = lb_endpoint(server, env={"LB_WARMUP_FILE": str(never)})

        answer = server.http.get(f"/lb/{endpoint['id']}/ping")

        assert answer.status_code == 503
        assert answer.headers["retry-after"] == "5"
        assert "became ready within 2 s" in answer.json()["error"]
        metrics = server.http.get("/metrics").text
        assert f'skiff_lb_requests_total{{code="503",endpoint="{endpoint["id"]}"}} 1.0' in metrics


def test_the_host_based_url_reaches_the_same_workers(lb_server: Server) -> None:
    endpoint = lb_endpoint(lb_server)

    # As https://ENDPOINT_ID.api.runpod.ai/generate on the hosted platform. A /v2 path on that
    # host is the worker's, not skiff's job interface.
    answer = lb_server.http.post(
        "/generate", json={"prompt": "by host"}, headers={"Host": f"{endpoint['id']}.lb.skiff.test"}
    )
    v2_path = lb_server.http.post(
        "/v2/anything/run", json={"input": {}}, headers={"Host": f"{endpoint['id']}.lb.skiff.test"}
    )

    assert answer.status_code == 200, answer.text
    assert answer.json()["prompt"] == "by host"
    assert answer.json()["forwarded_prefix"] is None  # no prefix: the caller used none
    assert v2_path.status_code == 404
    assert v2_path.json() == {"detail": "Not Found"}  # the worker's FastAPI answered


def test_the_callers_key_and_the_endpoint_type_are_checked(lb_server: Server) -> None:
    endpoint = lb_endpoint(lb_server, workersMax=0)
    queue = lb_server.create_endpoint("echo_worker.py", workersMax=0)

    no_key = httpx.get(f"{lb_server.url}/lb/{endpoint['id']}/generate")
    wrong_key = httpx.get(
        f"{lb_server.url}/lb/{endpoint['id']}/generate",
        headers={"Authorization": "Bearer sk_not_a_key_at_all_0000000"},
    )
    unknown = lb_server.http.get("/lb/nosuchendpoint/generate")
    queue_based = lb_server.http.get(f"/lb/{queue['id']}/generate")
    jobs = lb_server.http.post(f"/v2/{endpoint['id']}/run", json={"input": {}})
    no_workers = lb_server.http.get(f"/lb/{endpoint['id']}/generate")
    delay = lb_server.http.post(
        "/v1/endpoints",
        json={"templateId": endpoint["templateId"], "type": "LB", "scalerType": "QUEUE_DELAY"},
    )

    assert no_key.status_code == 401
    assert wrong_key.status_code == 401
    assert unknown.status_code == 404
    assert queue_based.status_code == 400
    assert "queue-based" in queue_based.json()["error"]
    assert jobs.status_code == 400
    assert f"/lb/{endpoint['id']}/" in jobs.json()["error"]
    assert no_workers.status_code == 503
    assert "workersMax is 0" in no_workers.json()["error"]
    assert delay.status_code == 400
    assert delay.json()["field"] == "scalerType"


def test_idle_workers_stop_after_the_idle_timeout(lb_server: Server) -> None:
    endpoint = lb_endpoint(lb_server, idleTimeout=1)
    assert lb_server.http.post(f"/lb/{endpoint['id']}/generate", json={}).status_code == 200

    lb_server.wait_for(lambda: workers_of(lb_server, endpoint["id"]) == [], what="idle stop")
    health = lb_server.http.get(f"/v2/{endpoint['id']}/health").json()
    assert health["workers"]["idle"] == 0


def test_a_flashboot_standby_is_promoted_straight_into_rotation(lb_server: Server) -> None:
    endpoint = lb_endpoint(lb_server, flashboot=True, workersMax=2, scalerValue=1, idleTimeout=30)
    url = f"/lb/{endpoint['id']}/generate"
    first = lb_server.http.post(url, json={}).json()["worker"]
    # One more is kept started and held back; it passes its ping while it waits.
    standby = lb_server.wait_for(
        lambda: [
            w
            for w in workers_of(lb_server, endpoint["id"])
            if w["state"] == "standby" and w.get("lastSeen") is not None
        ],
        what="a standby that passed its ping",
    )[0]

    # Two long requests in flight ask for two workers: the standby is promoted at once (no
    # start), and the next request goes to it, the worker with none in flight.
    with ThreadPoolExecutor(max_workers=2) as pool:
        busy = [pool.submit(lb_server.http.post, url, json={"sleep": 3}) for _ in range(2)]
        lb_server.wait_for(
            lambda: any(
                w["id"] == standby["id"] and w["state"] in ("idle", "running")
                for w in workers_of(lb_server, endpoint["id"])
            ),
            timeout=3,
            what="the standby promoted",
        )
        third = lb_server.http.post(url, json={})
        assert [f.result().json()["worker"] for f in busy] == [first, first]

    assert third.status_code == 200
    assert third.json()["worker"] == standby["id"]


def test_a_request_to_a_follower_replica_starts_a_worker_from_zero(
    tmp_path: Path, schema: str
) -> None:
    """Two replicas on one PostgreSQL: the follower's waiting request is on the shared board,
    so the leader's scaler starts a worker for it, and the follower passes the request on."""
    from pgtest import PG_DSN

    env: dict[str, str | None] = {
        "SKIFF_DATABASE_URL": PG_DSN,
        "SKIFF_DATABASE_SCHEMA": schema,
        "SKIFF_LEADER_CHECK_SECONDS": "0.2",
        "SKIFF_LB_WAIT_SECONDS": "30",
    }
    leader = Server(tmp_path / "a", env=env)
    leader.start()
    follower = Server(tmp_path / "b", env=env)
    follower.start()
    try:
        assert leader.http.get("/healthz").json()["leader"] is True
        assert follower.http.get("/healthz").json()["leader"] is False
        endpoint = lb_endpoint(leader, workersMax=2, scalerValue=1, idleTimeout=30)

        answer = follower.http.post(f"/lb/{endpoint['id']}/generate", json={"prompt": "via b"})

        assert answer.status_code == 200, answer.text + follower.tail_log()
        assert answer.json()["prompt"] == "via b"
        [worker] = workers_of(leader, endpoint["id"])
        assert worker["replica"] == leader.http.get("/healthz").json()["replica"]

        # Load on the follower alone is counted by the leader: two requests in flight there
        # ask for a second worker.
        with ThreadPoolExecutor(max_workers=2) as pool:
            busy = [
                pool.submit(follower.http.post, f"/lb/{endpoint['id']}/generate", json={"sleep": 4})
                for _ in range(2)
            ]
            leader.wait_for(
                lambda: len(workers_of(leader, endpoint["id"])) == 2,
                timeout=10,
                what="a second worker for the follower's load",
            )
            assert [f.result().status_code for f in busy] == [200, 200]
    finally:
        follower.stop()
        leader.stop()


def test_a_caller_that_leaves_mid_stream_frees_the_worker(lb_server: Server) -> None:
    endpoint = lb_endpoint(lb_server, idleTimeout=60)
    with lb_server.http.stream(
        "GET", f"/lb/{endpoint['id']}/stream", params={"n": 50, "pause": 0.5}
    ) as response:
        # Kept: a dropped line iterator closes the response, and with it the connection.
        lines = response.iter_lines()
        assert next(lines) == "data: 0"
        [worker] = workers_of(lb_server, endpoint["id"])
        assert worker["state"] == "running"
    # The caller is gone: its request no longer counts, and the worker is idle again.
    lb_server.wait_for(
        lambda: [w["state"] for w in workers_of(lb_server, endpoint["id"])] == ["idle"],
        timeout=10,
        what="the worker idle after the caller left",
    )
