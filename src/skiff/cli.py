"""The ``skiff`` command: serve, manage keys, print a worker's environment, read workers' logs."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import FrameType
from typing import IO, Any, TypeVar
from urllib.parse import quote

import click
import httpx
import orjson
from pydantic import ValidationError

from skiff import __version__
from skiff.builtin_models.catalog import CATALOG
from skiff.clock import SystemClock
from skiff.config import Settings
from skiff.databases import Backend, backend_of
from skiff.datadir import make_private_dir, make_private_dirs
from skiff.domain.gpu_holders import gpu_holders
from skiff.listen import CannotListen, listen
from skiff.serve_lock import LOCK_NAME, AlreadyServing, ServeLock, lock_path_of_database, take
from skiff.services.auth import Auth, IssuedKey
from skiff.setting_errors import explain
from skiff.store import open_configured, safe_url
from skiff.store.base import Store
from skiff.store.sealing import SealingKeyProblem

T = TypeVar("T")


#: The command-line options that stand for settings: an error names the option it came by.
_FLAGS = {
    "host": "--host",
    "port": "--port",
    "data_dir": "--data-dir",
    "database_url": "--database",
}


class SettingsProblem(click.ClickException):
    """Settings that cannot be read: one ``Error:`` line each, no traceback."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines

    def show(self, file: IO[Any] | None = None) -> None:
        for line in self.lines:
            click.echo(f"Error: {line}", err=True, file=file)


def _settings(**overrides: Any) -> Settings:
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        return Settings(**given)
    except ValidationError as exc:
        flags = {field: flag for field, flag in _FLAGS.items() if field in given}
        raise SettingsProblem(explain(exc, Settings, "SKIFF_", os.environ, flags)) from None


def _data_dir_option(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--database",
        "database_url",
        default=None,
        help=(
            "sqlite:///path or postgresql://... "
            "[env SKIFF_DATABASE_URL; default skiff.db in the data directory]"
        ),
    )(f)
    return click.option(
        "--data-dir",
        type=click.Path(path_type=Path, file_okay=False),
        default=None,
        help="Where state, logs and worker homes live. [env SKIFF_DATA_DIR; default ./.skiff]",
    )(f)


async def _opened(_store: Store) -> None:
    """Nothing to do with the store but open it."""


def _with_store(settings: Settings, work: Callable[[Store], Awaitable[T]]) -> T:
    async def run() -> T:
        store = open_configured(settings)
        try:
            await store.open()
        except SealingKeyProblem as exc:
            raise SettingsProblem([str(exc)]) from None
        try:
            return await work(store)
        finally:
            await store.close()

    return asyncio.run(run())


def _claim(settings: Settings) -> tuple[ServeLock, socket.socket]:
    """This server's state and port, taken before anything reads or changes either: a second
    server on state in use would otherwise sweep the first one's workers as leftovers and fail
    their jobs (serve_lock.py), and one whose port is taken would find out only after its
    whole start-up (listen.py)."""
    data_dir = settings.data_dir
    made = not data_dir.exists()
    make_private_dir(data_dir)
    paths = [data_dir / LOCK_NAME]
    if backend_of(settings.database_url) is Backend.SQLITE:
        # The database's own lock too, wherever it is: another data directory may name it.
        database = settings.sqlite_path()
        make_private_dirs(database.parent)
        paths.append(lock_path_of_database(database))
    try:
        lock = take(paths, settings.own_url(), data_dir)
    except AlreadyServing as exc:
        raise click.ClickException(str(exc)) from None
    try:
        sock = listen(settings.host, settings.port)
    except CannotListen as exc:
        lock.release()
        if made:  # leave no trace of a start that never happened in a folder it made
            with contextlib.suppress(OSError):
                for path in paths:
                    if path.parent == data_dir:
                        path.unlink()
                os.rmdir(data_dir)
        raise click.ClickException(str(exc)) from None
    return lock, sock


#: A second Ctrl-C's exit code: ended by SIGINT, as shells count it (128 + 2).
FORCED_EXIT_CODE = 130


def _end_at_once() -> None:
    """A second Ctrl-C during the graceful stop: end now, without waiting out the workers' stop
    grace (uvicorn's own forced exit skips only its wait for connections). Local workers die
    with the process (their PDEATHSIG); what the stop left undone (a worker's jobs, a
    container) is taken up at the next start, as after a crash: nothing accepted is lost, the
    database being written only in transactions."""
    sys.stderr.write(
        "\nSecond Ctrl-C: ending at once. Local workers end with the server; their jobs go back"
        " to the queue at the next start.\n"
    )
    sys.stderr.flush()
    os._exit(FORCED_EXIT_CODE)


def _ignore(_sig: int, _frame: FrameType | None) -> None:
    """What a stop signal does once uvicorn has shut down (see ``serve``)."""


@click.group()
@click.version_option(__version__, prog_name="skiff")
def main() -> None:
    """skiff: self-hosted serverless compute with a runpod-compatible job API."""


@main.command()
@click.option("--host", default=None, help="Address to listen on. [default 127.0.0.1]")
@click.option("--port", type=int, default=None, help="Port to listen on. [default 8000]")
@_data_dir_option
def serve(
    host: str | None, port: int | None, data_dir: Path | None, database_url: str | None
) -> None:
    """Run the whole platform in this process: API, scaler and local workers."""
    import uvicorn

    from skiff.api.connections import ConnectionRules, connection_cap, raise_open_file_limit
    from skiff.api.lean_http import lean_protocol, untested_uvicorn
    from skiff.app import create_app

    settings = _settings(host=host, port=port, data_dir=data_dir, database_url=database_url)
    if settings.fast_http:
        # The fast protocol subclasses uvicorn's internals: on another uvicorn it could answer
        # wrongly in ways no error shows, so refuse before anything starts.
        untested = untested_uvicorn()
        if untested is not None:
            raise click.ClickException(untested)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    # httpx logs every request it makes at INFO: the health checks of load-balancing workers
    # (twice a second each) and every request passed to them would bury the server's own log.
    # Failures are logged by skiff where they matter.
    logging.getLogger("httpx").setLevel(logging.WARNING)

    def announce(issued: IssuedKey) -> None:
        click.echo(
            "\n  First start: an administrator API key was created. It is shown only once;\n"
            "  only its hash is stored. Keep it somewhere safe:\n\n"
            f"    {issued.key}\n",
            err=False,
        )
        sys.stdout.flush()

    try:
        app = create_app(settings, on_first_key=announce)
    except ValueError as exc:  # a setting that cannot work, e.g. a malformed SKIFF_GPUS
        raise click.ClickException(str(exc)) from None
    # Building the app only checks the settings; nothing has read or changed state yet.
    lock, sock = _claim(settings)
    try:
        # The secret key checked against the database (and an earlier version's secrets
        # encrypted) before anything starts: a key file gone missing is one Error line here,
        # not a start that fails half-way (store/sealing.py).
        _with_store(settings, _opened)
    except BaseException:
        sock.close()
        lock.release()
        raise
    # Each connection holds a file: take the open-file limit up to what the hard limit allows
    # and keep connections below it, with time limits on slow ones (api/connections.py).
    open_files = raise_open_file_limit()
    rules = ConnectionRules(
        header_timeout=settings.header_timeout_seconds,
        body_timeout=settings.body_timeout_seconds,
        max_connections=settings.max_connections or connection_cap(open_files),
    )
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",
        # uvicorn's httptools protocol, serving the hot /v2 routes without the ASGI cycle
        # (api/v2.py, api/lean_http.py), under the connection rules (api/connections.py);
        # uvicorn's own with SKIFF_FAST_HTTP=0.
        http=lean_protocol(app.hot, rules)
        if settings.fast_http and app.hot is not None
        else "httptools",
        lifespan="on",
        access_log=False,
        log_level="info",
        timeout_graceful_shutdown=3,
        # A synchronous handler blocks the SDK's event loop, leaving its pooled connection idle
        # for as long as the job runs; closing it server-side makes the SDK's job-done POST
        # fail on a dead socket and drop the result. Let the client close idle connections
        # first (aiohttp does after 15 s).
        timeout_keep_alive=3600,
    )
    wakeups = app.state.services.wakeups

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            if sig == signal.SIGINT and self.should_exit:
                _end_at_once()
            # Answer held long-polls now, so the graceful shutdown does not wait them out.
            wakeups.close_threadsafe()
            super().handle_exit(sig, frame)

        async def serve(self, sockets: list[socket.socket] | None = None) -> None:
            # uvicorn raises the signal that stopped it again once it has shut down, with the
            # handlers it found: Python's own would make a Ctrl-C "Aborted!" with exit code 1
            # and a SIGTERM a death by signal. A stop asked for is a server's normal end: exit 0.
            for stop in (signal.SIGINT, signal.SIGTERM):
                signal.signal(stop, _ignore)
            await super().serve(sockets)

    click.echo(f"skiff {__version__} on {settings.base_url()} (data in {settings.data_dir})")
    try:
        Server(config).run(sockets=[sock])
    finally:
        lock.release()


@main.command()
@_data_dir_option
def migrate(data_dir: Path | None, database_url: str | None) -> None:
    """Apply schema migrations (serve does this at start too)."""
    settings = _settings(data_dir=data_dir, database_url=database_url)

    async def run() -> list[str]:
        store = open_configured(settings)
        try:
            applied = await store.open()
        except SealingKeyProblem as exc:
            raise SettingsProblem([str(exc)]) from None
        await store.close()
        return applied

    applied = asyncio.run(run())
    where = safe_url(settings.database_url) if settings.database_url else settings.sqlite_path()
    if settings.database_url and settings.database_schema:
        where = f"{where} (schema {settings.database_schema})"
    click.echo(_migrated(applied, str(where)))


def _migrated(applied: list[str], where: str) -> str:
    """What ``skiff migrate`` did, in words: which migrations it applied, or that none was due."""
    if not applied:
        return f"schema already up to date in {where}: no migration to apply"
    names = applied[0] if len(applied) == 1 else f"{applied[0]} .. {applied[-1]}"
    plural = "migration" if len(applied) == 1 else "migrations"
    return f"applied {len(applied)} {plural} ({names}) in {where}; the schema is now up to date"


@main.group()
def keys() -> None:
    """Create, list and revoke API keys."""


@keys.command("create")
@click.option(
    "--user",
    "user_name",
    default="admin",
    show_default=True,
    help="Owner of the key; created if new.",
)
@click.option("--admin", is_flag=True, help="Make a new user an administrator.")
@click.option("--label", default="", help="A note to tell keys apart.")
@_data_dir_option
def keys_create(
    user_name: str, admin: bool, label: str, data_dir: Path | None, database_url: str | None
) -> None:
    """Create a key and print it (once; only its hash is stored)."""
    settings = _settings(data_dir=data_dir, database_url=database_url)

    async def work(store: Store) -> IssuedKey:
        return await Auth(store, SystemClock(), 0).issue_key(user_name, admin, label)

    issued = _with_store(settings, work)
    click.echo(issued.key)
    click.echo(f"key {issued.record.id} for user {issued.user.name}", err=True)


@keys.command("list")
@_data_dir_option
def keys_list(data_dir: Path | None, database_url: str | None) -> None:
    """List keys (never the keys themselves: a hint, the owner, the state, the permissions)."""
    settings = _settings(data_dir=data_dir, database_url=database_url)
    rows = _with_store(settings, lambda store: store.list_api_keys())
    click.echo(f"{'ID':<12} {'USER':<16} {'HINT':<14} {'STATE':<9} {'PERMISSIONS':<11} LABEL")
    for key, user in rows:
        # A disabled user's keys are refused as a revoked key is, until the user is enabled.
        state = "revoked" if key.revoked_at else "disabled" if user.disabled_at else "active"
        kind = str(key.permissions.kind)
        click.echo(f"{key.id:<12} {user.name:<16} {key.hint:<14} {state:<9} {kind:<11} {key.label}")


@keys.command("revoke")
@click.argument("key_id")
@_data_dir_option
def keys_revoke(key_id: str, data_dir: Path | None, database_url: str | None) -> None:
    """Revoke a key by its id (a running server stops accepting it within seconds)."""
    settings = _settings(data_dir=data_dir, database_url=database_url)
    if not _with_store(settings, lambda store: store.revoke_api_key(key_id, SystemClock().now())):
        raise click.ClickException(f"no active key with id {key_id}")
    click.echo(f"revoked {key_id}")


@main.command("worker-token")
@click.argument("endpoint_id")
@click.option(
    "--url", default=None, help="Platform URL the worker reaches. [default: from settings]"
)
@_data_dir_option
def worker_token(
    endpoint_id: str, url: str | None, data_dir: Path | None, database_url: str | None
) -> None:
    """Print the environment an external worker needs to serve ENDPOINT_ID."""
    settings = _settings(data_dir=data_dir, database_url=database_url, public_url=url)

    async def work(store: Store) -> str:
        if await store.get_endpoint(endpoint_id) is None:
            raise click.ClickException(f"no endpoint {endpoint_id}")
        return await Auth(store, SystemClock(), 0).worker_token(endpoint_id)

    token = _with_store(settings, work)
    base = f"{settings.base_url()}/v2/{endpoint_id}"
    for name, value in (
        ("RUNPOD_WEBHOOK_GET_JOB", f"{base}/job-take/$ID?gpu=external"),
        ("RUNPOD_WEBHOOK_POST_OUTPUT", f"{base}/job-done/$RUNPOD_POD_ID/$ID?gpu=external"),
        ("RUNPOD_WEBHOOK_POST_STREAM", f"{base}/job-stream/$RUNPOD_POD_ID/$ID?gpu=external"),
        ("RUNPOD_WEBHOOK_PING", f"{base}/ping/$RUNPOD_POD_ID?gpu=external"),
        ("RUNPOD_AI_API_KEY", token),
        ("RUNPOD_ENDPOINT_ID", endpoint_id),
        ("RUNPOD_SKIP_AUTO_SYSTEM_CHECKS", "true"),
    ):
        click.echo(f"export {name}='{value}'")
    click.echo("# also set RUNPOD_POD_ID to a unique name for each worker", err=True)


def _print_log_line(item: dict[str, Any]) -> None:
    time_text = item.get("time") or "-"
    click.echo(f"{time_text} {item.get('worker', '-')} {item.get('line', '')}")


def _api_error(response: httpx.Response) -> click.ClickException:
    try:
        message = str(response.json().get("message", response.text))
    except ValueError:
        message = response.text
    return click.ClickException(f"{response.status_code}: {message}")


@main.command()
@click.argument("endpoint_id")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new lines until Ctrl-C.")
@click.option("--worker", default=None, help="Only this worker's lines.")
@click.option("--pod", is_flag=True, help="The id is a pod's: print the pod's output.")
@click.option(
    "--since", default=None, help="Only lines from this time on (ISO-8601 or epoch seconds)."
)
@click.option(
    "--tail", type=click.IntRange(1, 10000), default=1000, show_default=True, help="Last N lines."
)
@click.option(
    "--url",
    envvar="SKIFF_PUBLIC_URL",
    default=None,
    help="The server's address. [env SKIFF_PUBLIC_URL; else from SKIFF_HOST and SKIFF_PORT]",
)
@click.option("--key", envvar="SKIFF_API_KEY", default=None, help="API key. [env SKIFF_API_KEY]")
def logs(
    endpoint_id: str,
    follow: bool,
    worker: str | None,
    pod: bool,
    since: str | None,
    tail: int,
    url: str | None,
    key: str | None,
) -> None:
    """Print the output of ENDPOINT_ID's workers (or, with --pod, of a pod): TIME WORKER LINE,
    oldest first."""
    if not key:
        raise click.ClickException("no API key: pass --key or set SKIFF_API_KEY")
    if pod and worker is not None:
        raise click.UsageError("--worker names an endpoint's worker: a pod has no workers")
    params: dict[str, str | int] = {"tail": tail}
    if worker is not None:
        params["worker"] = worker
    if since is not None:
        params["since"] = since
    url = url or _settings().base_url()
    resource = "pods" if pod else "endpoints"
    path = f"{url.rstrip('/')}/v1/{resource}/{quote(endpoint_id, safe='')}/logs"
    headers = {"Authorization": f"Bearer {key}"}
    try:
        if not follow:
            response = httpx.get(path, params=params, headers=headers, timeout=60)
            if response.status_code != 200:
                raise _api_error(response)
            for item in response.json()["lines"]:
                _print_log_line(item)
            return
        params["follow"] = "true"
        # No read timeout: a quiet log sends nothing but a keep-alive now and then.
        timeout = httpx.Timeout(30, read=None)
        with httpx.stream("GET", path, params=params, headers=headers, timeout=timeout) as stream:
            if stream.status_code != 200:
                stream.read()
                raise _api_error(stream)
            for text in stream.iter_lines():
                if text.strip():
                    _print_log_line(orjson.loads(text))
                    sys.stdout.flush()
    except httpx.HTTPError as exc:
        raise click.ClickException(f"cannot reach {url}: {exc}") from None
    except KeyboardInterrupt:
        # Ctrl-C is how a follow ends: no traceback.
        sys.exit(130)


@main.command()
@_data_dir_option
def gpus(data_dir: Path | None, database_url: str | None) -> None:
    """List this host's GPUs (NVML, or SKIFF_GPUS) and the worker or pod holding each; with
    SKIFF_PROVIDER=ray, the Ray cluster's, node by node."""
    from skiff.providers.gpus import inventory

    settings = _settings(data_dir=data_dir, database_url=database_url)
    if settings.provider == "ray":
        _cluster_gpus(settings)
        return
    try:
        fleet = inventory(settings.gpus)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    if not fleet:
        click.echo("no GPUs: NVML found none and SKIFF_GPUS is not set")
        return

    async def holders(store: Store) -> dict[int, str]:
        return gpu_holders(await store.list_workers(None), await store.list_pods(None))

    holder = _with_store(settings, holders)
    click.echo(f"{'GPU':<4} {'TYPE':<32} HELD BY")
    for gpu in fleet:
        click.echo(f"{gpu.index:<4} {gpu.name:<32} {holder.get(gpu.index, '-')}")


def _cluster_gpus(settings: Settings) -> None:
    """``skiff gpus`` on a Ray cluster: what its nodes declare, held by which actor."""
    from skiff.providers import ray, ray_pods
    from skiff.providers.ray_cluster import Placed, RayConnection

    if not settings.ray_address:
        raise click.ClickException("SKIFF_PROVIDER=ray needs SKIFF_RAY_ADDRESS")
    connection = RayConnection(settings.ray_address, settings.ray_namespace)
    try:
        connection.connect()
    except Exception as exc:
        raise click.ClickException(f"cannot reach the Ray cluster: {exc}") from None

    def worker(placed: Placed) -> str:
        return f"{placed.info['endpoint_id']}/{placed.name.removeprefix(ray.ACTOR_PREFIX)}"

    def pod(placed: Placed) -> str:
        return f"pod {placed.name.removeprefix(ray_pods.ACTOR_PREFIX)}"

    try:
        rows = asyncio.run(
            connection.holders({ray.ACTOR_PREFIX: worker, ray_pods.ACTOR_PREFIX: pod})
        )
    finally:
        connection.close()
    if not rows:
        click.echo(
            "no GPUs: no node of the Ray cluster declares a skiff_gpu:<type> resource (docs/ray.md)"
        )
        return
    click.echo(f"{'GPU':<4} {'TYPE':<32} {'NODE':<14} HELD BY")
    for gpu, holder in rows:
        click.echo(f"{gpu.index:<4} {gpu.name:<32} {gpu.node[:12]:<14} {holder or '-'}")


_URL_OPTION = click.option(
    "--url",
    envvar="SKIFF_PUBLIC_URL",
    default=None,
    help="The server's address. [env SKIFF_PUBLIC_URL; else from SKIFF_HOST and SKIFF_PORT]",
)
_KEY_OPTION = click.option(
    "--key", envvar="SKIFF_API_KEY", default=None, help="API key. [env SKIFF_API_KEY]"
)


class _Api:
    """The running server's /v1, as the key's user."""

    def __init__(self, url: str | None, key: str | None) -> None:
        if not key:
            raise click.ClickException("no API key: pass --key or set SKIFF_API_KEY")
        self.url = (url or _settings().base_url()).rstrip("/")
        self._client = httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=60
        )

    def call(self, method: str, path: str, ok: tuple[int, ...], **kwargs: Any) -> Any:
        try:
            response = self._client.request(method, f"/v1{path}", **kwargs)
        except httpx.HTTPError as exc:
            raise click.ClickException(f"cannot reach {self.url}: {exc}") from None
        if response.status_code not in ok:
            raise _api_error(response)
        return response.json() if response.content else None


@main.group()
def models() -> None:
    """Public model endpoints: list them, or turn a ready-made one on or off."""


@models.command("list")
@_URL_OPTION
@_KEY_OPTION
def models_list(url: str | None, key: str | None) -> None:
    """The published models (any user), and the ready-made ones that can be enabled."""
    published = {m["modelId"]: m for m in _Api(url, key).call("GET", "/models", (200,))}
    for model_id, model in published.items():
        click.echo(f"{model_id}  published  {model['jobUrl']}  {model['description']}")
    for model_id in CATALOG:
        if model_id not in published:
            click.echo(f"{model_id}  available  (skiff models enable {model_id})")


@models.command("enable")
@click.argument("model_id", type=click.Choice(sorted(CATALOG)))
@click.option("--workers-max", type=click.IntRange(1, 1000), default=None, help="[default 2]")
@_URL_OPTION
@_KEY_OPTION
def models_enable(model_id: str, workers_max: int | None, url: str | None, key: str | None) -> None:
    """Publish the ready-made MODEL_ID (an administrator's key): a template that runs its worker
    with this Python, a CPU endpoint, and the model id every user calls as /v2/MODEL_ID/run.
    The server must run workers as processes on this host (the local provider)."""
    builtin = CATALOG[model_id]
    missing = builtin.missing()
    if missing:
        raise click.ClickException(
            f"this Python lacks {', '.join(missing)}, which the {model_id} worker needs: "
            f"{builtin.install}"
        )
    api = _Api(url, key)
    if any(m["modelId"] == model_id for m in api.call("GET", "/models", (200,))):
        raise click.ClickException(f"{model_id} is published already")
    name = f"model-{model_id}"
    templates = api.call("GET", "/templates", (200,))
    template = next((t for t in templates if t["name"] == name), None)
    if template is None:
        template = api.call(
            "POST",
            "/templates",
            (200,),
            json={
                "name": name,
                "imageName": f"skiff/{model_id}",
                "category": "CPU",
                "dockerStartCmd": [sys.executable, "-m", builtin.module],
                "env": {"SKIFF_MODEL_ID": model_id},
            },
        )
    settings: dict[str, Any] = dict(builtin.endpoint)
    if workers_max is not None:
        settings["workersMax"] = workers_max
    endpoint = api.call(
        "POST", "/endpoints", (200,), json={"name": name, "templateId": template["id"], **settings}
    )
    api.call(
        "POST",
        "/models",
        (201,),
        json={
            "modelId": model_id,
            "endpointId": endpoint["id"],
            "description": builtin.description,
        },
    )
    click.echo(f"{model_id} is published (endpoint {endpoint['id']}). Every user calls it as")
    click.echo(
        f"  curl -X POST {api.url}/v2/{model_id}/runsync -H 'Authorization: Bearer $KEY' "
        """-d '{"input": {"texts": ["a sentence"]}}'"""
    )


@models.command("disable")
@click.argument("model_id")
@_URL_OPTION
@_KEY_OPTION
def models_disable(model_id: str, url: str | None, key: str | None) -> None:
    """Withdraw MODEL_ID (an administrator's key); a ready-made one's endpoint is deleted too."""
    api = _Api(url, key)
    api.call("DELETE", f"/models/{quote(model_id, safe='')}", (204,))
    for endpoint in api.call("GET", "/endpoints", (200,)):
        if endpoint["name"] == f"model-{model_id}" and model_id in CATALOG:
            api.call("DELETE", f"/endpoints/{endpoint['id']}", (200, 204))
    click.echo(f"{model_id} is withdrawn")
