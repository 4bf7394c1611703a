"""A data directory, its database and a port belong to one live ``skiff serve``: a second one
is refused before it touches anything, so the first keeps its workers and their jobs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from harness import Server, free_port


def serve_again(server: Server, data_dir: Path, port: int) -> tuple[int, str]:
    """Run a second ``skiff serve``; its exit code and output. One that does not exit by itself
    (it started serving) is stopped and reported as such."""
    child = subprocess.Popen(
        [sys.executable, "-m", "skiff", "serve", "--port", str(port), "--data-dir", str(data_dir)],
        env=server.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output, _ = child.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGTERM)
        output, _ = child.communicate(timeout=30)
        return 0, "it started serving:\n" + output
    return child.returncode, output


def alive(pid: int) -> bool:
    try:
        return "zombie" not in Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False


def test_a_second_serve_is_refused_and_the_first_keeps_its_workers_and_jobs(
    tmp_path: Path,
) -> None:
    first = Server(tmp_path / "data")
    first.start()
    try:
        endpoint = first.create_endpoint(workersMax=1, idleTimeout=60)
        eid = endpoint["id"]
        job = first.http.post(f"/v2/{eid}/run", json={"input": {"sleep": 12}}).json()["id"]
        first.wait_for(
            lambda: first.http.get(f"/v2/{eid}/status/{job}").json()["status"] == "IN_PROGRESS",
            what="the job to run",
        )
        workers = first.http.get(f"/v1/endpoints/{eid}", params={"includeWorkers": "true"})
        pid = workers.json()["workers"][0]["pid"]
        assert pid and alive(pid)

        running = f"skiff is already running on {first.url} (pid {first.proc.pid})"  # type: ignore[union-attr]
        # The README's own mistake: the same command again (same data directory, same port),
        # then the same data directory on another port.
        for port in (first.port, free_port()):
            code, output = serve_again(first, first.data_dir, port)
            assert code != 0, output
            assert alive(pid), f"the first server's worker was killed:\n{output}"
            assert running in output, output
            assert str(first.data_dir) in output, output

        # Another data directory on the first one's port: refused before anything is made there.
        other = tmp_path / "other"
        code, output = serve_again(first, other, first.port)
        assert code != 0, output
        assert f"127.0.0.1:{first.port}" in output and "in use" in output, output
        assert not other.exists()
        assert alive(pid)

        done = first.wait_for(
            lambda: (
                (status := first.http.get(f"/v2/{eid}/status/{job}").json())["status"]
                not in ("IN_QUEUE", "IN_PROGRESS")
                and status
            ),
            timeout=60,
            what="the job to end",
        )
        assert done["status"] == "COMPLETED", done
        assert done["output"] == {"echo": {"sleep": 12}}
        assert first.http.get("/healthz").status_code == 200
    finally:
        first.stop()


def test_a_stopped_server_frees_its_data_directory_for_the_next(tmp_path: Path) -> None:
    first = Server(tmp_path / "data")
    first.start()
    first.stop()
    second = Server(tmp_path / "data")
    second.start()
    try:
        assert second.http.get("/healthz").status_code == 200
    finally:
        second.stop()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_stops_the_server_quietly_with_exit_code_0(
    tmp_path: Path, sig: signal.Signals
) -> None:
    server = Server(tmp_path / "data")
    server.start()
    assert server.proc is not None
    try:
        endpoint = server.create_endpoint(workersMin=1, workersMax=1, idleTimeout=60)
        server.wait_for(
            lambda: server.http.get(f"/v2/{endpoint['id']}/health").json()["workers"]["idle"],
            what="a worker to be ready",
        )
        server.proc.send_signal(sig)
        code = server.proc.wait(30)
    finally:
        server.stop()
    output = server.log_path.read_text()
    assert code == 0, output[-3000:]
    assert "Aborted!" not in output
    assert "right after it started" not in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]


def test_a_second_ctrl_c_ends_the_server_at_once_and_its_workers_with_it(tmp_path: Path) -> None:
    # A worker that ignores SIGTERM, and a stop grace far longer than this test waits: the
    # first Ctrl-C's graceful stop would wait it out.
    server = Server(tmp_path / "data", env={"SKIFF_WORKER_STOP_GRACE_SECONDS": "600"})
    server.start()
    assert server.proc is not None
    try:
        endpoint = server.create_endpoint("stubborn_worker.py", workersMin=1, workersMax=1)
        eid = endpoint["id"]

        def worker_pid() -> int | None:
            answer = server.http.get(f"/v1/endpoints/{eid}", params={"includeWorkers": "true"})
            workers = answer.json()["workers"]
            return int(workers[0]["pid"]) if workers and workers[0].get("pid") else None

        pid = server.wait_for(worker_pid, what="the worker to start")
        server.wait_for(lambda: "ignoring SIGTERM" in logs_of(server, eid), what="its start")
        server.proc.send_signal(signal.SIGINT)
        # The first stop is under way (signals sent back to back would be taken as one): the
        # application is stopping its workers, and this one did not stop.
        server.wait_for(
            lambda: "Waiting for application shutdown" in server.log_path.read_text(),
            what="the first stop",
        )
        assert alive(pid) and server.proc.poll() is None
        server.proc.send_signal(signal.SIGINT)
        code = server.proc.wait(60)
    finally:
        server.stop()
    output = server.log_path.read_text()
    assert code == 130, output[-3000:]
    assert "Second Ctrl-C: ending at once" in output, output[-3000:]
    server.wait_for(lambda: not alive(pid), what="the worker to end with the server")


def logs_of(server: Server, endpoint_id: str) -> str:
    answer = server.http.get(f"/v1/endpoints/{endpoint_id}/logs")
    return answer.text if answer.status_code == 200 else ""


def test_state_on_disk_is_private_to_the_user_running_skiff(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = Server(data)
    server.start()
    try:
        endpoint = server.create_endpoint(workersMax=1, idleTimeout=60)
        response = server.http.post(
            f"/v2/{endpoint['id']}/runsync", json={"input": {"x": 1}}, timeout=60
        )
        assert response.json()["status"] == "COMPLETED", response.text
        modes = {
            str(path.relative_to(data)): path.stat().st_mode & 0o777
            for path in [data, *data.rglob("*")]
            if not path.is_symlink() and _skiff_made(data, path)
        }
    finally:
        server.stop()
    assert modes["."] == 0o700
    for name in ("skiff.db", "skiff.db-wal", "skiff.db-shm"):
        assert modes[name] == 0o600, modes
    assert any(name.endswith(".log") for name in modes), modes
    loose = {name: oct(mode) for name, mode in modes.items() if mode & 0o077}
    assert not loose, loose


def _skiff_made(data: Path, path: Path) -> bool:
    """What skiff itself creates: not what a worker writes inside its own home."""
    parts = path.relative_to(data).parts
    return not (len(parts) > 4 and parts[0] == "workers" and parts[3] == "home")


def test_an_existing_data_directory_open_to_others_is_made_private_with_a_warning(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    data.mkdir(mode=0o755)
    os.chmod(data, 0o755)  # whatever the umask
    (data / "skiff.db").touch()
    os.chmod(data / "skiff.db", 0o644)
    server = Server(data)
    server.start()
    try:
        assert server.http.get("/healthz").status_code == 200
    finally:
        server.stop()
    assert data.stat().st_mode & 0o777 == 0o700
    assert (data / "skiff.db").stat().st_mode & 0o777 == 0o600
    log = server.log_path.read_text()
    assert "WARNING" in log and str(data) in log and "0755" in log, log[-3000:]


def test_a_server_on_another_data_directory_but_the_same_sqlite_database_is_refused(
    tmp_path: Path,
) -> None:
    first = Server(tmp_path / "data")
    first.start()
    try:
        child = subprocess.run(
            [
                sys.executable,
                "-m",
                "skiff",
                "serve",
                "--port",
                str(free_port()),
                "--data-dir",
                str(tmp_path / "other"),
                "--database",
                f"sqlite:///{first.data_dir / 'skiff.db'}",
            ],
            env=first.env(),
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert child.returncode != 0, child.stdout + child.stderr
        assert f"skiff is already running on {first.url}" in child.stderr, child.stderr
        assert f"on the database {first.data_dir / 'skiff.db'}" in child.stderr, child.stderr
        assert first.http.get("/healthz").status_code == 200
    finally:
        first.stop()
