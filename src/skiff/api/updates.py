"""PATCH ``/{id}`` and POST ``/{id}/update``: the reference spells a resource's update both
ways, and skiff answers both with one handler."""

from collections.abc import Callable
from typing import Any, TypeVar

from fastapi import APIRouter

F = TypeVar("F", bound=Callable[..., Any])


def patch_or_post_update(router: APIRouter, path: str, **route: Any) -> Callable[[F], F]:
    """Route the decorated handler as PATCH ``path`` and as POST ``path``/update, each with
    ``route``'s settings. The POST route keeps the operation id and summary it had when it had
    a handler of its own (named as the handler, with ``_post``)."""

    def declare(handler: F) -> F:
        router.add_api_route(path, handler, methods=["PATCH"], **route)
        router.add_api_route(
            f"{path}/update",
            handler,
            methods=["POST"],
            name=f"{handler.__name__}_post",
            description="The same as PATCH.",
            **route,
        )
        return handler

    return declare
