"""A runpod-flash ``FunctionRequest`` read from a job's input and checked field by field, so
that a malformed request is refused saying what is wrong (and the worker goes on) rather than
failing deep inside a call."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

#: The most pip requirements (or system packages) one request may name.
MAX_DEPENDENCIES = 200
#: The longest requirement string taken.
MAX_REQUIREMENT_CHARS = 400
#: The most local modules one request may carry.
MAX_MODULES = 500


class BadRequest(ValueError):
    """The job's input is not a request this worker can run; the message says why."""


@dataclass(frozen=True, slots=True)
class FunctionCall:
    """What one request asks for. ``kind`` is ``"function"`` or ``"class"``; for a class,
    ``name`` is the class's and ``method`` the method called on its instance."""

    kind: str
    name: str
    code: str | None
    args: list[Any]
    kwargs: dict[str, Any]
    dependencies: tuple[str, ...]
    system_dependencies: tuple[str, ...]
    modules: dict[str, str]
    method: str
    constructor_args: list[Any]
    constructor_kwargs: dict[str, Any]
    instance_id: str | None
    new_instance: bool
    json_format: bool


def _optional_str(given: dict[str, Any], field: str) -> str | None:
    value = given.get(field)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{field} must be a string, not {type(value).__name__}")
    return value


def _list(given: dict[str, Any], field: str) -> list[Any]:
    value = given.get(field)
    if value is None:
        return []
    if not isinstance(value, list):
        raise BadRequest(f"{field} must be a list, not {type(value).__name__}")
    return value


def _mapping(given: dict[str, Any], field: str) -> dict[str, Any]:
    value = given.get(field)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise BadRequest(f"{field} must be an object with string keys")
    return value


def _requirements(given: dict[str, Any], field: str) -> tuple[str, ...]:
    names = _list(given, field)
    if len(names) > MAX_DEPENDENCIES:
        raise BadRequest(f"{field} names {len(names)} packages; at most {MAX_DEPENDENCIES}")
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise BadRequest(f"{field} must hold non-empty strings, and holds {name!r}")
        if len(name) > MAX_REQUIREMENT_CHARS or any(c in name for c in "\n\r\0"):
            raise BadRequest(f"{field}: {name[:80]!r} is not a requirement")
        # An option would change how pip installs, not what: "-r file", "--index-url ...".
        if name.lstrip().startswith("-"):
            raise BadRequest(f"{field}: {name!r} is a pip option, not a package")
    return tuple(n.strip() for n in names)


def _modules(given: dict[str, Any]) -> dict[str, str]:
    modules = _mapping(given, "modules")
    if len(modules) > MAX_MODULES:
        raise BadRequest(f"modules holds {len(modules)} files; at most {MAX_MODULES}")
    for path, source in modules.items():
        parts = PurePosixPath(path).parts
        if (
            not path.endswith(".py")
            or path.startswith("/")
            or not parts
            or any(p in ("", ".", "..") for p in parts)
            or "\0" in path
        ):
            raise BadRequest(f"modules: {path!r} is not a relative path of a .py file")
        if not isinstance(source, str):
            raise BadRequest(f"modules: the source of {path!r} must be a string")
    return modules


def read(given: object) -> FunctionCall:
    """The request in a job's input, or ``BadRequest`` saying what is wrong with it."""
    if not isinstance(given, dict):
        raise BadRequest(
            f"the job's input must be a runpod-flash FunctionRequest object, not "
            f"{type(given).__name__}"
        )
    kind = given.get("execution_type", "function")
    if kind not in ("function", "class"):
        raise BadRequest(f"execution_type must be 'function' or 'class', not {kind!r}")
    name = _optional_str(given, "function_name" if kind == "function" else "class_name")
    if not name or not name.isidentifier():
        field = "function_name" if kind == "function" else "class_name"
        raise BadRequest(f"{field} must name a {kind} (an identifier), and is {name!r}")
    code = _optional_str(given, "function_code" if kind == "function" else "class_code")
    if code is None:
        raise BadRequest(
            f"the request carries no {kind}_code: a deployed Flash app's pre-built code is not "
            "served by skiff, only calls that send their source (flash dev, live provisioning)"
        )
    method = _optional_str(given, "method_name") or "__call__"
    if kind == "class" and not method.isidentifier():
        raise BadRequest(f"method_name must be an identifier, not {method!r}")
    serialization = given.get("serialization_format", "cloudpickle")
    if serialization not in ("cloudpickle", "json"):
        raise BadRequest(
            f"serialization_format must be 'cloudpickle' or 'json', not {serialization!r}"
        )
    new_instance = given.get("create_new_instance", True)
    if not isinstance(new_instance, bool):
        raise BadRequest("create_new_instance must be true or false")
    return FunctionCall(
        kind=kind,
        name=name,
        code=code,
        args=_list(given, "args"),
        kwargs=_mapping(given, "kwargs"),
        dependencies=_requirements(given, "dependencies"),
        system_dependencies=_requirements(given, "system_dependencies"),
        modules=_modules(given),
        method=method,
        constructor_args=_list(given, "constructor_args"),
        constructor_kwargs=_mapping(given, "constructor_kwargs"),
        instance_id=_optional_str(given, "instance_id"),
        new_instance=new_instance,
        json_format=serialization == "json",
    )
