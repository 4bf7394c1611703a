"""How many of each kind of resource one user may hold (``SKIFF_MAX_PER_USER``).

A server shared by tenants keeps every user's rows in one database, and some of its loops
visit every endpoint or pod on each turn (the scaler, the pod runner): without a bound, one
user making endpoints in a loop would slow every other user's. The operator's own accounts
(administrators) are not bounded."""

from __future__ import annotations

import enum

from skiff.errors import Conflict

#: Default of ``SKIFF_MAX_PER_USER``.
DEFAULT_MAX_PER_USER = 1000


class Owned(enum.Enum):
    """A kind of resource a user owns and makes through the interfaces; its value is how an
    answer names it."""

    ENDPOINTS = "endpoints"
    TEMPLATES = "templates"
    NETWORK_VOLUMES = "network volumes"
    PODS = "pods"
    API_KEYS = "API keys (not revoked)"
    SECRETS = "secrets"
    REGISTRY_AUTHS = "container registry auths"


def check_room(kind: Owned, held: int, most: int) -> None:
    """Refuse (409) a new one when the user holds ``most`` already; 0: no bound."""
    if most and held >= most:
        raise Conflict(
            f"this account holds {held} {kind.value}, the most one account may "
            f"(the server's SKIFF_MAX_PER_USER is {most}): delete one before making another"
        )
