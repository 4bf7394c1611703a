"""Who calls a job route: the key of its ``Authorization`` header and the endpoint its path
names, handed to the admission service (``services/admission.py``) for every ``/v2`` client
route."""

from __future__ import annotations

from typing import Final

from starlette.requests import Request

from skiff.api import credentials
from skiff.domain.permissions import Need, NoKey, read_endpoint, write_endpoint
from skiff.services.admission import Admitted
from skiff.services.hub import Services

#: What each job operation needs of the caller's key, on the endpoint its path names: reading a
#: job or the endpoint's counts is read; submitting, cancelling, retrying, purging is a write,
#: and so is an OpenAI call (it runs a job).
NEEDS: Final[dict[str, Need]] = {
    "run": write_endpoint(),
    "runsync": write_endpoint(),
    "status": read_endpoint(),
    "requests": read_endpoint(),
    "stream": read_endpoint(),
    "cancel": write_endpoint(),
    "retry": write_endpoint(),
    "purge-queue": write_endpoint(),
    "health": read_endpoint(),
    "openai": write_endpoint(),
}
#: ``/status?ttl=`` changes the job (a ttl already past ends it), so it needs what a cancel
#: needs, not what reading the job does.
SET_TTL: Final = write_endpoint()
#: The worker protocol's routes: no API key reaches them, only the endpoint's worker token.
WORKER: Final = NoKey("the endpoint's worker token")


def admitted(
    services: Services, request: Request, operation: str, need: Need | None = None
) -> Admitted:
    """``async with`` it: the caller's endpoint, once the key is checked for what
    ``operation`` needs (``NEEDS``, or ``need`` where the request asks more of it), inside its
    rate limits for ``operation``."""
    # The key alone works too on /v2, as in the hosted platform's examples.
    key = credentials.api_key(request.headers.get("authorization"), bare_ok=True)
    access = (need or NEEDS[operation]).access
    return services.admission.admit(key, request.path_params["endpoint_id"], operation, access)
