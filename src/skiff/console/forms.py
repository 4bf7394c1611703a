"""From an HTML form to the API's own input models, and their errors back to form fields.

The console validates with the same pydantic models as ``/v1`` (``EndpointCreate``,
``EndpointUpdate``, ``TemplateCreate``, ``RegistryAuthCreate``, ``NetworkVolumeCreate``,
``NetworkVolumeUpdate``) and the same services, so a
value the API refuses is refused here with the same words, shown next to its field.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from skiff.domain import command_line
from skiff.errors import Conflict, Invalid

#: Field name -> the message shown next to it.
Errors = dict[str, str]
M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Refused:
    """A form sent back to its page: what was typed (shown again), what is wrong with it (by
    field) and the answer's status. A page shown without one has its blank form, no errors
    and status 200."""

    values: dict[str, str]
    errors: Errors
    status: int = 400


#: Endpoint settings the console's endpoint form edits, as the API names them.
ENDPOINT_NUMBERS = (
    "gpuCount",
    "workersMin",
    "workersMax",
    "idleTimeout",
    "scalerValue",
    "executionTimeoutMs",
)
ENDPOINT_FIELDS = (
    "name",
    "templateId",
    "computeType",
    "type",
    "gpuTypeIds",
    *ENDPOINT_NUMBERS,
    "scalerType",
    "env",
    "flashboot",
    "networkVolumeId",
)
#: Template settings the console's template forms edit, as the API names them.
TEMPLATE_FIELDS = (
    "name",
    "imageName",
    "category",
    "dockerEntrypoint",
    "dockerStartCmd",
    "env",
    "containerRegistryAuthId",
)
#: Network volume settings the console's volume forms edit, as the API names them.
VOLUME_FIELDS = ("name", "size")
POD_NUMBERS = ("gpuCount", "vcpuCount", "volumeInGb", "containerDiskInGb")
POD_FIELDS = (
    "name",
    "templateId",
    "imageName",
    "computeType",
    "gpuTypeIds",
    *POD_NUMBERS,
    "dockerStartCmd",
    "ports",
    "env",
    "volumeMountPath",
    "networkVolumeId",
)


class FieldError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


def lines(text: str) -> list[str]:
    """Non-empty lines, trimmed: one GPU type (or one command word) a line."""
    return [line.strip() for line in text.splitlines() if line.strip()]


def parse_env(text: str, field: str = "env") -> dict[str, str]:
    """``KEY=VALUE`` a line; blank lines and lines starting with ``#`` are skipped."""
    env: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise FieldError(field, f"line {number}: expected KEY=VALUE")
        env[key.strip()] = value
    return env


def format_env(env: Mapping[str, str]) -> str:
    return "\n".join(f"{key}={value}" for key, value in env.items())


def parse_command(text: str, field: str) -> list[str]:
    """A command line split the way a POSIX shell splits it (quotes keep spaces)."""
    try:
        return command_line.split(text)
    except ValueError as exc:
        raise FieldError(field, f"cannot split this command: {exc}") from None


def format_command(words: Iterable[str]) -> str:
    return shlex.join(words)


def validation_errors(exc: ValidationError, fields: Iterable[str], fallback: str) -> Errors:
    """One message per form field. An error of the whole model (``workersMin`` above
    ``workersMax``) or of a field the form does not show goes to ``fallback``."""
    known = set(fields)
    errors: Errors = {}
    for error in exc.errors():
        loc = error.get("loc", ())
        field = str(loc[0]) if loc and str(loc[0]) in known else fallback
        message = str(error.get("msg", "invalid value")).removeprefix("Value error, ")
        errors.setdefault(field, message)
    return errors


def service_error(exc: Invalid | Conflict, fallback: str) -> Errors:
    """A service's refusal at its field (a ``Conflict``, a name taken, at ``fallback``), its
    message without the ``field: `` prefix."""
    field = (exc.field if isinstance(exc, Invalid) else None) or fallback
    return {field: exc.message.removeprefix(f"{field}: ")}


def validate(
    model: type[M], data: Mapping[str, Any], fields: Iterable[str], fallback: str
) -> tuple[M | None, Errors]:
    try:
        return model.model_validate(dict(data)), {}
    except ValidationError as exc:
        return None, validation_errors(exc, fields, fallback)


def endpoint_data(form: Mapping[str, str], creating: bool) -> tuple[dict[str, Any], Errors]:
    """The endpoint form as the API's input. A number left empty is left out (the default on
    create, unchanged on edit); the lists and ``env`` are always sent, so emptying one clears
    it. ``computeType`` is fixed once the endpoint exists."""
    data: dict[str, Any] = {}
    errors: Errors = {}
    name = form.get("name", "").strip()
    if name or not creating:
        data["name"] = name
    if form.get("templateId"):
        data["templateId"] = form["templateId"]
    if creating:
        data["computeType"] = form.get("computeType", "GPU")
        data["type"] = form.get("type", "QB")
    data["gpuTypeIds"] = lines(form.get("gpuTypeIds", ""))
    for field in ENDPOINT_NUMBERS:
        raw = form.get(field, "").strip()
        if raw:
            data[field] = number(raw)
    if form.get("scalerType"):
        data["scalerType"] = form["scalerType"]
    if creating and data["type"] == "LB" and data.get("scalerType") == "QUEUE_DELAY":
        # The form's default choice: a load-balancing endpoint has no queue to wait in, and
        # scales by request count (its own default).
        del data["scalerType"]
    try:
        data["env"] = parse_env(form.get("env", ""))
    except FieldError as exc:
        errors[exc.field] = exc.message
    data["flashboot"] = form.get("flashboot") == "on"
    # "None" is the empty choice: left out of a new endpoint, and sent as null by an edit,
    # which detaches the volume.
    volume = form.get("networkVolumeId", "")
    if volume or not creating:
        data["networkVolumeId"] = volume or None
    return data, errors


def number(raw: str) -> int | str:
    """A typed number as the API's input: the API takes numbers only as JSON numbers, so
    what is not one is passed on as typed, for the model to refuse at its field."""
    return int(raw) if raw.isdecimal() and raw.isascii() else raw


def volume_data(form: Mapping[str, str]) -> dict[str, Any]:
    """The volume form (create, or rename and grow) as the API's input; a field left empty
    is left out (the model says a new volume needs it; an edit keeps it as it is)."""
    data: dict[str, Any] = {}
    name = form.get("name", "").strip()
    if name:
        data["name"] = name
    size = form.get("size", "").strip()
    if size:
        data["size"] = number(size)
    return data


def template_data(form: Mapping[str, str], prefix: str = "") -> tuple[dict[str, Any], Errors]:
    """A new template from the template form (or the endpoint form's ``template_`` part);
    errors are keyed by the form's own field names, prefix included."""
    data: dict[str, Any] = {}
    errors: Errors = {}
    for field in ("name", "imageName", "category"):
        value = form.get(prefix + field, "").strip()
        if value:
            data[field] = value
    for field in ("dockerEntrypoint", "dockerStartCmd"):
        try:
            data[field] = parse_command(form.get(prefix + field, ""), prefix + field)
        except FieldError as exc:
            errors[exc.field] = exc.message
    try:
        data["env"] = parse_env(form.get(prefix + "env", ""), prefix + "env")
    except FieldError as exc:
        errors[exc.field] = exc.message
    auth = form.get(prefix + "containerRegistryAuthId", "")
    if auth:
        data["containerRegistryAuthId"] = auth
    return data, errors


def pod_data(form: Mapping[str, str]) -> tuple[dict[str, Any], Errors]:
    """The new-pod form as the API's input. What is left empty is left out, so that a
    template's value (or the default) holds; ports are separated by commas or spaces."""
    data: dict[str, Any] = {"computeType": form.get("computeType", "GPU")}
    errors: Errors = {}
    for field in ("name", "templateId", "imageName", "volumeMountPath", "networkVolumeId"):
        value = form.get(field, "").strip()
        if value:
            data[field] = value
    types = lines(form.get("gpuTypeIds", ""))
    if types:
        data["gpuTypeIds"] = types
    for field in POD_NUMBERS:
        raw = form.get(field, "").strip()
        if raw:
            data[field] = number(raw)
    ports = form.get("ports", "").replace(",", " ").split()
    if ports:
        data["ports"] = ports
    command = form.get("dockerStartCmd", "")
    if command.strip():
        try:
            data["dockerStartCmd"] = parse_command(command, "dockerStartCmd")
        except FieldError as exc:
            errors[exc.field] = exc.message
    try:
        env = parse_env(form.get("env", ""))
    except FieldError as exc:
        errors[exc.field] = exc.message
    else:
        if env:
            data["env"] = env
    return data, errors


def prefixed(errors: Errors, prefix: str) -> Errors:
    return {prefix + field: message for field, message in errors.items()}


#: The value of ``"accessSecret":`` in a job body as typed: a whole JSON string, or the rest of
#: its line when the string was left open (which may be why the body was refused).
_S3_SECRET = re.compile(r'("accessSecret"\s*:\s*)"(?:[^"\\\n]|\\.)*"?')


def without_s3_secret(body: str) -> str:
    """A refused job body as the request panel shows it back: ``s3Config.accessSecret``
    emptied, as a registry password is never sent back. Everything else stays as typed, so
    the visitor can fix what was wrong."""
    return _S3_SECRET.sub(r'\1""', body)
