"""The runpod handler: one job's ``FunctionRequest`` in, its ``FunctionResponse`` out.

Every outcome is an answer (``success`` true or false), so the runpod-flash client shows the
error it carries: a bad request, a dependency that did not install, an exception in the function
(its type, message and the traceback through the user's lines), a result that cannot be sent
back. The worker itself goes on to the next job."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import io
import sys
import traceback
import uuid
from pathlib import Path
from typing import Any, TextIO

from . import dependencies
from .code import Definitions, Instance, Instances
from .codec import EncodingError, decode_all, encode_result
from .request import BadRequest, FunctionCall, read

#: This package's files: their frames are left out of a traceback sent to the client.
_OWN = str(Path(__file__).resolve().parent)
#: The most captured output one answer carries (the rest is in the worker's log).
MAX_STDOUT_CHARS = 1_000_000

_definitions = Definitions()
_instances = Instances()
#: One call at a time, in the order the SDK started them (as a hosted Flash worker at its
#: default ``max_concurrency`` of 1): the SDK may hold more (``__main__.TAKE_AHEAD``).
_one_at_a_time = asyncio.Lock()


class _Tee(io.TextIOBase):
    """The function's prints: kept for the answer and still written to the worker's log."""

    def __init__(self, through: TextIO) -> None:
        self._through = through
        self._kept = io.StringIO()

    def write(self, text: str) -> int:
        if self._kept.tell() < MAX_STDOUT_CHARS:
            self._kept.write(text)
        self._through.write(text)
        return len(text)

    def flush(self) -> None:
        self._through.flush()

    def value(self) -> str:
        return self._kept.getvalue()[:MAX_STDOUT_CHARS]


def _user_traceback(exc: BaseException) -> str:
    """The exception's traceback without this worker's own frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename.startswith(_OWN):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def _failure(message: str, stdout: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"success": False, "error": message, "stdout": stdout or None, **extra}


async def _finish(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


async def _run(call: FunctionCall) -> tuple[Any, dict[str, Any]]:
    """The call's result and the answer's instance fields."""
    assert call.code is not None  # read() refuses a request without code
    defined = _definitions.define(call.kind, call.name, call.code)
    args, kwargs = decode_all(call.args, call.kwargs, call.name, call.json_format)
    if call.kind == "function":
        return await _finish(defined(*args, **kwargs)), {}
    instance_id = call.instance_id or f"{call.name}_{uuid.uuid4().hex[:8]}"
    instance = None if call.new_instance else _instances.get(instance_id)
    created = instance is None
    if instance is None:
        c_args, c_kwargs = decode_all(
            call.constructor_args, call.constructor_kwargs, f"{call.name}()", call.json_format
        )
        instance = Instance(instance_id, call.name, defined(*c_args, **c_kwargs))
        _instances.put(instance)
    method = getattr(instance.obj, call.method, None)
    if method is None or not callable(method):
        raise BadRequest(f"{call.name} has no method {call.method!r}")
    result = await _finish(method(*args, **kwargs))
    instance.method_calls += 1
    return result, {"instance_id": instance_id, "instance_info": instance.info(created)}


async def handle(job: dict[str, Any]) -> dict[str, Any]:
    async with _one_at_a_time:
        return await _handle(job)


async def _handle(job: dict[str, Any]) -> dict[str, Any]:
    try:
        call = read(job.get("input"))
    except BadRequest as exc:
        return _failure(f"BadRequest: {exc}")
    what = call.name if call.kind == "function" else f"{call.name}.{call.method}"
    try:
        dependencies.ensure_system(call.system_dependencies)
        dependencies.ensure_installed(call.dependencies)
    except dependencies.DependencyError as exc:
        return _failure(f"DependencyError: {exc}")
    tee = _Tee(sys.stdout)
    try:
        with contextlib.redirect_stdout(tee):
            _definitions.add_modules(call.modules)
            result, instance_fields = await _run(call)
    except (BadRequest, EncodingError) as exc:
        return _failure(f"{type(exc).__name__}: {exc}", tee.value())
    except (Exception, SystemExit) as exc:  # the user's code: any exception is its answer
        return _failure(_user_traceback(exc), tee.value())
    try:
        encoded = encode_result(result, what, call.json_format)
    except EncodingError as exc:
        return _failure(f"EncodingError: {exc}", tee.value(), **instance_fields)
    return {"success": True, **encoded, "stdout": tee.value() or None, **instance_fields}
