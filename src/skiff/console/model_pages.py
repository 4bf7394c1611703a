"""Public models: every published model, for every signed-in user, with the URL to call it
(an administrator also sees which of their endpoints runs it)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from skiff.console.base import Console


def routes(console: Console) -> list[BaseRoute]:
    services = console.services

    async def models_page(request: Request) -> Response:
        visitor = await console.signed_in(request)
        return console.page(
            request,
            "models.html",
            visitor,
            200,
            title="Public models",
            models=await services.public_models.all(),
        )

    return [Route("/models", models_page, methods=["GET"])]
