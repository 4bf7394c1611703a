"""Arguments in and results out, as runpod-flash encodes them: base64 of cloudpickle by
default, plain JSON values when the request says ``serialization_format: "json"``."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import cloudpickle  # type: ignore[import-untyped]


class EncodingError(ValueError):
    """An argument that cannot be read, or a result that cannot be sent back; says which."""


def decode(value: Any, what: str, json_format: bool) -> Any:
    if json_format:
        return value
    if not isinstance(value, str):
        raise EncodingError(
            f"{what} must be base64 cloudpickle (a string), not {type(value).__name__}"
        )
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise EncodingError(f"{what} is not base64: {exc}") from exc
    try:
        return cloudpickle.loads(raw)
    except Exception as exc:  # whatever unpickling raises: a module missing here, a bad stream
        raise EncodingError(
            f"{what} could not be unpickled: {type(exc).__name__}: {exc} (a class or module "
            "it refers to may be missing on the worker: add it to dependencies)"
        ) from exc


def decode_all(
    args: list[Any], kwargs: dict[str, Any], what: str, json_format: bool
) -> tuple[list[Any], dict[str, Any]]:
    return (
        [decode(v, f"{what} argument {i}", json_format) for i, v in enumerate(args)],
        {k: decode(v, f"{what} argument {k!r}", json_format) for k, v in kwargs.items()},
    )


def encode_result(value: Any, what: str, json_format: bool) -> dict[str, Any]:
    """The response's ``json_result`` or ``result`` field for ``value``."""
    if json_format:
        try:
            json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise EncodingError(
                f"the result of {what} ({type(value).__name__}) is not JSON: {exc}; use "
                "the default cloudpickle serialization to return it"
            ) from exc
        return {"json_result": value}
    try:
        pickled = cloudpickle.dumps(value)
    except Exception as exc:  # pickling raises TypeError, PicklingError, or the object's own
        raise EncodingError(
            f"the result of {what} ({type(value).__name__}) cannot be pickled: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return {"result": base64.b64encode(pickled).decode("ascii")}
