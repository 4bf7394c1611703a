"""Billing end to end, in real ``skiff serve`` processes with real runpod-SDK workers: the time
billed for a worker is its life as the server saw it, within a second; a server killed with
SIGKILL and started again neither bills the time it was down nor counts a second twice; two
replicas on PostgreSQL meter each second once."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
from harness import Server

from pgtest import PG_DSN

#: 3.6 USD per vCPU-hour: a millisecond of a 2-vCPU worker costs 0.000002.
PRICES = "[cpu]\nvcpu_hour = 3.6\n"
#: A meter pass each 2 s: a killed server's last usage ends at most this long before the kill.
METER_SECONDS = 2.0


def priced_server(tmp_path: Path, **env: str | None) -> Server:
    table = tmp_path / "prices.toml"
    table.write_text(PRICES)
    return Server(tmp_path / "data", env={"SKIFF_PRICES": str(table), **env})


def billed(server: Server, endpoint_id: str) -> dict[str, Any]:
    """The endpoint's records summed: milliseconds and USD."""
    records = server.http.get(
        "/v1/billing/endpoints", params={"bucketSize": "hour", "endpointId": endpoint_id}
    ).json()
    return {
        "ms": sum(r["timeBilledMs"] for r in records),
        "amount": sum(r["amount"] for r in records),
    }


def workers_of(server: Server, endpoint_id: str) -> list[dict[str, Any]]:
    body = server.http.get(f"/v1/endpoints/{endpoint_id}", params={"includeWorkers": "true"}).json()
    return list(body.get("workers", []))


def epoch(iso: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(iso).timestamp()


def test_a_workers_time_is_billed_within_a_second_of_its_life(tmp_path: Path) -> None:
    server = priced_server(tmp_path)
    server.start()
    try:
        endpoint = server.create_endpoint(workersMax=1, idleTimeout=3)
        for n in range(3):
            answer = server.http.post(
                f"/v2/{endpoint['id']}/runsync", json={"input": {"n": n}}, timeout=120
            )
            assert answer.json()["status"] == "COMPLETED", answer.text
        (worker,) = workers_of(server, endpoint["id"])
        started = epoch(worker["startedAt"])
        server.wait_for(
            lambda: not workers_of(server, endpoint["id"]), what="the idle worker to stop"
        )
        gone = time.time()
        life_ms = (gone - started) * 1000
        total = server.wait_for(
            lambda: (b := billed(server, endpoint["id"]))["ms"] > 0 and b, what="a record"
        )
        assert life_ms - 1000 <= total["ms"] <= life_ms + 1000, (total, life_ms)
        assert abs(total["amount"] - total["ms"] * 2 * 3.6 / 3_600_000) < 1e-6
        # Nothing holds resources any more: the total stays (deliberately two meter passes).
        time.sleep(2 * METER_SECONDS)
        assert billed(server, endpoint["id"])["ms"] == total["ms"]
    finally:
        server.stop()


def test_a_killed_server_bills_neither_its_downtime_nor_a_second_twice(tmp_path: Path) -> None:
    server = priced_server(tmp_path)
    server.start()
    try:
        endpoint = server.create_endpoint(workersMin=1, workersMax=1, idleTimeout=60)
        (first,) = server.wait_for(lambda: workers_of(server, endpoint["id"]), what="the worker")
        time.sleep(6)  # the point: a worker up for a while, to be billed
        assert server.proc is not None
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
        killed = time.time()
        time.sleep(8)  # down: not billed
        server.start()
        (second,) = server.wait_for(
            lambda: [w for w in workers_of(server, endpoint["id"]) if w["id"] != first["id"]],
            what="a new worker",
        )
        time.sleep(4)  # the point: the new worker up for a while, to be billed
        # Deleting the endpoint ends its worker: then nothing of it is metered any more.
        assert server.http.delete(f"/v1/endpoints/{endpoint['id']}").status_code == 204
        ended = time.time()
        time.sleep(2 * METER_SECONDS)  # deliberate: passes that must add nothing more
        total_ms = billed(server, endpoint["id"])["ms"]
        up_ms = (killed - epoch(first["startedAt"]) + ended - epoch(second["startedAt"])) * 1000
        # At most a meter pass or two lost around the kill; never the 8 s it was down.
        assert up_ms - 2 * METER_SECONDS * 1000 - 1500 <= total_ms <= up_ms + 1500, (
            total_ms,
            up_ms,
        )
    finally:
        server.stop()


def test_two_replicas_meter_each_second_once_across_a_leader_kill(
    tmp_path: Path, schema: str
) -> None:
    table = tmp_path / "prices.toml"
    table.write_text(PRICES)
    env: dict[str, str | None] = {
        "SKIFF_DATABASE_URL": PG_DSN,
        "SKIFF_DATABASE_SCHEMA": schema,
        "SKIFF_LEADER_CHECK_SECONDS": "0.2",
        "SKIFF_PRICES": str(table),
    }
    first = Server(tmp_path / "a", env=env)
    second = Server(tmp_path / "b", env=env)
    first.start()
    second.start()
    try:
        volume = first.http.post("/v1/networkvolumes", json={"name": "v", "size": 1}).json()
        made_at = epoch(volume["createdAt"])

        def metered() -> int:
            records = second.http.get(
                "/v1/billing/networkvolumes", params={"bucketSize": "hour"}
            ).json()
            assert {r["networkVolumeId"] for r in records} <= {volume["id"]}
            return sum(r["timeBilledMs"] for r in records)

        time.sleep(5)  # the point: a few meter passes, which one replica alone may make
        # The leader alone meters: never more than the volume's age, whichever replica reads.
        assert 0 < metered() <= (time.time() - made_at) * 1000 + 500
        assert first.proc is not None
        first.proc.kill()
        first.proc.wait()
        first.proc = None
        second.wait_for(lambda: httpx.get(f"{second.url}/healthz").json()["leader"], timeout=15)
        time.sleep(5)  # the point: a few passes of the new leader
        age_ms = (time.time() - made_at) * 1000
        # The new leader carried on: at most a few seconds lost around the kill, none twice.
        assert age_ms - 3 * METER_SECONDS * 1000 <= metered() <= age_ms + 500, (metered(), age_ms)
    finally:
        second.stop()
        first.stop()
