"""What an API key may do, and what a route needs: the hosted platform's three kinds of key.

``all`` reads and writes everything its user owns; ``read`` only reads, everywhere; a
``restricted`` key reaches only the endpoints it names, each with ``read`` or ``read_write``,
and nothing else (not ``/v1``'s account-wide routes, not GraphQL, not the console). Every route
declares a ``Need``; a key that lacks it is refused with a 401 that names the missing permission.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from skiff.domain.users import User
from skiff.errors import Invalid, Unauthorized

#: The most endpoints one restricted key names (a form, not a database).
MAX_GRANTS = 200


class Kind(StrEnum):
    ALL = "all"
    READ = "read"
    RESTRICTED = "restricted"


class Access(StrEnum):
    READ = "read"
    READ_WRITE = "read_write"


@dataclass(frozen=True, slots=True)
class Need:
    """What a route needs of the key that calls it."""

    access: Access
    #: The path parameter naming the endpoint the route acts on; None: the account as a whole.
    endpoint_param: str | None = None


@dataclass(frozen=True, slots=True)
class NoKey:
    """Declared by a route that no API key reaches: a worker's (its token), sign-in, health."""

    why: str


READ = Need(Access.READ)
WRITE = Need(Access.READ_WRITE)


def read_endpoint(param: str = "endpoint_id") -> Need:
    return Need(Access.READ, param)


def write_endpoint(param: str = "endpoint_id") -> Need:
    return Need(Access.READ_WRITE, param)


@dataclass(frozen=True, slots=True)
class Permissions:
    kind: Kind
    #: endpoint id -> what the key may do there; only for a restricted key.
    endpoints: Mapping[str, Access] = field(default_factory=dict)

    def missing(self, access: Access, endpoint_id: str | None) -> str | None:
        """Why a call needing ``access`` (on ``endpoint_id``, or the account when None) is
        refused, naming the permission it lacks; None when it is allowed."""
        if self.kind is Kind.ALL or (self.kind is Kind.READ and access is Access.READ):
            return None
        if self.kind is Kind.READ:
            where = f" on endpoint {endpoint_id}" if endpoint_id else ""
            return f"this API key lacks the permission {access}{where} (it is read-only)"
        if endpoint_id is None:
            return (
                f"this API key lacks the permission {access} on the account: a restricted key "
                "reaches only the endpoints it names"
            )
        granted = self.endpoints.get(endpoint_id)
        if granted is Access.READ_WRITE or (granted is Access.READ and access is Access.READ):
            return None
        return f"this API key lacks the permission {access} on endpoint {endpoint_id}"

    def covers(self, other: Permissions) -> bool:
        """Whether every call ``other`` allows this allows too (a key makes no stronger key)."""
        if self.kind is Kind.ALL:
            return True
        if self.kind is Kind.READ:
            return other.kind is Kind.READ or (
                other.kind is Kind.RESTRICTED
                and all(a is Access.READ for a in other.endpoints.values())
            )
        if other.kind is not Kind.RESTRICTED:
            return False
        return all(self.missing(a, e) is None for e, a in other.endpoints.items())

    def grants_json(self) -> dict[str, str]:
        return {e: str(a) for e, a in sorted(self.endpoints.items())}


ALL = Permissions(Kind.ALL)
READ_ONLY = Permissions(Kind.READ)


def parse(kind: object, endpoints: object) -> Permissions:
    """The permissions a person asked for, or a 400 that says what is wrong with them."""
    if kind not in {k.value for k in Kind}:
        raise Invalid("permissions: expected one of all, read, restricted", field="permissions")
    if kind != Kind.RESTRICTED:
        if endpoints:
            raise Invalid("endpoints: only a restricted key names endpoints", field="endpoints")
        return Permissions(Kind(kind))
    if not isinstance(endpoints, dict) or not endpoints:
        raise Invalid(
            'endpoints: a restricted key names its endpoints, e.g. {"abc123": "read_write"}',
            field="endpoints",
        )
    if len(endpoints) > MAX_GRANTS:
        raise Invalid(f"endpoints: at most {MAX_GRANTS}", field="endpoints")
    grants: dict[str, Access] = {}
    for endpoint_id, access in endpoints.items():
        if access not in {a.value for a in Access}:
            raise Invalid(
                f"endpoints.{endpoint_id}: expected read or read_write", field="endpoints"
            )
        grants[str(endpoint_id)] = Access(access)
    return Permissions(Kind.RESTRICTED, grants)


@dataclass(frozen=True, slots=True)
class Caller:
    """Who calls with an API key: its user, and what the key lets them do."""

    user: User
    permissions: Permissions
    key_id: str

    def check(self, access: Access, endpoint_id: str | None = None) -> None:
        """Refuse (401, naming the missing permission) a call the key may not make."""
        why = self.permissions.missing(access, endpoint_id)
        if why is not None:
            raise Unauthorized(why)
