"""``POST /graphql``: the management half of the runpod SDK (``runpod.api``, the ``runpod``
CLI) speaks GraphQL to ``$RUNPOD_API_BASE_URL/graphql``. Served by ariadne (schema first, on
graphql-core) over the same services as ``/v1``: one set of rules, the same key, each user's
own resources alone.

Errors come back the GraphQL way: HTTP 200 with ``{"errors": [{"message": ...}]}`` (the SDK
raises its ``QueryError`` with the message); an unknown or revoked key, or one lacking the
permission the operation needs (a query reads, a mutation writes: ``OPERATION_NEEDS``), is a
401, which the SDK reports as an authentication error. An operation skiff does not serve yet is
refused by the schema, by name, never answered with a made-up success.

Any key holder can send anything, so a request is bounded before it costs much
(``api/graphql_limits.py``): its body is refused with a 413 past ``BODY_LIMIT`` before it is
read (``body_gate.BodyGate``, as on ``/v1``), its query past the parser's, the shape's and the
cost's limits before it is run. An error's message is short and never quotes the query or the
variables back; an expected error (a refusal, a syntax error, a pod not found) is logged in
one line at INFO, only a resolver's unexpected failure at ERROR with its traceback.

Served: who you are (``myself``: id, network volumes, endpoints, pods), the GPU types of this
host (``gpuTypes``), a pod (``pod``); pods created (GPU and CPU), stopped, resumed and
terminated; templates, endpoints (and an endpoint's template) and registry auths created, a
registry auth's credentials changed or the auth deleted; the user's public SSH key.
"""

import asyncio
import functools
import inspect
import logging
import os
import re
import shlex
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar, cast

import orjson
from ariadne import MutationType, ObjectType, QueryType, graphql, make_executable_schema
from graphql import (
    DocumentNode,
    GraphQLError,
    GraphQLResolveInfo,
    OperationDefinitionNode,
    OperationType,
)
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import request_response
from starlette.types import ASGIApp

from skiff.api import credentials, errors
from skiff.api.graphql_limits import (
    BODY_LIMIT,
    Answer,
    FieldBudgets,
    parse_query,
    short,
    unstorable,
    unstorable_value,
    validate_query,
)
from skiff.body_gate import BodyGate
from skiff.domain import command_line, instance_ids, times
from skiff.domain.endpoints import (
    ComputeType,
    CpuFlavor,
    Endpoint,
    EndpointCreate,
    EndpointUpdate,
)
from skiff.domain.permissions import READ, WRITE, Caller, Need
from skiff.domain.pods import DesiredStatus, Pod, PodCreate, parse_port, runtime_status
from skiff.domain.registry_auths import RegistryAuthCreate, RegistryAuthCredentials
from skiff.domain.templates import Template, TemplateCreate, TemplateUpdate
from skiff.domain.users import User
from skiff.errors import Conflict, Invalid, NotFound
from skiff.services.hub import Services

log = logging.getLogger(__name__)
M = TypeVar("M", bound=BaseModel)
T = TypeVar("T")

#: The scope key under which ``BodyGate`` leaves the caller whose key it checked before the body.
CALLER = "skiff.graphql.caller"
#: What each kind of operation needs of the key: a query reads, a mutation writes; both the
#: account as a whole, so a restricted key (its endpoints only) reaches neither.
OPERATION_NEEDS: dict[OperationType, Need] = {
    OperationType.QUERY: READ,
    OperationType.MUTATION: WRITE,
    OperationType.SUBSCRIPTION: READ,
}


def lacking(caller: Caller, document: DocumentNode, operation_name: str | None) -> str | None:
    """Why the key may not run the operation ``operation_name`` of ``document`` (every
    operation when it names none or one that is not there, GraphQL then refuses it anyway),
    naming the missing permission; None when it may."""
    operations = [d for d in document.definitions if isinstance(d, OperationDefinitionNode)]
    named = [o for o in operations if o.name is not None and o.name.value == operation_name]
    for operation in named or operations:
        need = OPERATION_NEEDS[operation.operation]
        why = caller.permissions.missing(need.access, None)
        if why is not None:
            return why
    return None


class _Unlogged(logging.LoggerAdapter[logging.Logger]):
    """ariadne logs every error at ERROR with a traceback, a "pod not found" as much as a
    crash, so a key holder could fill the log: ``_error_format`` logs each error instead, at
    the level it deserves."""

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        return None


_UNLOGGED = _Unlogged(log)

#: What a resolver is told: its context holds the caller (``{"user": User}``).
Info = GraphQLResolveInfo[dict[str, Any]]

#: The schema (``schema.graphql``, beside this module): the part of the hosted platform's that
#: the runpod SDK's management calls use.
SDL = (Path(__file__).with_name("schema.graphql")).read_text(encoding="utf-8")


def build(services: Services) -> ASGIApp:
    """The ``/graphql`` handler (an ASGI app, its body gated)."""
    #: Each user's fields of list items across answers (``graphql_limits.FieldBudgets``).
    budgets = FieldBudgets(clock=services.clock.now)
    query = QueryType()
    mutation = MutationType()
    user_type = ObjectType("User")
    gpu_type = ObjectType("GpuType")
    cpu_flavor = ObjectType("CpuFlavor")
    pod_type = ObjectType("Pod")
    endpoint_type = ObjectType("Endpoint")

    def user_of(info: Info) -> User:
        user: User = info.context["user"]
        return user

    @query.field("myself")
    def resolve_myself(_obj: Any, info: Info) -> User:
        return user_of(info)

    @user_type.field("pubKey")
    async def resolve_pub_key(user: User, _info: Info) -> str | None:
        return await services.user_settings.pub_key(user)

    async def _volumes(user: User) -> list[dict[str, Any]]:
        return [
            {"id": v.id, "name": v.name, "size": v.size, "dataCenterId": v.dataCenterId}
            for v in await services.volumes.records(user)
        ]

    @user_type.field("networkVolumes")
    async def resolve_volumes(user: User, info: Info) -> list[dict[str, Any]]:
        return await _listed(info, "networkVolumes", lambda: _volumes(user))

    @user_type.field("endpoints")
    async def resolve_endpoints(user: User, info: Info) -> list[Endpoint]:
        return await _listed(info, "endpoints", lambda: services.endpoints.all(user))

    @user_type.field("pods")
    async def resolve_pods(user: User, info: Info) -> list[Pod]:
        return await _listed(info, "pods", lambda: services.pods.all(user))

    @query.field("gpuTypes")
    def resolve_gpu_types(
        _obj: Any, _info: Info, input: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        # The most of a type one worker can have: what one machine holds.
        per_machine: dict[tuple[str, str], int] = {}
        for gpu in services.gpus.gpus:
            per_machine[gpu.name, gpu.node] = per_machine.get((gpu.name, gpu.node), 0) + 1
        counts: dict[str, int] = {}
        for (name, _node), count in per_machine.items():
            counts[name] = max(counts.get(name, 0), count)
        wanted = {(input or {}).get("id"), *((input or {}).get("ids") or [])} - {None}
        prices = services.billing.prices.gpu_hour
        return [
            {
                "id": name,
                "displayName": name,
                "manufacturer": name.split()[0] if name else None,
                "maxGpuCount": count,
                "secureCloud": True,
                "communityCloud": False,
                "securePrice": prices.get(name, 0.0),
                "communityPrice": None,
                "price": prices.get(name, 0.0),
            }
            for name, count in counts.items()
            if not wanted or name in wanted
        ]

    @gpu_type.field("lowestPrice")
    def resolve_lowest_price(
        gpu: dict[str, Any], _info: Info, input: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        count = (input or {}).get("gpuCount") or 1
        return {
            "minimumBidPrice": None,
            "uninterruptablePrice": gpu["price"] * count,
            # The stock of a server is what it has: enough of the type on one machine, or none.
            "stockStatus": "High" if count <= gpu["maxGpuCount"] else None,
        }

    @query.field("cpuFlavors")
    def resolve_cpu_flavors(
        _obj: Any, _info: Info, input: dict[str, Any] | None = None
    ) -> list[dict[str, Any]]:
        wanted = (input or {}).get("id")
        return [
            {"id": flavor.value, "displayName": flavor.value}
            for flavor in CpuFlavor
            if wanted is None or wanted == flavor.value
        ]

    @cpu_flavor.field("specifics")
    def resolve_cpu_specifics(
        flavor: dict[str, Any], _info: Info, input: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        named = instance_ids.parse((input or {}).get("instanceId") or "")
        fits = (
            named is not None
            and named.flavor == flavor["id"]
            and named.vcpus <= (os.cpu_count() or 1)
        )
        return {"stockStatus": "High" if fits else None}

    @query.field("pod")
    async def resolve_pod(_obj: Any, info: Info, input: dict[str, Any]) -> Pod | None:
        try:
            return await services.pods.get(user_of(info), input["podId"])
        except NotFound:
            return None

    async def deploy(info: Info, given: dict[str, Any], gpu: bool) -> Pod:
        user = user_of(info)
        fields = await _pod_create_fields(services, user, given, gpu)
        data = _model(PodCreate, fields)
        made: Pod = await _acting(services.pods.create(user, data))
        return made

    @mutation.field("podFindAndDeployOnDemand")
    async def resolve_deploy_gpu(_obj: Any, info: Info, input: dict[str, Any]) -> Pod:
        return await deploy(info, input, gpu=True)

    @mutation.field("deployCpuPod")
    async def resolve_deploy_cpu(_obj: Any, info: Info, input: dict[str, Any]) -> Pod:
        return await deploy(info, input, gpu=False)

    async def save_template(user: User, given: dict[str, Any], by_name: bool) -> Template:
        """``given`` (a ``SaveTemplateInput``) saved: the template of its ``id`` updated, or,
        ``by_name`` (a template inline in ``saveEndpoint``), the user's template of its name
        updated; otherwise a new one."""
        fields = _template_fields(given)
        template_id = given.get("id")
        if template_id is None and by_name:
            named = [t for t in await services.templates.all(user) if t.name == given["name"]]
            template_id = named[0].id if named else None
        if template_id is None:
            return cast(
                Template,
                await _acting(services.templates.create(user, _model(TemplateCreate, fields))),
            )
        fields.pop("category", None)
        fields.pop("isServerless", None)
        change = _model(TemplateUpdate, fields)
        return cast(Template, await _acting(services.templates.update(user, template_id, change)))

    @mutation.field("saveTemplate")
    async def resolve_save_template(
        _obj: Any, info: Info, input: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        if input is None:
            raise GraphQLError("saveTemplate: input is required")
        return _template_answer(await save_template(user_of(info), input, by_name=False))

    @query.field("podTemplate")
    async def resolve_pod_template(_obj: Any, info: Info, id: str) -> dict[str, Any] | None:
        try:
            return _template_answer(await services.templates.get(user_of(info), id))
        except NotFound:
            return None

    def warn(info: Info, endpoint: Endpoint) -> None:
        """Keep what saving ``endpoint`` warns of for the answer's ``extensions.warnings``: the
        runpod SDK asks for fixed fields (not ``warnings``) and ignores ``extensions``."""
        info.context["warnings"].extend(services.placement.warnings(endpoint))

    @mutation.field("saveEndpoint")
    async def resolve_save_endpoint(_obj: Any, info: Info, input: dict[str, Any]) -> Endpoint:
        user = user_of(info)
        fields = _endpoint_input_fields(input)
        if input.get("template") is not None and not input.get("templateId"):
            template = await save_template(user, input["template"], by_name=True)
            fields["templateId"] = template.id
        saved: Endpoint
        if input.get("id"):
            # Fixed once created: the update input has no such fields.
            fields.pop("type", None)
            fields.pop("computeType", None)
            change = _model(EndpointUpdate, fields)
            saved = await _acting(services.endpoints.update(user, input["id"], change))
        else:
            if "templateId" not in fields:
                raise GraphQLError("saveEndpoint: templateId or template is required")
            saved = await _acting(services.endpoints.create(user, _model(EndpointCreate, fields)))
        warn(info, saved)
        return saved

    @mutation.field("deleteEndpoint")
    async def resolve_delete_endpoint(_obj: Any, info: Info, id: str) -> None:
        await _acting(services.endpoints.delete(user_of(info), id))

    @user_type.field("endpoint")
    async def resolve_endpoint(user: User, _info: Info, id: str) -> Endpoint | None:
        try:
            return await services.endpoints.get(user, id)
        except NotFound:
            return None

    @mutation.field("updateEndpointTemplate")
    async def resolve_endpoint_template(_obj: Any, info: Info, input: dict[str, Any]) -> Endpoint:
        change = _model(EndpointUpdate, {"templateId": input["templateId"]})
        updated: Endpoint = await _acting(
            services.endpoints.update(user_of(info), input["endpointId"], change)
        )
        warn(info, updated)
        return updated

    @mutation.field("saveRegistryAuth")
    async def resolve_save_auth(_obj: Any, info: Info, input: dict[str, Any]) -> Any:
        auth = await _acting(
            services.registry_auths.create(user_of(info), _model(RegistryAuthCreate, input))
        )
        return {"id": auth.id, "name": auth.name}

    @mutation.field("deleteRegistryAuth")
    async def resolve_delete_auth(_obj: Any, info: Info, registryAuthId: str) -> bool:
        await _acting(services.registry_auths.delete(user_of(info), registryAuthId))
        return True

    @mutation.field("updateRegistryAuth")
    async def resolve_update_auth(_obj: Any, info: Info, input: dict[str, Any]) -> Any:
        credentials_given = {"username": input["username"], "password": input["password"]}
        auth = await _acting(
            services.registry_auths.update_credentials(
                user_of(info), input["id"], _model(RegistryAuthCredentials, credentials_given)
            )
        )
        return {"id": auth.id, "name": auth.name}

    @mutation.field("updateUserSettings")
    async def resolve_user_settings(_obj: Any, info: Info, input: dict[str, Any]) -> User:
        await _acting(services.user_settings.set_pub_key(user_of(info), input["pubKey"]))
        return user_of(info)

    @mutation.field("podStop")
    async def resolve_stop(_obj: Any, info: Info, input: dict[str, Any]) -> Pod:
        stopped: Pod = await _acting(services.pods.stop(user_of(info), input["podId"]))
        return stopped

    @mutation.field("podResume")
    async def resolve_resume(_obj: Any, info: Info, input: dict[str, Any]) -> Pod:
        started: Pod = await _acting(services.pods.start(user_of(info), input["podId"]))
        return started

    @mutation.field("podTerminate")
    async def resolve_terminate(_obj: Any, info: Info, input: dict[str, Any]) -> bool:
        await _acting(services.pods.delete(user_of(info), input["podId"]))
        return True

    # -- pods as the SDK reads them --------------------------------------------------------
    def pod_field(name: str) -> Any:
        def resolve(pod: Pod, info: Info) -> Any:
            return _fields_of(info, pod, lambda: _pod_fields(services, pod))[name]

        return resolve

    for name in (
        "name",
        "imageName",
        "desiredStatus",
        "lastStatusChange",
        "costPerHr",
        "containerDiskInGb",
        "volumeInGb",
        "volumeMountPath",
        "gpuCount",
        "vcpuCount",
        "memoryInGb",
        "env",
        "dockerArgs",
        "dockerId",
        "machineId",
        "podType",
        "port",
        "ports",
        "uptimeSeconds",
        "runtime",
        "machine",
    ):
        pod_type.set_field(name, pod_field(name))

    @endpoint_type.field("warnings")
    def resolve_endpoint_warnings(endpoint: Endpoint, _info: Info) -> list[str]:
        return services.placement.warnings(endpoint)

    def endpoint_field(name: str) -> Any:
        def resolve(endpoint: Endpoint, info: Info) -> Any:
            return _fields_of(info, endpoint, lambda: _endpoint_fields(endpoint))[name]

        return resolve

    for name in (
        "name",
        "userId",
        "templateId",
        "gpuIds",
        "gpuCount",
        "networkVolumeId",
        "networkVolume",
        "locations",
        "idleTimeout",
        "scalerType",
        "scalerValue",
        "workersMin",
        "workersMax",
        "workersStandby",
        "allowedCudaVersions",
        "flashBootType",
        "type",
        "version",
        "aiKey",
        "createdAt",
        "executionTimeoutMs",
        "instanceIds",
        "minCudaVersion",
        "workersPFBTarget",
        "flashEnvironmentId",
        "activeBuildid",
        "idePodId",
        "networkVolumeIds",
        "env",
    ):
        endpoint_type.set_field(name, endpoint_field(name))

    schema = make_executable_schema(
        SDL, query, mutation, user_type, gpu_type, cpu_flavor, pod_type, endpoint_type
    )

    async def admit(request: Request) -> int:
        key = credentials.api_key(request.headers.get("authorization"))
        request.scope[CALLER] = await services.auth.caller(key)
        return BODY_LIMIT

    async def endpoint(request: Request) -> Response:
        caller: Caller | None = request.scope.get(CALLER)
        if caller is None:  # no body: the gate let it through unchecked
            try:
                caller = await services.auth.caller(
                    credentials.api_key(request.headers.get("authorization"))
                )
            except Exception as exc:
                return await _refuse(request, exc)
        user = caller.user
        try:
            data = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return _refused("the body is not JSON", 400)
        if (
            not isinstance(data, dict)
            or not isinstance(data.get("query"), str)
            or not isinstance(data.get("variables"), dict | None)
            or not isinstance(data.get("operationName"), str | None)
        ):
            expected = 'expected {"query": "...", "variables": {...}, "operationName": "..."}'
            return _refused(expected, 400)
        # No name or id holds NUL, and PostgreSQL text cannot: refused before any lookup (the
        # query's strings, however escaped, are checked by graphql_limits.StorableStrings).
        why = unstorable(data["query"]) or unstorable_value(data.get("variables"))
        if why is not None:
            return _refused(why, 200)
        try:
            document = parse_query(None, data)
        except GraphQLError:  # answered by graphql() below, as it answers any syntax error
            document = None
        if document is not None:
            why = lacking(caller, document, data.get("operationName"))
            if why is not None:
                return _refused(why, 401)  # the SDK's AuthenticationError, as a bad key's
        context: dict[str, Any] = {
            "user": user,
            "warnings": [],
            # Per query: each of the user's lists read once, however many aliases ask for it
            # (``_listed``), each object's fields made once (``_fields_of``), and what the
            # answer holds counted (``graphql_limits.Answer``).
            "lists": {},
            "fields": {},
            "answer": Answer(spend=lambda fields: budgets.spend(user.id, fields)),
        }
        _ok, result = await graphql(
            schema,
            data,
            context_value=context,
            query_parser=parse_query if document is None else lambda _c, _d: document,
            query_validator=validate_query,
            # ariadne's cost does not see introspection's fields; no client of skiff's needs them.
            introspection=False,
            logger=_UNLOGGED,
            error_formatter=_error_format,
            middleware=[charge_lists],
        )
        if context["warnings"]:
            # GraphQL's own place for what is not data: https://spec.graphql.org/ (Response).
            result["extensions"] = {"warnings": context["warnings"]}
        return _json(result, 200)

    # The key and the body's size are checked from the headers, before the body is read.
    return BodyGate(request_response(endpoint), admit=admit, refuse=_refuse)


async def _listed(info: Info, name: str, load: Callable[[], Awaitable[list[T]]]) -> list[T]:
    """One of the user's lists, read once per query (aliases resolve side by side, so the read
    itself is shared)."""
    lists: dict[str, asyncio.Future[Any]] = info.context["lists"]
    if name not in lists:
        lists[name] = asyncio.ensure_future(load())
    items: list[T] = await asyncio.shield(lists[name])
    return items


def _fields_of(info: Info, obj: object, make: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """An object's fields as the SDK reads them, made once per query however many of them are
    asked. Kept with the object itself, so that no other object of the query (a mutation's
    answer made after it) can take its ``id`` meanwhile."""
    made: dict[int, tuple[object, dict[str, Any]]] = info.context["fields"]
    key = id(obj)
    if key not in made:
        made[key] = (obj, make())
    return made[key][1]


def charge_lists(resolve: Callable[..., Any], obj: Any, info: Info, **args: Any) -> Any:
    """Every field's resolver, with a list it answers charged to the query's ``Answer`` (its
    items times the fields asked of each) before any item is resolved: nested lists too (an
    endpoint's env), which the fields asked alone do not show."""
    resolved = resolve(obj, info, **args)
    if inspect.isawaitable(resolved):
        return _charged_later(resolved, info)
    if isinstance(resolved, list) and resolved:
        _charge(info, len(resolved))
    return resolved


async def _charged_later(resolving: Awaitable[Any], info: Info) -> Any:
    resolved = await resolving
    if isinstance(resolved, list) and resolved:
        _charge(info, len(resolved))
    return resolved


def _charge(info: Info, items: int) -> None:
    info.context["answer"].charge(items, info.field_nodes[0].selection_set, info.fragments)


async def _acting(action: Any) -> Any:
    """A service call, its refusal (a locked pod, no free GPU) as a GraphQL error."""
    try:
        return await action
    except (NotFound, Conflict, Invalid) as exc:
        raise GraphQLError(exc.message) from None


#: The template runpod.create_pod names for a CPU pod given none: the hosted platform's Ubuntu,
#: which skiff does not have; the pod's own image is used instead.
HOSTED_CPU_TEMPLATE = "runpod-ubuntu"


async def _pod_create_fields(
    services: Services, user: User, given: dict[str, Any], gpu: bool
) -> dict[str, Any]:
    """``PodDeployInput`` as ``/v1``'s pod create input."""
    fields: dict[str, Any] = {"computeType": "GPU" if gpu else "CPU"}
    for name in ("name", "imageName", "containerDiskInGb", "volumeMountPath", "networkVolumeId"):
        if given.get(name) not in (None, ""):
            fields[name] = given[name]
    if given.get("volumeInGb") is not None:
        fields["volumeInGb"] = given["volumeInGb"]
    if gpu:
        fields["gpuTypeIds"] = [given["gpuTypeId"]] if given.get("gpuTypeId") else []
        if given.get("gpuCount"):
            fields["gpuCount"] = given["gpuCount"]
    elif given.get("instanceId"):
        instance = instance_ids.parse(given["instanceId"])
        if instance is None:
            raise GraphQLError(
                f"instanceId: {given['instanceId']!r} is not an instance id such as cpu3c-2-4"
            )
        fields["vcpuCount"], fields["cpuFlavorIds"] = instance.vcpus, [instance.flavor]
    template = given.get("templateId")
    if template == HOSTED_CPU_TEMPLATE:
        try:
            await services.templates.get(user, template)
        except NotFound:
            template = None
    if template:
        fields["templateId"] = template
    fields.update(_run_fields(given))
    if given.get("dataCenterId"):
        fields["dataCenterIds"] = [given["dataCenterId"]]
    return fields


def _model(model: type[M], fields: dict[str, Any]) -> M:
    """``fields`` as ``/v1``'s input model; its refusal as a GraphQL error naming each field."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        raise GraphQLError(_validation_message(exc)) from None


def _run_fields(given: dict[str, Any]) -> dict[str, Any]:
    """The SDK's strings for what a container runs (``dockerArgs``, ``ports`` as
    "8888/http,22/tcp", ``env`` as key/value pairs) as ``/v1``'s fields: one reading for
    templates and pods alike."""
    fields: dict[str, Any] = {}
    if given.get("dockerArgs"):
        fields["dockerStartCmd"] = _split(given["dockerArgs"])
    if given.get("ports"):
        fields["ports"] = [p for p in given["ports"].replace(" ", "").split(",") if p]
    if given.get("env"):
        fields["env"] = {e["key"]: e["value"] for e in given["env"]}
    return fields


def _template_fields(given: dict[str, Any]) -> dict[str, Any]:
    """A ``SaveTemplateInput`` as ``/v1``'s template fields (runpod-flash's own ``config``,
    ``advancedStart`` and ``startScript`` are not kept)."""
    fields: dict[str, Any] = {"name": given["name"], "imageName": given["imageName"]}
    for name in ("containerDiskInGb", "volumeInGb", "volumeMountPath", "isServerless", "readme"):
        if given.get(name) is not None:
            fields[name] = given[name]
    if given.get("isServerless"):
        fields["category"] = "NVIDIA"
    fields.update(_run_fields(given))
    if given.get("containerRegistryAuthId"):
        fields["containerRegistryAuthId"] = given["containerRegistryAuthId"]
    return fields


def _template_answer(template: Template) -> dict[str, Any]:
    return {
        "id": template.id,
        "name": template.name,
        "imageName": template.imageName,
        "dockerArgs": shlex.join([*template.dockerEntrypoint, *template.dockerStartCmd]),
        "containerDiskInGb": template.containerDiskInGb,
        "volumeInGb": template.volumeInGb,
        "volumeMountPath": template.volumeMountPath,
        "ports": ",".join(template.ports),
        "env": [{"key": k, "value": v} for k, v in template.env.items()],
        "isServerless": template.isServerless,
        "readme": template.readme,
    }


def _endpoint_input_fields(given: dict[str, Any]) -> dict[str, Any]:
    """An ``EndpointInput`` as ``/v1``'s endpoint fields."""
    fields: dict[str, Any] = {"name": given["name"]}
    for name in (
        "templateId",
        "idleTimeout",
        "scalerValue",
        "workersMin",
        "workersMax",
        "gpuCount",
    ):
        if given.get(name) is not None:
            fields[name] = given[name]
    if given.get("scalerType"):
        fields["scalerType"] = given["scalerType"]
    if given.get("networkVolumeId"):
        fields["networkVolumeId"] = given["networkVolumeId"]
    if given.get("locations"):
        fields["dataCenterIds"] = [x for x in given["locations"].split(",") if x]
    if given.get("allowedCudaVersions"):
        fields["allowedCudaVersions"] = given["allowedCudaVersions"].split(",")
    elif given.get("minCudaVersion"):
        least = _version(given["minCudaVersion"])
        fields["allowedCudaVersions"] = [v for v in CUDA_VERSIONS if _version(v) >= least]
    if given.get("flashBootType") is not None:
        fields["flashboot"] = given["flashBootType"] == "FLASHBOOT"
    # runpod-flash sends 0 for "no limit of its own": the endpoint keeps skiff's default.
    if given.get("executionTimeoutMs"):
        fields["executionTimeoutMs"] = given["executionTimeoutMs"]
    if given.get("type"):
        fields["type"] = given["type"]
    if given.get("instanceIds"):
        fields["computeType"] = "CPU"
        fields["instanceIds"] = given["instanceIds"]
    elif given.get("gpuIds") is not None or not given.get("id"):
        fields |= _gpu_ids(given.get("gpuIds"))  # an update naming neither keeps its own
    return fields


#: CUDA versions as the hosted platform lists them, for ``minCudaVersion``.
CUDA_VERSIONS = (
    "11.8",
    "12.0",
    "12.1",
    "12.2",
    "12.3",
    "12.4",
    "12.5",
    "12.6",
    "12.7",
    "12.8",
    "12.9",
    "13.0",
)


def _version(text: str) -> tuple[int, ...]:
    """ "12.4" as (12, 4), for ordering; what is not a version orders first."""
    try:
        return tuple(int(part) for part in text.split("."))
    except ValueError:
        return ()


#: The longest ``dockerArgs`` taken: far over any command line (Linux passes a program at most
#: 128 KiB per argument, a shell script is a file), and a bound on what one alias has split.
MAX_DOCKER_ARGS = 65536


def _split(command: str) -> list[str]:
    if len(command) > MAX_DOCKER_ARGS:
        raise GraphQLError(f"dockerArgs: at most {MAX_DOCKER_ARGS} characters")
    try:
        return list(_split_once(command))
    except ValueError as exc:
        raise GraphQLError(f"dockerArgs: cannot split this command: {exc}") from None


@functools.lru_cache(maxsize=8)
def _split_once(command: str) -> tuple[str, ...]:
    # 50 aliases of a mutation may all name one variable: it is split once.
    return tuple(command_line.split(command))


#: The hosted platform's GPU pools (AMPERE_16, ADA_24 …): skiff has no pools, so an endpoint
#: naming only pools takes any GPU type this server has.
_POOL = re.compile(r"^[A-Z]+_[0-9]+$")


def _gpu_ids(gpu_ids: str | None) -> dict[str, Any]:
    """``gpuIds`` as the SDK sends it: "CPU", GPU types by NVML name, or hosted pool ids."""
    names = [x.strip() for x in (gpu_ids or "").split(",") if x.strip()]
    if names == ["CPU"]:
        return {"computeType": "CPU"}
    return {"computeType": "GPU", "gpuTypeIds": [n for n in names if not _POOL.match(n)]}


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(x) for x in error.get("loc", ())) or "input"
        parts.append(f"{where}: {str(error.get('msg', 'invalid')).removeprefix('Value error, ')}")
    return "; ".join(parts)


def _error_format(error: GraphQLError, _debug: bool = False) -> dict[str, Any]:
    """GraphQL's error shape: the message alone (cut short), no locations, no source. A
    resolver's unexpected failure is logged with its traceback, and its text (which may name
    internals) is not sent; any other error is expected, one line at INFO."""
    message = short(error.message)
    original = error.original_error
    if original is not None and not isinstance(original, GraphQLError):
        log.error("a GraphQL resolver failed", exc_info=original)
        message = "internal error: the server's log has the details"
    else:
        log.info("GraphQL error: %s", message)
    formatted: dict[str, Any] = {"message": message}
    if error.path:
        formatted["path"] = error.path
    return formatted


def _json(body: Any, status: int) -> Response:
    return Response(orjson.dumps(body), status, media_type="application/json")


def _refused(message: str, status: int) -> Response:
    """A request refused before GraphQL runs (not JSON, NUL), logged as its errors are."""
    log.info("GraphQL request refused: %s", message)
    return _json({"errors": [{"message": message}]}, status)


_plain_refusal = errors.responder("message")


async def _refuse(request: Request, exc: Exception) -> Response:
    """The answer ``/v1`` gives to a refusal before the body (401, 413, 429, the database
    unreachable), with its status and headers, in GraphQL's error shape."""
    plain = await _plain_refusal(request, exc)
    answer = _json(
        {"errors": [{"message": orjson.loads(plain.body)["message"]}]}, plain.status_code
    )
    for name in ("www-authenticate", "retry-after"):
        if name in plain.headers:
            answer.headers[name] = plain.headers[name]
    return answer


#: What the SDK is told a pod is doing (its ``desiredStatus``, which ``runpod pod list`` prints
#: as the pod's status and the SDK's own waits compare with ``RUNNING``), by ``runtime_status``.
#: A pod kept from running (its process keeps exiting, its start fails, its GPUs are taken)
#: or being restarted reads ``RESTARTING``, a status of the hosted platform's schema, rather
#: than the ``RUNNING`` it was asked to be: the CLI shows no other field. Starting for the
#: first time (or fresh after an update) reads ``RUNNING``, as on the hosted platform, with
#: ``runtime`` null until it runs. ``/v1`` keeps ``desiredStatus`` as asked and says this in
#: ``status`` and ``problem``.
_SDK_STATUS = {
    "running": "RUNNING",
    "starting": "RUNNING",
    "restarting": "RESTARTING",
    "waiting": "RESTARTING",
}


def _sdk_status(pod: Pod) -> str:
    if pod.desiredStatus is not DesiredStatus.RUNNING:
        return pod.desiredStatus.value
    return _SDK_STATUS[runtime_status(pod)]


def _pod_fields(services: Services, pod: Pod) -> dict[str, Any]:
    spec, placement = pod.spec, pod.placement
    running = runtime_status(pod) == "running"
    ports = []
    ssh = services.pod_runner.ssh_address(pod)
    for port, host_port in placement.portMappings.items():
        parsed = parse_port(port)
        if ssh is not None and parsed.number == 22:
            continue  # skiff serves its SSH (below): the one private port 22 the CLI finds
        ports.append(
            {
                "ip": services.pod_runner.host_of(pod),
                "isIpPublic": True,
                "privatePort": parsed.number,
                "publicPort": host_port,
                "type": parsed.protocol.value,
            }
        )
    if ssh is not None:
        ip, public_port = ssh
        ports.append(
            {
                "ip": ip,
                "isIpPublic": True,
                "privatePort": 22,
                "publicPort": public_port,
                "type": "tcp",
            }
        )
    memory = None
    if spec.computeType is ComputeType.CPU:
        memory = float(spec.vcpuCount * 2)
    uptime = None
    if running and pod.lastStartedAt is not None:
        uptime = int(max(0.0, time.time() - pod.lastStartedAt))
    return {
        "name": spec.name,
        "imageName": spec.imageName,
        "desiredStatus": _sdk_status(pod),
        "lastStatusChange": times.iso(pod.lastStatusChange),
        "costPerHr": services.billing.pod_cost_per_hour(pod),
        "containerDiskInGb": spec.containerDiskInGb,
        "volumeInGb": spec.volumeInGb,
        "volumeMountPath": spec.volumeMountPath,
        "gpuCount": spec.gpuCount if spec.computeType is ComputeType.GPU else 0,
        "vcpuCount": spec.vcpuCount,
        "memoryInGb": memory,
        "env": [f"{k}={v}" for k, v in spec.env.items()],
        "dockerArgs": " ".join([*spec.dockerEntrypoint, *spec.dockerStartCmd]),
        "dockerId": None,
        "machineId": placement.owner,
        "podType": "INTERRUPTABLE" if spec.interruptible else "RESERVED",
        "port": ports[0]["privatePort"] if ports else None,
        "ports": ",".join(spec.ports),
        "uptimeSeconds": uptime,
        "runtime": {"ports": ports} if running else None,
        "machine": {"gpuDisplayName": placement.gpuName, "podHostId": placement.owner},
    }


def _endpoint_fields(endpoint: Endpoint) -> dict[str, Any]:
    spec = endpoint.spec
    return {
        "name": spec.name,
        "userId": endpoint.userId,
        "templateId": spec.templateId,
        "gpuIds": ",".join(spec.gpuTypeIds) if spec.computeType is ComputeType.GPU else "CPU",
        "gpuCount": spec.gpuCount,
        "networkVolumeId": spec.networkVolumeId,
        "networkVolume": (
            {"id": spec.networkVolumeId, "name": "", "size": 0, "dataCenterId": "local"}
            if spec.networkVolumeId
            else None
        ),
        "locations": ",".join(spec.dataCenterIds) or None,
        "idleTimeout": spec.idleTimeout,
        "scalerType": spec.scalerType.value,
        "scalerValue": spec.scalerValue,
        "workersMin": spec.workersMin,
        "workersMax": spec.workersMax,
        "workersStandby": 1 if spec.flashboot else 0,
        "allowedCudaVersions": ",".join(spec.allowedCudaVersions) or None,
        "flashBootType": "FLASHBOOT" if spec.flashboot else "OFF",
        "type": spec.type.value,
        "version": endpoint.version,
        "aiKey": None,
        "createdAt": times.iso(endpoint.createdAt),
        "executionTimeoutMs": spec.executionTimeoutMs,
        "instanceIds": spec.instanceIds,
        "minCudaVersion": min(spec.allowedCudaVersions, key=_version, default=None),
        "workersPFBTarget": 0,
        "flashEnvironmentId": None,
        "activeBuildid": None,
        "idePodId": None,
        "networkVolumeIds": (
            [{"networkVolumeId": spec.networkVolumeId, "dataCenterId": "local"}]
            if spec.networkVolumeId
            else []
        ),
        "env": [{"key": k, "value": v} for k, v in spec.env.items()],
    }
