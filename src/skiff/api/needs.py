"""Each route's declared ``Need`` (``domain/permissions.py``): put on its handler with
``@needs(...)``, read back by the route group's key check and by the test that walks every route
(a route without one fails that test, and ``/v1`` refuses to start)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from fastapi.routing import APIRoute, iter_route_contexts
from starlette.routing import BaseRoute

from skiff.domain.permissions import Need, NoKey

F = TypeVar("F", bound=Callable[..., Any])
_ATTRIBUTE = "__skiff_need__"


def needs(need: Need | NoKey) -> Callable[[F], F]:
    def declare(handler: F) -> F:
        setattr(handler, _ATTRIBUTE, need)
        return handler

    return declare


def need_of(handler: object) -> Need | NoKey | None:
    found = getattr(handler, _ATTRIBUTE, None)
    return found if isinstance(found, Need | NoKey) else None


@dataclass(frozen=True, slots=True)
class DeclaredRoute:
    path: str
    methods: frozenset[str]
    need: Need | NoKey | None


def api_routes(routes: Sequence[BaseRoute]) -> list[DeclaredRoute]:
    """Every FastAPI route of an app, those of its included routers too (FastAPI keeps those
    behind one entry each in ``app.routes``), with what each declares."""
    return [
        DeclaredRoute(
            context.path or "", frozenset(context.methods or ()), need_of(context.endpoint)
        )
        for context in iter_route_contexts(routes)
        if isinstance(context.original_route, APIRoute)
    ]
