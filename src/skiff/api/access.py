"""Who calls a job route: the key of its ``Authorization`` header and the endpoint its path
names, handed to the admission service (``services/admission.py``) for every ``/v2`` client
route."""

from __future__ import annotations

from starlette.requests import Request

from skiff.api import credentials
from skiff.services.admission import Admitted
from skiff.services.hub import Services


def admitted(services: Services, request: Request, operation: str) -> Admitted:
    """``async with`` it: the caller's endpoint, inside its rate limits for ``operation``."""
    # The key alone works too on /v2, as in the hosted platform's examples.
    key = credentials.api_key(request.headers.get("authorization"), bare_ok=True)
    return services.admission.admit(key, request.path_params["endpoint_id"], operation)
