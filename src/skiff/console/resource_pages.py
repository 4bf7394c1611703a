"""What the pages of a resource (templates, registry auths, network volumes, pods, endpoints)
share: the list page with its create form below, the create and the delete handlers, the
delete page that asks for the name typed again, an item's own page with the form that changes
it, and the way back to the list saying what was done. A ``*_pages.py`` module states only
what is particular to its resource: what the pages show, how the forms read, which service
calls make, change and remove."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from skiff.console import forms
from skiff.console.base import Console, Visitor
from skiff.domain.users import User
from skiff.errors import Conflict, Invalid

Handler = Callable[[Request], Awaitable[Response]]
Model = TypeVar("Model")
Item = TypeVar("Item")
Changes = TypeVar("Changes")
Found = TypeVar("Found", covariant=True)
Input = TypeVar("Input", contravariant=True)


def back_to_list(request: Request, path: str, notice: str, name: str, raw: bool) -> Response:
    """Back to the list at ``path``, which says what was ``created`` or ``deleted`` (the name
    URL-encoded, or ``raw``: as it is)."""
    query = f"{notice}={name}" if raw else urlencode({notice: name})
    return Console.redirect(request, f"{path}?{query}")


def _no_defaults(listed: Mapping[str, Any]) -> dict[str, str]:
    return {}


@dataclass(frozen=True, slots=True)
class ListPage:
    """A resource's list at ``path`` (the page ``template``) with its create form, and the
    notice of what was just ``created`` or ``deleted`` (the query the redirects add)."""

    console: Console
    path: str
    template: str
    title: str
    #: What the page shows of the visitor's resources, besides the form.
    shows: Callable[[Visitor], Awaitable[dict[str, Any]]]
    #: A blank form's values, given what the page shows.
    defaults: Callable[[Mapping[str, Any]], dict[str, str]] = field(default=_no_defaults)
    #: The redirects put the name into the query as it is, not URL-encoded, as these pages
    #: always have (kept so that their redirects stay the same).
    raw_notice: bool = False
    #: The query parameters that say what was just done, handed to the page as they came.
    notices: tuple[str, ...] = ("created", "deleted")

    async def answer(
        self,
        request: Request,
        visitor: Visitor,
        refused: forms.Refused | None = None,
        made: dict[str, Any] | None = None,
    ) -> Response:
        """The list; after a refused create, with the form's values and errors. ``made``: what
        a create made that the page shows this once (a new key), never put in a URL."""
        shown = await self.shows(visitor)
        return self.console.form_page(
            request,
            self.template,
            visitor,
            refused,
            self.defaults(shown),
            title=self.title,
            made=made,
            **{notice: request.query_params.get(notice) for notice in self.notices},
            **shown,
        )

    async def show(self, request: Request) -> Response:
        """The list page's GET."""
        return await self.answer(request, await self.console.signed_in(request))

    def done(self, request: Request, notice: str, name: str) -> Response:
        """Back to the list, which says what was ``created`` or ``deleted``."""
        return back_to_list(request, self.path, notice, name, self.raw_notice)

    def create(
        self,
        read: Callable[[dict[str, str]], tuple[Model | None, forms.Errors]],
        make: Callable[[User, Model], Awaitable[str]],
        refused_at: str,
        kept: Collection[str] | None = None,
    ) -> Handler:
        """The create form's POST: ``read`` the form into the service's input (or field
        errors), ``make`` it (giving its name), and back to the list; a refusal comes back as
        the list, status 400, with the errors (a service's at its field, else ``refused_at``)
        and the form's values: those ``kept`` (all when ``None``)."""

        async def handler(request: Request) -> Response:
            visitor = await self.console.signed_in(request)
            form = await self.console.form(request, visitor)
            model, errors = read(form)
            if model is not None and not errors:
                try:
                    name = await make(visitor.user, model)
                except (Invalid, Conflict) as exc:
                    errors = forms.service_error(exc, refused_at)
                else:
                    return self.done(request, "created", name)
            shown = form if kept is None else {k: form.get(k, "") for k in kept}
            return await self.answer(request, visitor, forms.Refused(shown, errors))

        return handler

    def delete(
        self,
        id_param: str,
        get: Callable[[User, str], Awaitable[Item]],
        remove: Callable[[User, str], Awaitable[object]],
        name_of: Callable[[Item], str],
    ) -> Handler:
        """A list row's delete button: the CSRF token checked, the item the path names (404 if
        it is not the visitor's) removed by its service (whose refusal, such as in use, is the
        error page), and back to the list."""

        async def handler(request: Request) -> Response:
            visitor = await self.console.signed_in(request)
            await self.console.form(request, visitor)
            item_id = request.path_params[id_param]
            item = await get(visitor.user, item_id)
            await remove(visitor.user, item_id)
            return self.done(request, "deleted", name_of(item))

        return handler


@dataclass(frozen=True, slots=True)
class DeletePage(Generic[Item]):
    """A delete on its own page (``template``) that asks for the item's name typed again
    (``confirm_name``); a mistyped name or a service's refusal (such as still attached) comes
    back on that page, and a delete goes back to the list at ``list_path`` naming what it
    deleted."""

    console: Console
    template: str
    #: What the page calls the item: "The name you typed is not this <noun>'s name".
    noun: str
    #: The item the path names, if it is the visitor's (else 404).
    find: Callable[[Request, Visitor], Awaitable[Item]]
    name_of: Callable[[Item], str]
    remove: Callable[[User, Item], Awaitable[object]]
    #: What the page shows of the item, by the names its template uses.
    shows: Callable[[Visitor, Item], Awaitable[dict[str, Any]]]
    list_path: str
    raw_notice: bool = False

    async def answer(
        self,
        request: Request,
        visitor: Visitor,
        item: Item,
        error: str | None = None,
        status: int = 200,
    ) -> Response:
        return self.console.page(
            request,
            self.template,
            visitor,
            status,
            title=f"Delete {self.name_of(item)}",
            error=error,
            **await self.shows(visitor, item),
        )

    async def show(self, request: Request) -> Response:
        """The delete page's GET."""
        visitor = await self.console.signed_in(request)
        return await self.answer(request, visitor, await self.find(request, visitor))

    async def delete(self, request: Request) -> Response:
        """The delete page's POST."""
        visitor = await self.console.signed_in(request)
        item = await self.find(request, visitor)
        form = await self.console.form(request, visitor)
        name = self.name_of(item)
        if form.get("confirm_name") != name:
            error = f"The name you typed is not this {self.noun}'s name; nothing was deleted."
            return await self.answer(request, visitor, item, error, 400)
        try:
            await self.remove(visitor.user, item)
        except Conflict as exc:
            return await self.answer(request, visitor, item, exc.message, exc.status_code)
        return back_to_list(request, self.list_path, "deleted", name, self.raw_notice)


class Service(Protocol[Found, Input]):
    """What ``ItemPages`` asks of a resource's service (``services.pods`` and the like)."""

    async def get(self, user: User, item_id: str, /) -> Found: ...

    async def create(self, user: User, data: Input, /) -> Found: ...

    async def delete(self, user: User, item_id: str, /) -> object: ...


@dataclass(frozen=True, slots=True)
class ItemPages(Generic[Item, Model]):
    """The pages of one of a resource's items, at ``{list_path}/{id}`` with the id in the path
    parameter ``param``: the item's own page and the form on it, its delete page, and the name
    its create gives back to the list."""

    console: Console
    list_path: str
    param: str
    service: Service[Item, Model]
    name_of: Callable[[Item], str]
    id_of: Callable[[Item], str]

    async def find(self, request: Request, visitor: Visitor) -> Item:
        """The item the path names, if it is the visitor's (else the service's 404)."""
        return await self.service.get(visitor.user, request.path_params[self.param])

    async def make(self, user: User, model: Model) -> str:
        """``ListPage.create``'s ``make``: the service's create, naming what it made."""
        return self.name_of(await self.service.create(user, model))

    async def remove(self, user: User, item: Item) -> None:
        await self.service.delete(user, self.id_of(item))

    def show(self, answer: Callable[[Request, Visitor, Item], Awaitable[Response]]) -> Handler:
        """The item's page's GET: the page ``answer`` gives for the item the path names."""

        async def handler(request: Request) -> Response:
            visitor = await self.console.signed_in(request)
            return await answer(request, visitor, await self.find(request, visitor))

        return handler

    def update(
        self,
        answer: Callable[[Request, Visitor, Item, forms.Refused], Awaitable[Response]],
        read: Callable[[dict[str, str]], tuple[Changes | None, forms.Errors]],
        save: Callable[[User, str, Changes], Awaitable[object]],
        refused_at: str,
        kept: Collection[str],
    ) -> Handler:
        """The POST of the form on the item's page: ``read`` the form into the service's
        changes (or field errors), ``save`` them by the item's id, and back to the item's page
        saying so (``?saved=1``); a refusal comes back as the page ``answer`` gives, status 400,
        with the errors (a service's at its field, else ``refused_at``) and the form's values
        ``kept``."""

        async def handler(request: Request) -> Response:
            visitor = await self.console.signed_in(request)
            item = await self.find(request, visitor)
            form = await self.console.form(request, visitor)
            changes, errors = read(form)
            if changes is not None and not errors:
                item_id = self.id_of(item)
                try:
                    await save(visitor.user, item_id, changes)
                except (Invalid, Conflict) as exc:
                    errors = forms.service_error(exc, refused_at)
                else:
                    return Console.redirect(request, f"{self.list_path}/{item_id}?saved=1")
            shown = {k: form.get(k, "") for k in kept}
            return await answer(request, visitor, item, forms.Refused(shown, errors))

        return handler

    def deleting(
        self, template: str, noun: str, shows: Callable[[Visitor, Item], Awaitable[dict[str, Any]]]
    ) -> DeletePage[Item]:
        """The item's delete page (``DeletePage``), back to the list at ``list_path``."""
        return DeletePage(
            self.console,
            template,
            noun,
            self.find,
            self.name_of,
            self.remove,
            shows,
            self.list_path,
        )
