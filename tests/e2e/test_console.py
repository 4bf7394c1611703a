"""The web console in a real browser: headless Chromium (Debian's ``chromium`` package) driven
by Playwright, against a real ``skiff serve`` with real runpod-SDK workers.

Every page the console serves is visited here, and a screenshot of each is kept under
``artifacts/console/`` (git-ignored; docs/console.md shows copies from ``docs/console/``). Without
a Chromium these tests fail, saying how to install one; ``SKIFF_TEST_NO_BROWSER=1`` skips them
on purpose (CI never sets it).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from harness import WORKERS, Server, running

from eventually import eventually
from pod_programs import pod_port

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "artifacts" / "console"
LAPTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
#: Long enough for a runpod-SDK worker to start and answer (seconds, as Playwright's ms).
JOB_WAIT_MS = 90_000


#: The walk's start command: the interpreter and the worker come from the server's environment
#: (its workers inherit it), so the screenshots show no path of the machine they were taken on.
START_COMMAND = """sh -c 'exec "$E2E_PYTHON" "$E2E_WORKERS/echo_worker.py"'"""
LB_COMMAND = ["sh", "-c", 'exec "$E2E_PYTHON" "$E2E_WORKERS/lb_worker.py"']


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    env: dict[str, str | None] = {
        "E2E_PYTHON": sys.executable,
        "E2E_WORKERS": str(WORKERS),
        # The start commands take the interpreter and the worker from the server's environment,
        # which a sandboxed worker does not inherit (test_hostile_tenant.py and the provider's
        # tests are the sandbox's own).
        "SKIFF_SANDBOX": "off",
    }
    with running(tmp_path_factory.mktemp("skiff") / "data", env=env) as srv:
        yield srv


def echo_endpoint(server: Server, name: str, **fields: Any) -> dict[str, Any]:
    """An endpoint of the echo worker whose template starts it with ``START_COMMAND``."""
    template = server.create_template(
        "echo_worker.py",
        name=f"{name}-echo",
        category="CPU",
        dockerStartCmd=shlex.split(START_COMMAND),
    )
    body = {"name": name, "templateId": template["id"], "computeType": "CPU", **fields}
    response = server.http.post("/v1/endpoints", json=body)
    assert response.status_code == 200, response.text
    return dict(response.json())


def chromium_path() -> str:
    """Debian's Chromium (or ``SKIFF_TEST_CHROMIUM``); never a browser Playwright downloads."""
    configured = os.environ.get("SKIFF_TEST_CHROMIUM")
    found = configured or shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("SKIFF_TEST_NO_BROWSER") == "1":
        pytest.skip("SKIFF_TEST_NO_BROWSER=1: the console's browser tests are skipped")
    pytest.fail(
        "no Chromium found for the console's browser tests: install Debian's package "
        "(apt-get install chromium), point SKIFF_TEST_CHROMIUM at one, or set "
        "SKIFF_TEST_NO_BROWSER=1 to skip them"
    )


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        # --no-sandbox: CI runs as root, where Chromium's sandbox refuses to start.
        launched = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport=LAPTOP)
    context.set_default_timeout(15_000)
    opened = context.new_page()
    yield opened
    context.close()


def shot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def sign_in(page: Any, server: Server) -> None:
    page.goto(f"{server.url}/console")
    page.get_by_label("API key").fill(server.key)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Endpoints").wait_for()


def expect_text(locator: Any, pattern: str, timeout: int = 15_000) -> None:
    from playwright.sync_api import expect

    expect(locator).to_contain_text(re.compile(pattern), timeout=timeout)


def test_sign_in_create_run_watch_logs_delete(page: Any, server: Server) -> None:
    """The walk the issue names: sign in, create an endpoint, send a job from the request
    panel, see it COMPLETED, see the worker's log, delete the endpoint by typing its name."""
    # Sign in by keyboard alone: the key field has the focus, Enter sends the form.
    page.goto(f"{server.url}/console")
    assert page.get_by_role("heading", name="Sign in to skiff").is_visible()
    shot(page, "signin")
    page.keyboard.type("sk_not_a_key")
    page.keyboard.press("Enter")
    expect_text(page.locator("#e-api_key"), "not valid")
    shot(page, "signin-error")
    page.keyboard.type(server.key)
    page.keyboard.press("Enter")
    page.get_by_role("heading", name="Endpoints").wait_for()
    if page.locator("table.endpoints").count() == 0:
        shot(page, "endpoints-empty")

    # Create an endpoint with a new template; a first try with min above max is refused.
    page.get_by_role("link", name="New endpoint").click()
    page.get_by_label("Name", exact=True).fill("console-walk")
    page.get_by_label("Template", exact=True).select_option(label="Create a new template…")
    page.get_by_label("Template name").fill("console-echo")
    page.get_by_label("Image").fill("local/echo")
    page.get_by_label("Start command").fill(START_COMMAND)
    page.get_by_label("Compute type").select_option("CPU")
    page.get_by_label("Min workers").fill("3")
    page.get_by_label("Max workers").fill("1")
    page.get_by_label("Idle timeout (s)").fill("120")
    page.get_by_role("button", name="Create endpoint").click()
    expect_text(page.locator("#e-workersMin"), "workersMin must not be greater than workersMax")
    assert page.get_by_label("Template name").input_value() == "console-echo"
    shot(page, "endpoint-form-errors")
    page.get_by_label("Min workers").fill("0")
    page.get_by_role("button", name="Create endpoint").click()
    page.get_by_role("heading", name="console-walk").wait_for()
    expect_text(page.locator(".notice"), "Endpoint created")
    endpoint_id = page.url.rsplit("/", 1)[-1].split("?")[0]

    # Send a job from the request panel and watch it finish.
    page.get_by_label(re.compile("Job body")).fill('{"input": {"name": "from the console"}}')
    page.get_by_role("button", name="Send").click()
    expect_text(page.locator("[data-job-status]"), "^COMPLETED$", timeout=JOB_WAIT_MS)
    expect_text(page.locator("[data-output-text]"), "from the console")
    job_id = page.locator("[data-job-link]").inner_text()
    # The live part of the page catches up by itself: the job, then the worker.
    expect_text(page.locator(f'tr[data-job="{job_id}"]'), "COMPLETED")
    expect_text(page.locator("[data-worker]").first, "idle|running")
    shot(page, "endpoint")

    # The job's own page: timings, input and output.
    page.locator("[data-job-link]").click()
    expect_text(page.locator("[data-job-state]"), "COMPLETED")
    expect_text(page.locator("[data-job-output]"), "from the console")
    shot(page, "job")

    # The job history, filtered by state.
    page.get_by_role("link", name="Jobs", exact=True).click()
    page.get_by_label("State").select_option("COMPLETED")
    page.get_by_label("Submitted").select_option("15m")
    page.get_by_role("button", name="Filter").click()
    assert page.locator(f'tr[data-job="{job_id}"]').count() == 1
    shot(page, "jobs")
    page.get_by_label("State").select_option("FAILED")
    page.get_by_role("button", name="Filter").click()
    expect_text(page.locator(".empty"), "No jobs match")

    # The worker's log, followed: its lines name the job it ran.
    page.goto(f"{server.url}/console/endpoints/{endpoint_id}")
    page.locator("[data-worker]").first.get_by_role("link", name="Logs").click()
    page.get_by_label("Follow").check()
    expect_text(page.locator("[data-log]"), re.escape(job_id), timeout=30_000)
    expect_text(page.locator("[data-log]"), "Starting Serverless Worker")
    shot(page, "logs")

    # Delete: the button stays disabled until the exact name is typed.
    page.goto(f"{server.url}/console/endpoints/{endpoint_id}")
    page.get_by_role("link", name="Delete").click()
    button = page.get_by_role("button", name="Delete this endpoint")
    assert button.is_disabled()
    page.get_by_label(re.compile("to confirm")).fill("console-wal")
    assert button.is_disabled()
    page.get_by_label(re.compile("to confirm")).fill("console-walk")
    assert button.is_enabled()
    shot(page, "endpoint-delete")
    button.click()
    expect_text(page.locator(".notice"), "console-walk.* was deleted")
    assert page.locator('tr[data-endpoint="console-walk"]').count() == 0

    # Gone for the API too: configuration, jobs and logs.
    assert server.http.get(f"/v1/endpoints/{endpoint_id}").status_code == 404
    assert server.http.get(f"/v1/endpoints/{endpoint_id}/logs").status_code == 404
    assert server.http.get(f"/v2/{endpoint_id}/status/{job_id}").status_code == 404


def test_the_list_refreshes_itself_and_reads_on_a_phone(page: Any, server: Server) -> None:
    endpoint = echo_endpoint(server, "console-live", workersMax=1, idleTimeout=30)
    sign_in(page, server)
    row = page.locator('tr[data-endpoint="console-live"]')
    expect_text(row.locator('[data-count="completed"]'), "^0$")
    # A job sent by the SDK's way, not the console's: the list sees it finish by itself.
    answer = server.http.post(f"/v2/{endpoint['id']}/runsync", json={"input": {"n": 1}})
    assert answer.json()["status"] == "COMPLETED", answer.text
    expect_text(row.locator('[data-count="completed"]'), "^1$")
    shot(page, "endpoints")

    page.set_viewport_size(PHONE)
    page.reload()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "phone-endpoints")
    page.get_by_role("link", name="console-live").click()
    page.get_by_role("heading", name="Health").wait_for()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shot(page, "phone-endpoint")


def test_editing_says_when_workers_restart(page: Any, server: Server) -> None:
    endpoint = echo_endpoint(server, "console-edit", workersMax=2)
    sign_in(page, server)
    page.goto(f"{server.url}/console/endpoints/{endpoint['id']}/edit")
    notice = page.locator("#restart-notice")
    page.get_by_label("Max workers").fill("3")
    assert notice.is_hidden()
    page.get_by_label("GPUs per worker").fill("2")
    expect_text(notice, "restarts this endpoint's workers.*GPU count")
    page.get_by_label("Environment", exact=True).fill("GREETING=hello")
    expect_text(notice, "GPU count, environment")
    shot(page, "endpoint-edit")
    page.get_by_label("Idle timeout (s)").fill("0")
    page.get_by_role("button", name="Save").click()
    expect_text(page.locator("#e-idleTimeout"), "greater than or equal to 1")
    page.get_by_label("Idle timeout (s)").fill("10")
    page.get_by_role("button", name="Save").click()
    expect_text(page.locator(".notice"), "Saved. The workers restart")
    after = server.http.get(f"/v1/endpoints/{endpoint['id']}").json()
    assert (after["workersMax"], after["gpuCount"], after["env"]) == (3, 2, {"GREETING": "hello"})
    assert after["idleTimeout"] == 10
    assert after["version"] == endpoint["version"] + 1


def test_an_edit_without_script_is_confirmed_before_saving(browser: Any, server: Server) -> None:
    """With scripts off the server itself asks: nothing is saved until it is confirmed."""
    endpoint = echo_endpoint(server, "console-noscript")
    context = browser.new_context(viewport=LAPTOP, java_script_enabled=False)
    page = context.new_page()
    try:
        sign_in(page, server)
        page.goto(f"{server.url}/console/endpoints/{endpoint['id']}/edit")
        page.get_by_label("GPUs per worker").fill("4")
        page.get_by_role("button", name="Save").click()
        expect_text(page.locator("#restart-confirm"), "You changed: GPU count")
        assert server.http.get(f"/v1/endpoints/{endpoint['id']}").json()["gpuCount"] == 1
        page.get_by_role("button", name="Save and restart workers").click()
        expect_text(page.locator(".notice"), "Saved")
        assert server.http.get(f"/v1/endpoints/{endpoint['id']}").json()["gpuCount"] == 4
    finally:
        context.close()


def test_templates_and_registry_auths(page: Any, server: Server) -> None:
    sign_in(page, server)
    page.get_by_role("link", name="Registry auths").click()
    page.get_by_role("heading", name="Container registry auths").wait_for()
    page.get_by_label("Name", exact=True).fill("console-registry")
    page.get_by_label("Username").fill("robot")
    page.get_by_label("Password or token").fill("hunter2-secret")
    page.get_by_role("button", name="Save registry auth").click()
    expect_text(page.locator(".notice"), "console-registry")
    # The same name again is refused next to the name; the password is never sent back.
    page.get_by_label("Name", exact=True).fill("console-registry")
    page.get_by_label("Username").fill("robot")
    page.get_by_label("Password or token").fill("hunter2-secret")
    page.get_by_role("button", name="Save registry auth").click()
    expect_text(page.locator("#e-name"), "already")
    assert page.get_by_label("Password or token").input_value() == ""
    assert "hunter2-secret" not in page.content()
    shot(page, "registry-auths")

    page.get_by_role("link", name="Templates").click()
    page.get_by_label("Name", exact=True).fill("console-private")
    page.get_by_label("Image").fill("registry.example/private:1")
    page.get_by_label("Start command").fill("python 'unbalanced")
    page.get_by_label("Registry auth").select_option(label="console-registry")
    page.get_by_role("button", name="Create template").click()
    expect_text(page.locator("#e-dockerStartCmd"), "cannot split")
    page.get_by_label("Start command").fill("python handler.py")
    page.get_by_role("button", name="Create template").click()
    expect_text(page.locator(".notice"), "console-private")
    row = page.locator('tr[data-template="console-private"]')
    expect_text(row, "python handler.py")
    shot(page, "templates")

    # In use by the template, the auth offers no delete; once the template is gone it does.
    page.get_by_role("link", name="Registry auths").click()
    assert page.get_by_role("button", name="Delete registry auth console-registry").count() == 0
    page.get_by_role("link", name="Templates").click()
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Delete template console-private").click()
    expect_text(page.locator(".notice"), "console-private.* deleted")
    page.get_by_role("link", name="Registry auths").click()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete registry auth console-registry").click()
    expect_text(page.locator(".notice"), "console-registry.* deleted")
    names = [a["name"] for a in server.http.get("/v1/containerregistryauth").json()]
    assert "console-registry" not in names


def test_session_cookie_csrf_and_sign_out(page: Any, server: Server) -> None:
    page.goto(f"{server.url}/console/templates")
    # Not signed in: the sign-in form, which brings the visitor back where they were going.
    page.get_by_label("API key").fill(server.key)
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("heading", name="Templates").wait_for()
    (cookie,) = [c for c in page.context.cookies() if c["name"] == "skiff_session"]
    assert cookie["httpOnly"] and cookie["sameSite"] == "Lax" and cookie["path"] == "/console"
    assert server.key not in cookie["value"]

    # A form post without the page's token (as another site would send it) is refused.
    refused = page.request.post(
        f"{server.url}/console/registry-auths",
        form={"name": "forged", "username": "u", "password": "p"},
    )
    assert refused.status == 403
    assert "forged" not in [a["name"] for a in server.http.get("/v1/containerregistryauth").json()]

    # Unknown pages and ids answer the console's own 404 page.
    page.goto(f"{server.url}/console/endpoints/nosuchendpoint")
    page.get_by_role("heading", name="Not found").wait_for()
    shot(page, "not-found")

    page.get_by_role("button", name="Sign out").click()
    page.get_by_role("heading", name="Sign in to skiff").wait_for()
    assert not [c for c in page.context.cookies() if c["name"] == "skiff_session"]
    page.goto(f"{server.url}/console/registry-auths")
    page.get_by_role("heading", name="Sign in to skiff").wait_for()


def test_a_jobs_page_never_shows_its_s3_config(page: Any, server: Server) -> None:
    endpoint = echo_endpoint(server, "console-s3", workersMax=1)
    s3 = {"accessId": "AKIA-console", "accessSecret": "console-s3-secret", "bucketName": "b"}
    body = {"input": {"n": 1}, "s3Config": s3}
    job = server.http.post(f"/v2/{endpoint['id']}/runsync", json=body).json()
    assert job["status"] == "COMPLETED", job
    sign_in(page, server)
    page.goto(f"{server.url}/console/endpoints/{endpoint['id']}/jobs/{job['id']}")
    expect_text(page.locator("[data-job-state]"), "COMPLETED")
    expect_text(page.locator("main"), "s3Config given \\(not shown\\)")
    watched = page.request.get(
        f"{server.url}/console/endpoints/{endpoint['id']}/jobs/{job['id']}/watch.json"
    )
    for text in (page.content(), watched.text()):
        assert "console-s3-secret" not in text and "AKIA-console" not in text


def test_a_refused_request_comes_back_without_its_s3_secret(browser: Any, server: Server) -> None:
    """Without script the refused body is shown back to fix, with ``accessSecret`` emptied
    (as a registry password is never sent back) and everything else as typed."""
    endpoint = echo_endpoint(server, "console-s3-refused", workersMax=0)
    context = browser.new_context(viewport=LAPTOP, java_script_enabled=False)
    page = context.new_page()
    try:
        sign_in(page, server)
        page.goto(f"{server.url}/console/endpoints/{endpoint['id']}")
        s3 = {"accessId": "AKIA-typed", "accessSecret": "typed-s3-secret", "bucketName": "b"}
        typo = {"input": {"n": 1}, "s3Config": s3, "webhok": "https://example.com/hook"}
        page.get_by_label(re.compile("Job body")).fill(json.dumps(typo))
        page.get_by_role("button", name="Send").click()
        expect_text(page.locator("#e-body"), "unknown field.*webhok")
        shown = page.get_by_label(re.compile("Job body")).input_value()
        assert "typed-s3-secret" not in shown and "typed-s3-secret" not in page.content()
        assert json.loads(shown)["s3Config"] == {**s3, "accessSecret": ""}
        assert json.loads(shown)["webhok"] == "https://example.com/hook"
    finally:
        context.close()


def test_the_request_panel_shows_a_stream_as_it_comes(page: Any, server: Server) -> None:
    template = server.create_template(
        "stream_worker.py",
        name="console-stream-worker",
        category="CPU",
        dockerStartCmd=shlex.split(START_COMMAND.replace("echo_worker", "stream_worker")),
    )
    body = {"name": "console-stream", "templateId": template["id"], "computeType": "CPU"}
    endpoint = server.http.post("/v1/endpoints", json=body).json()
    sign_in(page, server)
    page.goto(f"{server.url}/console/endpoints/{endpoint['id']}")
    job = {"input": {"chunks": 4, "pause": 0.5}}
    page.get_by_label(re.compile("Job body")).fill(json.dumps(job))
    page.get_by_role("button", name="Send").click()
    stream = page.locator("[data-stream-text]")
    # The first chunks show while the job still runs, the last once it completed.
    expect_text(stream, "chunk-0", timeout=JOB_WAIT_MS)
    expect_text(page.locator("[data-job-status]"), "^COMPLETED$", timeout=JOB_WAIT_MS)
    expect_text(stream, "chunk-3")
    assert [line for line in stream.inner_text().splitlines() if line] == [
        json.dumps({"index": i, "text": f"chunk-{i}"}, separators=(",", ":")) for i in range(4)
    ]
    shot(page, "endpoint-stream")
    # The page only read the stream: the job's API client still gets every chunk.
    job_id = page.locator("[data-job-link]").inner_text().strip()
    streamed = server.http.get(f"/v2/{endpoint['id']}/stream/{job_id}").json()
    assert [c["output"]["index"] for c in streamed["stream"]] == [0, 1, 2, 3]


def _sign_in_over(server: Server, proto: str | None) -> tuple[str, str]:
    """The sign-in form's cookie and the session's, as ``Set-Cookie`` gave them, signing in
    over plain HTTP or (``proto="https"``) behind a TLS-terminating proxy on this host
    (uvicorn trusts its X-Forwarded-Proto)."""
    headers = {"X-Forwarded-Proto": proto} if proto else {}
    with httpx.Client(base_url=server.url, headers=headers) as client:
        form = client.get("/console")
        login_cookie = form.headers["set-cookie"]
        token = re.search(r'name="csrf" value="([^"]+)"', form.text)
        assert token is not None
        # Sent back by hand: a client keeps a Secure cookie to itself over plain HTTP.
        nonce = login_cookie.split(";")[0]
        client.cookies.clear()
        signed_in = client.post(
            "/console/login",
            data={"csrf": token.group(1), "api_key": server.key, "next": ""},
            headers={"Cookie": nonce},
        )
        assert signed_in.status_code == 303, signed_in.text
        session_cookie = next(
            c for c in signed_in.headers.get_list("set-cookie") if "skiff_session=" in c
        )
    return login_cookie, session_cookie


def test_the_session_cookie_is_secure_and_host_only_when_served_over_https(
    server: Server,
) -> None:
    """Over HTTPS the sign-in and session cookies are Secure and ``__Host-`` prefixed (path
    ``/``): a pod's plain-HTTP port on the same host name never sees them, and no other origin
    can set one. Over plain HTTP they are neither, scoped to ``/console``."""
    for proto, secure in (("https", True), (None, False)):
        for cookie in _sign_in_over(server, proto):
            attributes = [part.strip().lower() for part in cookie.split(";")]
            assert ("secure" in attributes) is secure, cookie
            assert "httponly" in attributes
            assert cookie.startswith("__Host-skiff_") is secure, cookie
            assert ("path=/" if secure else "path=/console") in attributes, cookie


def test_over_https_a_session_cookie_planted_without_the_prefix_is_not_read(
    server: Server,
) -> None:
    """What a tenant's plain-HTTP pod port on the console's host can do is set a cookie
    without the prefix (its own session's, say, to sign a victim into its account): over
    HTTPS the console does not read it. The same value under the prefixed name, which only a
    secure origin can set, is a session."""
    _, planted = _sign_in_over(server, None)
    value = planted.split(";")[0].split("=", 1)[1]
    over_https = {"X-Forwarded-Proto": "https"}
    with httpx.Client(base_url=server.url, headers=over_https) as client:
        tossed = client.get("/console/keys", headers={"Cookie": f"skiff_session={value}"})
        assert tossed.status_code == 303 and "next=" in tossed.headers["location"]
        own = client.get("/console/keys", headers={"Cookie": f"__Host-skiff_session={value}"})
        assert own.status_code == 200, own.text


def test_an_endpoint_that_cannot_place_a_worker_says_why_and_the_form_defaults_to_cpu(
    page: Any, server: Server
) -> None:
    """A GPU endpoint wanting a type this server lacks: its page says why its jobs wait and
    the list flags it. This server declares no GPUs, so (on a host without any) a new
    endpoint's form starts at CPU, which is what the server has."""
    from skiff.providers.gpus import inventory

    host_gpus = inventory(None)  # what the server reads too: it declares none
    template = server.create_template(
        "echo_worker.py",
        name="held-back-echo",
        category="CPU",
        dockerStartCmd=shlex.split(START_COMMAND),
    )
    body = {
        "name": "held-back",
        "templateId": template["id"],
        "computeType": "GPU",
        "gpuTypeIds": ["NVIDIA Imaginary 1"],
    }
    created = server.http.post("/v1/endpoints", json=body)
    assert created.status_code == 200, created.text
    eid = created.json()["id"]
    server.http.post(f"/v2/{eid}/run", json={"input": {}})

    sign_in(page, server)
    row = page.locator("tr[data-endpoint='held-back']")
    expect_text(row, "workers held back")
    page.get_by_role("link", name="held-back", exact=True).click()
    held = page.locator("[data-placement='no-gpu']")
    expect_text(held, r"Workers held back \(1 queued job waits\)")
    has = "no GPUs" if not host_gpus else ""
    expect_text(held, rf"needs a GPU among \[NVIDIA Imaginary 1\] and this server has {has}")
    shot(page, "endpoint-held-back")

    page.goto(f"{server.url}/console/endpoints/new")
    from playwright.sync_api import expect

    expect(page.get_by_label("Compute type")).to_have_value("GPU" if host_gpus else "CPU")
    server.http.delete(f"/v1/endpoints/{eid}")


def test_creating_or_saving_an_endpoint_no_gpu_here_can_serve_shows_the_apis_warning(
    page: Any, server: Server
) -> None:
    """The form saves a GPU endpoint wanting a type this server lacks: the page it lands on
    warns as the API's answer does (naming `computeType: CPU` and SKIFF_GPUS) instead of
    promising workers; saving it again warns again. A CPU endpoint's page has no warning."""
    template = server.create_template(
        "echo_worker.py",
        name="warned-echo",
        category="CPU",
        dockerStartCmd=shlex.split(START_COMMAND),
    )
    sign_in(page, server)
    page.get_by_role("link", name="New endpoint").click()
    page.get_by_label("Name", exact=True).fill("console-warned")
    page.get_by_label("Template", exact=True).select_option(template["id"])
    page.get_by_label("Compute type").select_option("GPU")
    page.get_by_label("GPU types, in priority order").fill("NVIDIA Imaginary 1")
    page.get_by_role("button", name="Create endpoint").click()
    page.get_by_role("heading", name="console-warned").wait_for()
    endpoint_id = page.url.rsplit("/", 1)[-1].split("?")[0]
    warning = page.locator("[data-warning]")
    expect_text(warning, r"needs a GPU among \[NVIDIA Imaginary 1\]")
    expect_text(warning, r"`computeType: CPU`.*SKIFF_GPUS")
    assert "Workers start when jobs arrive" not in page.locator(".notice").inner_text()
    shot(page, "endpoint-created-warning")

    page.goto(f"{server.url}/console/endpoints/{endpoint_id}/edit")
    page.get_by_label("Max workers").fill("2")
    page.get_by_role("button", name="Save").click()
    expect_text(page.locator(".notice"), "Saved")
    expect_text(page.locator("[data-warning]"), r"`computeType: CPU`.*SKIFF_GPUS")
    # Only right after saving: the page read later says why workers wait (placement) instead.
    page.goto(f"{server.url}/console/endpoints/{endpoint_id}")
    assert page.locator("[data-warning]").count() == 0
    server.http.delete(f"/v1/endpoints/{endpoint_id}")

    cpu = echo_endpoint(server, "console-unwarned")
    page.goto(f"{server.url}/console/endpoints/{cpu['id']}?created=1")
    expect_text(page.locator(".notice"), "Workers start when jobs arrive")
    assert page.locator("[data-warning]").count() == 0
    server.http.delete(f"/v1/endpoints/{cpu['id']}")


def make_volume(server: Server, name: str, size: int = 1) -> dict[str, Any]:
    made = server.http.post("/v1/networkvolumes", json={"name": name, "size": size})
    assert made.status_code == 200, made.text
    return dict(made.json())


def test_a_volume_is_created_grown_never_shrunk_and_deleted_by_name(
    page: Any, server: Server
) -> None:
    sign_in(page, server)
    page.get_by_role("link", name="Network volumes").click()
    page.get_by_role("heading", name="Network volumes").wait_for()
    if page.locator("table.volumes").count() == 0:
        shot(page, "volumes-empty")

    # Create: a size past the API's bound is refused at its field, then a good one is made.
    page.get_by_label("Name", exact=True).fill("console-models")
    page.get_by_label("Size (GB)").fill("5000")
    page.get_by_role("button", name="Create volume").click()
    expect_text(page.locator("#e-size"), "less than or equal to 4000")
    assert page.get_by_label("Name", exact=True).input_value() == "console-models"
    page.get_by_label("Size (GB)").fill("1")
    page.get_by_role("button", name="Create volume").click()
    expect_text(page.locator(".notice"), "console-models.* created")
    row = page.locator('tr[data-volume="console-models"]')
    expect_text(row.locator("[data-size]"), "^1 GB$")
    expect_text(row.locator("[data-used]"), "^0 B$")
    expect_text(row, "local")
    (volume,) = [
        v for v in server.http.get("/v1/networkvolumes").json() if v["name"] == "console-models"
    ]
    expect_text(row, volume["id"])
    shot(page, "volumes")

    # Grow: the volume's page saves the new size; the API sees it.
    row.get_by_role("link", name="Grow or rename console-models").click()
    page.get_by_role("heading", name="console-models").wait_for()
    page.get_by_label("Size (GB)").fill("3")
    page.get_by_role("button", name="Save").click()
    expect_text(page.locator(".notice"), "Saved")
    expect_text(page.locator("[data-size]"), "^3 GB$")
    assert server.http.get(f"/v1/networkvolumes/{volume['id']}").json()["size"] == 3
    shot(page, "volume")

    # Shrink: refused at the size field with the service's words; nothing changes.
    page.get_by_label("Size (GB)").fill("2")
    page.get_by_role("button", name="Save").click()
    expect_text(page.locator("#e-size"), "grows but never shrinks; it has 3 GB")
    assert page.get_by_label("Size (GB)").input_value() == "2"
    assert server.http.get(f"/v1/networkvolumes/{volume['id']}").json()["size"] == 3
    shot(page, "volume-shrink-refused")

    # Delete: the button stays disabled until the exact name is typed.
    page.get_by_role("link", name="Delete").click()
    button = page.get_by_role("button", name="Delete this volume")
    assert button.is_disabled()
    page.get_by_label(re.compile("to confirm")).fill("console-model")
    assert button.is_disabled()
    page.get_by_label(re.compile("to confirm")).fill("console-models")
    shot(page, "volume-delete")
    button.click()
    expect_text(page.locator(".notice"), "console-models.* deleted")
    assert page.locator('tr[data-volume="console-models"]').count() == 0
    assert server.http.get(f"/v1/networkvolumes/{volume['id']}").status_code == 404


def test_a_volume_attached_to_an_endpoint_is_not_deleted_and_says_to_which(
    browser: Any, server: Server
) -> None:
    """Typed name or not, the service refuses while an endpoint names the volume: its 409
    message, naming the endpoint, is shown at the confirm field. Without script, so the
    server's own check of the typed name is the one that lets the form through."""
    volume = make_volume(server, "console-attached")
    endpoint = echo_endpoint(server, "console-on-volume", networkVolumeId=volume["id"])
    context = browser.new_context(viewport=LAPTOP, java_script_enabled=False)
    page = context.new_page()
    try:
        sign_in(page, server)
        page.goto(f"{server.url}/console/volumes")
        row = page.locator('tr[data-volume="console-attached"]')
        expect_text(row.locator("[data-attached]"), "console-on-volume")
        row.get_by_role("link", name="Delete network volume console-attached").click()
        expect_text(page.locator("[data-attached]"), f"console-on-volume.*{endpoint['id']}")
        page.get_by_label(re.compile("to confirm")).fill("not-its-name")
        page.get_by_role("button", name="Delete this volume").click()
        expect_text(page.locator("#e-confirm_name"), "not this volume's name")
        page.get_by_label(re.compile("to confirm")).fill("console-attached")
        page.get_by_role("button", name="Delete this volume").click()
        expect_text(
            page.locator("#e-confirm_name"), f"attached to endpoint\\(s\\) {endpoint['id']}"
        )
        shot(page, "volume-delete-refused")
        assert server.http.get(f"/v1/networkvolumes/{volume['id']}").status_code == 200
    finally:
        context.close()
        server.http.delete(f"/v1/endpoints/{endpoint['id']}")
        server.http.delete(f"/v1/networkvolumes/{volume['id']}")


def test_a_volume_a_pod_mounts_names_the_pod_and_is_not_deleted(
    browser: Any, server: Server
) -> None:
    """The volume's page and its delete page list the pods mounting it, and the service's 409,
    naming the pod, is shown at the confirm field: its files stay."""
    volume = make_volume(server, "console-pod-data")
    made = server.http.post(
        "/v1/pods",
        json={
            "name": "console-on-data",
            "imageName": "local/python",
            "computeType": "CPU",
            "dockerStartCmd": ["sleep", "600"],
            "networkVolumeId": volume["id"],
        },
    )
    assert made.status_code == 201, made.text
    pod = made.json()
    context = browser.new_context(viewport=LAPTOP, java_script_enabled=False)
    page = context.new_page()
    try:
        sign_in(page, server)
        page.goto(f"{server.url}/console/volumes")
        row = page.locator('tr[data-volume="console-pod-data"]')
        expect_text(row.locator("[data-attached]"), "pod console-on-data")
        row.get_by_role("link", name="Grow or rename console-pod-data").click()
        expect_text(page.locator("[data-pods]"), f"console-on-data.*{pod['id']}")
        page.goto(f"{server.url}/console/volumes/{volume['id']}/delete")
        expect_text(page.locator("[data-pods]"), f"console-on-data.*{pod['id']}")
        page.get_by_label(re.compile("to confirm")).fill("console-pod-data")
        page.get_by_role("button", name="Delete this volume").click()
        expect_text(page.locator("#e-confirm_name"), f"attached to pod\\(s\\) {pod['id']}")
        assert server.http.get(f"/v1/networkvolumes/{volume['id']}").status_code == 200
    finally:
        context.close()
        server.http.delete(f"/v1/pods/{pod['id']}")
        server.http.delete(f"/v1/networkvolumes/{volume['id']}")


def test_the_endpoint_form_attaches_detaches_and_refuses_a_volume(
    page: Any, server: Server
) -> None:
    volume = make_volume(server, "console-weights", size=2)
    gone = make_volume(server, "console-gone")
    template = server.create_template(
        "echo_worker.py",
        name="console-volume-echo",
        category="CPU",
        dockerStartCmd=shlex.split(START_COMMAND),
    )
    sign_in(page, server)

    # Create with a volume chosen: the API has it, the endpoint's page links it.
    page.get_by_role("link", name="New endpoint").click()
    page.get_by_label("Name", exact=True).fill("console-volume-ep")
    page.get_by_label("Template", exact=True).select_option(template["id"])
    page.get_by_label("Compute type").select_option("CPU")
    volumes = page.get_by_label("Network volume")
    assert volumes.input_value() == ""
    volumes.select_option(label="console-weights — 2 GB")
    shot(page, "endpoint-form-volume")
    page.get_by_role("button", name="Create endpoint").click()
    page.get_by_role("heading", name="console-volume-ep").wait_for()
    endpoint_id = page.url.rsplit("/", 1)[-1].split("?")[0]
    assert server.http.get(f"/v1/endpoints/{endpoint_id}").json()["networkVolumeId"] == volume["id"]
    expect_text(page.locator(".facts"), f"Network volume\\s*{volume['id']}")

    # A volume gone by the time the form is saved: refused at its field, nothing saved.
    page.goto(f"{server.url}/console/endpoints/{endpoint_id}/edit")
    volumes = page.get_by_label("Network volume")
    assert volumes.input_value() == volume["id"]
    volumes.select_option(gone["id"])
    expect_text(page.locator("#restart-notice"), "network volume")
    assert server.http.delete(f"/v1/networkvolumes/{gone['id']}").status_code == 204
    page.get_by_role("button", name="Save").click()
    expect_text(page.locator("#e-networkVolumeId"), f"no network volume {gone['id']}")
    assert server.http.get(f"/v1/endpoints/{endpoint_id}").json()["networkVolumeId"] == volume["id"]
    shot(page, "endpoint-form-volume-refused")

    # "None" detaches it, and the volume can go.
    page.get_by_label("Network volume").select_option(label="None")
    page.get_by_role("button", name="Save").click()
    expect_text(page.locator(".notice"), "Saved. The workers restart")
    assert server.http.get(f"/v1/endpoints/{endpoint_id}").json().get("networkVolumeId") is None
    assert server.http.delete(f"/v1/networkvolumes/{volume['id']}").status_code == 204
    server.http.delete(f"/v1/endpoints/{endpoint_id}")


def test_a_pod_is_created_from_a_template_acted_on_and_deleted_by_name(
    page: Any, server: Server
) -> None:
    port = pod_port()
    template = server.http.post(
        "/v1/templates",
        json={
            "name": "console-web",
            "imageName": "local/python",
            # As START_COMMAND: no path of this machine on the screenshots.
            "dockerStartCmd": shlex.split(
                f"""sh -c 'exec "$E2E_PYTHON" "$E2E_WORKERS/pod_server.py" {port}'"""
            ),
            "ports": [f"{port}/http"],
            "volumeInGb": 0,
        },
    )
    assert template.status_code == 200, template.text
    sign_in(page, server)
    page.get_by_role("link", name="Pods").click()
    page.get_by_role("heading", name="Pods", exact=True).wait_for()
    if page.locator("table.pods").count() == 0:
        shot(page, "pods-empty")

    # A port that is not N/http or N/tcp is refused at its field; what was typed stays.
    page.get_by_label("Name", exact=True).fill("console-pod")
    page.get_by_label("Template").select_option(label="console-web (local/python)")
    page.get_by_label("Compute").select_option("CPU")
    page.get_by_label("Ports").fill("8888")
    page.get_by_role("button", name="Create pod").click()
    expect_text(page.locator("#e-ports"), "N/http or N/tcp")
    assert page.get_by_label("Name", exact=True).input_value() == "console-pod"
    page.get_by_label("Ports").fill("")
    page.get_by_role("button", name="Create pod").click()
    expect_text(page.locator(".notice"), "console-pod.* created")
    (pod,) = [p for p in server.http.get("/v1/pods").json() if p["name"] == "console-pod"]

    # Running: its port is a link, its uptime counts, its page shows its log.
    server.wait_for(
        lambda: server.http.get(f"/v1/pods/{pod['id']}").json()["status"] == "running",
        what="the pod to run",
    )
    page.reload()
    row = page.locator('tr[data-pod="console-pod"]')
    expect_text(row.locator("[data-status]"), "running")
    link = row.locator("[data-ports] a")
    assert link.get_attribute("href") == f"http://127.0.0.1:{port}"
    # Running means its process started, not that it listens yet.
    served = eventually(
        lambda: httpx.get(f"http://127.0.0.1:{port}").json(),
        "the pod's port to answer",
        ignoring=(httpx.TransportError,),
    )
    assert served["pod"] == pod["id"]
    expect_text(row.locator("[data-gpus]"), "CPU, 2 vCPU")
    shot(page, "pods")
    row.get_by_role("link", name="Open pod console-pod").click()
    page.get_by_role("heading", name=re.compile("console-pod")).wait_for()
    expect_text(page.locator("[data-log]"), f"serving on {port}")
    shot(page, "pod")

    # Restart in place, then stop (asked first) and start again.
    page.get_by_role("button", name="Restart").click()
    expect_text(page.locator(".notice"), "restarted in place")
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Stop").click()
    expect_text(page.locator(".notice"), "Pod stopped")
    server.wait_for(
        lambda: server.http.get(f"/v1/pods/{pod['id']}").json()["status"] == "stopped",
        what="the pod to stop",
    )
    page.get_by_role("button", name="Start", exact=True).click()
    expect_text(page.locator(".notice"), "Pod started")
    assert server.http.get(f"/v1/pods/{pod['id']}").json()["desiredStatus"] == "RUNNING"

    # Delete: the button stays disabled until the exact name is typed.
    page.get_by_role("link", name="Delete…").click()
    button = page.get_by_role("button", name="Delete this pod")
    assert button.is_disabled()
    page.get_by_label(re.compile("to confirm")).fill("console-po")
    assert button.is_disabled()
    page.get_by_label(re.compile("to confirm")).fill("console-pod")
    shot(page, "pod-delete")
    button.click()
    expect_text(page.locator(".notice"), "console-pod.* deleted")
    assert page.locator('tr[data-pod="console-pod"]').count() == 0
    assert server.http.get(f"/v1/pods/{pod['id']}").status_code == 404


def test_billing_shows_the_month_a_chart_by_day_and_a_csv(
    page: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    prices = tmp_path_factory.mktemp("prices") / "prices.toml"
    prices.write_text("[cpu]\nvcpu_hour = 36.0\n")  # a cent per vCPU-second: visible at once
    env: dict[str, str | None] = {
        "E2E_PYTHON": sys.executable,
        "E2E_WORKERS": str(WORKERS),
        "SKIFF_PRICES": str(prices),
        "SKIFF_SANDBOX": "off",  # as the module's server: START_COMMAND reads its environment
    }
    with running(tmp_path_factory.mktemp("billed") / "data", env=env) as priced:
        endpoint = echo_endpoint(priced, "console-billed", workersMax=1, idleTimeout=60)
        done = priced.http.post(
            f"/v2/{endpoint['id']}/runsync", json={"input": {"n": 1}}, timeout=120
        )
        assert done.json()["status"] == "COMPLETED", done.text
        # The meter opens the worker's usage at its next pass (every 2 s) after the worker is
        # billable: the page is read once the records show it.
        priced.wait_for(
            lambda: any(
                r.get("endpointId") == endpoint["id"]
                for r in priced.http.get("/v1/billing/endpoints").json()
            ),
            timeout=30,
            what="the worker's usage in the billing records",
        )
        sign_in(page, priced)
        page.goto(f"{priced.url}/console/endpoints/{endpoint['id']}")
        expect_text(page.locator("[data-worker-cost]"), r"\$72\.0000 per worker-hour")
        page.get_by_role("link", name="Billing", exact=True).click()
        page.get_by_role("heading", name="Billing").wait_for()
        row = page.locator(f'tr[data-line="endpoint:{endpoint["id"]}"]')
        expect_text(row, "console-billed")
        assert float(row.locator("[data-amount]").inner_text().lstrip("$")) > 0
        assert page.locator("[data-chart] svg rect").count() >= 2  # a bar and its legend
        expect_text(page.locator("[data-month-total]"), r"^\$\d+\.\d\d$")
        shot(page, "billing")
        csv_answer = page.request.get(f"{priced.url}/console/billing.csv")
        assert csv_answer.ok and "text/csv" in csv_answer.headers["content-type"]
        lines = csv_answer.text().splitlines()
        assert lines[0] == "day,kind,id,name,gpuTypeId,timeBilledMs,diskSpaceBilledGb,amount"
        assert any(f"endpoint,{endpoint['id']},console-billed" in line for line in lines[1:])


def test_a_load_balancing_endpoint_is_created_and_shows_its_url(page: Any, server: Server) -> None:
    template = server.create_template(
        "lb_worker.py", name="console-lb", category="CPU", dockerStartCmd=LB_COMMAND
    )
    sign_in(page, server)

    page.get_by_role("link", name="New endpoint").click()
    page.get_by_label("Name", exact=True).fill("console-lb-ep")
    page.get_by_label("Template", exact=True).select_option(template["id"])
    page.get_by_label("Compute type").select_option("CPU")
    page.get_by_label("Type", exact=True).select_option("LB")
    # The scaler left at its default (queue delay) is no refusal: the type decides it.
    page.get_by_role("button", name="Create endpoint").click()
    page.get_by_role("heading", name="console-lb-ep").wait_for()
    endpoint_id = page.url.rsplit("/", 1)[-1].split("?")[0]

    stored = server.http.get(f"/v1/endpoints/{endpoint_id}").json()
    assert (stored["type"], stored["scalerType"]) == ("LB", "REQUEST_COUNT")
    expect_text(page.locator("[data-lb-url]"), f"/lb/{endpoint_id}/")
    expect_text(page.locator("[data-lb-example]"), f"lb/{endpoint_id}/YOUR_PATH")
    assert page.get_by_role("button", name="Send").count() == 0
    # A request through its URL starts a worker, which the live part of the page shows.
    answer = server.http.post(f"/lb/{endpoint_id}/generate", json={"prompt": "console"})
    assert answer.status_code == 200, answer.text
    expect_text(page.locator("[data-worker]").first, "idle|running")
    shot(page, "endpoint-load-balancing")
    page.goto(f"{server.url}/console/endpoints/{endpoint_id}/edit")
    expect_text(page.locator("main form").last, "Type\\s*Load balancing")
    server.http.delete(f"/v1/endpoints/{endpoint_id}")


def test_the_public_models_page_lists_what_is_published(page: Any, server: Server) -> None:
    endpoint = server.create_endpoint("echo_worker.py", name="console-public-echo", workersMax=0)
    published = server.http.post(
        "/v1/models",
        json={"modelId": "console-echo", "endpointId": endpoint["id"], "description": "Echoes"},
    )
    assert published.status_code == 201, published.text
    sign_in(page, server)

    page.get_by_role("link", name="Public models").click()
    page.get_by_role("heading", name="Public models").wait_for()

    row = page.locator('tr[data-model="console-echo"]')
    expect_text(row, "Echoes")
    expect_text(row, "POST /v2/console-echo/run")
    # The administrator who published it sees which of their endpoints runs it.
    expect_text(row, endpoint["id"])
    shot(page, "public-models")
    assert server.http.delete("/v1/models/console-echo").status_code == 204
    server.http.delete(f"/v1/endpoints/{endpoint['id']}")


def test_a_secret_is_created_changed_refused_while_used_and_deleted_by_name(
    page: Any, server: Server
) -> None:
    sign_in(page, server)
    page.get_by_role("link", name="Secrets").click()
    page.get_by_role("heading", name="Secrets").wait_for()
    # A bad name is refused at its field; the value is not sent back.
    page.get_by_label("Name", exact=True).fill("has space")
    page.get_by_label("Value").fill("console-secret-v1")
    page.get_by_role("button", name="Save secret").click()
    expect_text(page.locator("#e-name"), "letters, digits")
    assert page.get_by_label("Name", exact=True).input_value() == "has space"
    assert page.get_by_label("Value").input_value() == ""
    assert "console-secret-v1" not in page.content()
    page.get_by_label("Name", exact=True).fill("console_token")
    page.get_by_label("Value").fill("console-secret-v1")
    page.get_by_role("button", name="Save secret").click()
    expect_text(page.locator(".notice"), "console_token")
    row = page.locator('tr[data-secret="console_token"]')
    expect_text(row, r"\{\{ RUNPOD_SECRET_console_token \}\}")
    assert "console-secret-v1" not in page.content()
    shot(page, "secrets")

    # A template refers to it: the list says so, and the endpoint using it rolls on a change.
    template = server.create_template(
        "echo_worker.py",
        name="console-secret-user",
        env={"TOKEN": "{{ RUNPOD_SECRET_console_token }}"},
    )
    body = {"name": "console-secret-ep", "templateId": template["id"], "computeType": "CPU"}
    endpoint = server.http.post("/v1/endpoints", json=body).json()
    page.reload()
    expect_text(row, "console-secret-user")

    row.get_by_role("link", name="Change the value of secret console_token").click()
    page.get_by_role("heading", name="console_token").wait_for()
    page.get_by_label("Value").fill("console-secret-v2")
    page.get_by_role("button", name="Save value").click()
    expect_text(page.locator(".notice"), "New value saved")
    assert "console-secret-v2" not in page.content()
    rolled = server.http.get(f"/v1/endpoints/{endpoint['id']}").json()
    assert rolled["version"] == endpoint["version"] + 1
    shot(page, "secret")

    # In use, the delete is refused with the service's words; nothing is lost.
    page.get_by_role("link", name="Delete").click()
    page.get_by_label(re.compile("to confirm")).fill("console_token")
    page.get_by_role("button", name="Delete this secret").click()
    expect_text(page.locator("[role=alert], .error"), "used by")
    assert any(s["name"] == "console_token" for s in server.http.get("/v1/secrets").json())

    # Once nothing refers to it, typing its name deletes it.
    server.http.delete(f"/v1/endpoints/{endpoint['id']}")
    server.http.delete(f"/v1/templates/{template['id']}")
    page.goto(page.url)  # the delete page again (a reload would send the refused form again)
    button = page.get_by_role("button", name="Delete this secret")
    page.get_by_label(re.compile("to confirm")).fill("console_toke")
    assert button.is_disabled()
    page.get_by_label(re.compile("to confirm")).fill("console_token")
    shot(page, "secret-delete")
    button.click()
    expect_text(page.locator(".notice"), "console_token.* deleted")
    assert page.locator('tr[data-secret="console_token"]').count() == 0
    assert all(s["name"] != "console_token" for s in server.http.get("/v1/secrets").json())


def test_the_settings_page_keeps_the_public_ssh_key(page: Any, server: Server) -> None:
    sign_in(page, server)
    page.locator("a.who").click()
    page.get_by_role("heading", name="Settings").wait_for()
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIConsole me@laptop"
    page.get_by_label("Public keys, one a line").fill(key)
    page.get_by_role("button", name="Save").click()
    expect_text(page.locator(".notice"), "Saved")
    assert page.get_by_label("Public keys, one a line").input_value() == key
    assert server.http.get("/v1/user").json()["pubKey"] == key
    page.get_by_label("Public keys, one a line").fill("not\ta key")
    page.get_by_role("button", name="Save").click()
    expect_text(page.locator("#e-pubKey"), "printable")
    assert server.http.get("/v1/user").json()["pubKey"] == key
    shot(page, "settings")
