"""The administrator's users (``/console/users``): list, make (their first key shown once,
to hand to them), disable and enable. A disabled user's keys and console sessions are refused
at once (``Auth.caller_of_digest``, within the key cache time for the API), and the leader
stops their workers and pods (``Accounts.set_disabled``); nothing of theirs is deleted.
Another visitor is told there is no such page."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from skiff.console import forms
from skiff.console.base import Console, Visitor
from skiff.console.resource_pages import ListPage
from skiff.errors import Conflict, Invalid, NotFound


def routes(console: Console) -> list[BaseRoute]:
    accounts = console.services.accounts

    async def administrator(request: Request) -> Visitor:
        visitor = await console.signed_in(request)
        if not visitor.user.is_admin:
            raise NotFound("There is no such page.")
        return visitor

    async def shows(visitor: Visitor) -> dict[str, Any]:
        return {"users": await accounts.users(visitor.user)}

    page = ListPage(console, "/users", "users.html", "Users", shows, notices=("changed",))

    async def show(request: Request) -> Response:
        return await page.answer(request, await administrator(request))

    async def create(request: Request) -> Response:
        visitor = await administrator(request)
        form = await console.form(request, visitor)
        try:
            issued = await accounts.create_user(visitor.user, form.get("name", ""))
        except (Invalid, Conflict) as exc:
            errors = forms.service_error(exc, "name")
            values = {"name": form.get("name", "")}
            return await page.answer(request, visitor, forms.Refused(values, errors))
        made = {"name": issued.user.name, "key": issued.key}
        return await page.answer(request, visitor, made=made)

    def switch(disabled: bool) -> Any:
        async def handler(request: Request) -> Response:
            visitor = await administrator(request)
            await console.form(request, visitor)
            user = await accounts.set_disabled(
                visitor.user, request.path_params["user_id"], disabled
            )
            return Console.redirect(request, f"/users?changed={user.name}")

        return handler

    return [
        Route("/users", show, methods=["GET"]),
        Route("/users", create, methods=["POST"]),
        Route("/users/{user_id}/disable", switch(True), methods=["POST"]),
        Route("/users/{user_id}/enable", switch(False), methods=["POST"]),
    ]
