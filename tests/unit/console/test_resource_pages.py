"""What a resource's console pages are built from (console/resource_pages.py): the list, its
create and delete handlers, and the delete page; around a console that signs everyone in and
answers a page with what it would render it with."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from skiff.console import forms
from skiff.console.base import Console, Visitor
from skiff.console.resource_pages import DeletePage, ListPage
from skiff.errors import Conflict, Invalid, NotFound

USER: Any = SimpleNamespace(id="u1", name="ann")
VISITOR = Visitor(USER, SimpleNamespace(nonce="n"), "token", SimpleNamespace())  # type: ignore[arg-type]


class PageContext(Console):
    """A console whose pages are the context they would be rendered with, as JSON."""

    def __init__(self) -> None:
        pass

    async def signed_in(self, request: Request) -> Visitor:
        return VISITOR

    async def form(self, request: Request, visitor: Visitor) -> dict[str, str]:
        form = await request.form()
        return {k: v for k, v in form.multi_items() if isinstance(v, str)}

    def page(
        self,
        request: Request,
        name: str,
        visitor: Visitor | None,
        status: int = 200,
        **context: Any,
    ) -> HTMLResponse:
        return HTMLResponse(orjson.dumps({"page": name, **context}), status)


class Things:
    """A service of named things; names with "taken" in them are refused as taken, sizes
    over 10 as invalid."""

    def __init__(self) -> None:
        self.names = {"t1": "first thing"}

    async def all(self, user: Any) -> list[str]:
        return sorted(self.names.values())

    async def create(self, user: Any, data: dict[str, str]) -> str:
        if "taken" in data["name"]:
            raise Conflict(f"a thing named {data['name']!r} already exists")
        if int(data.get("size") or 0) > 10:
            raise Invalid("size: at most 10", field="size")
        self.names[f"t{len(self.names) + 1}"] = data["name"]
        return data["name"]

    async def get(self, user: Any, thing_id: str) -> str:
        if thing_id not in self.names:
            raise NotFound("thing not found")
        return self.names[thing_id]

    async def delete(self, user: Any, thing_id: str) -> None:
        del self.names[thing_id]


def read(form: dict[str, str]) -> tuple[dict[str, str] | None, forms.Errors]:
    if not form.get("name"):
        return None, {"name": "a name is needed"}
    return {"name": form["name"], "size": form.get("size", "")}, {}


def client(raw_notice: bool = False, kept: tuple[str, ...] | None = ("name",)) -> TestClient:
    things = Things()

    async def shows(visitor: Visitor) -> dict[str, Any]:
        return {"things": await things.all(visitor.user)}

    def defaults(listed: Mapping[str, Any]) -> dict[str, str]:
        return {"size": str(len(listed["things"]))}

    page = ListPage(PageContext(), "/things", "things.html", "Things", shows, defaults, raw_notice)
    app = Starlette(
        routes=[
            Route("/things", page.show, methods=["GET"]),
            Route("/things", page.create(read, things.create, "name", kept), methods=["POST"]),
            Route(
                "/things/{thing_id}/delete",
                page.delete("thing_id", things.get, things.delete, lambda name: name),
                methods=["POST"],
            ),
        ]
    )
    return TestClient(app, root_path="/console", follow_redirects=False)


def test_the_list_page_shows_the_things_a_blank_form_and_the_notice_of_what_was_done() -> None:
    answer = client().get("/things?created=new%20one")
    assert answer.status_code == 200
    assert answer.json() == {
        "page": "things.html",
        "title": "Things",
        "things": ["first thing"],
        "values": {"size": "1"},
        "errors": {},
        "created": "new one",
        "deleted": None,
    }


def test_a_create_goes_back_to_the_list_naming_what_it_made_url_encoded() -> None:
    answer = client().post("/things", data={"name": "a & b"})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/things?created=a+%26+b"


def test_a_raw_notice_puts_the_name_into_the_query_as_it_is() -> None:
    answer = client(raw_notice=True).post("/things", data={"name": "a b"})
    assert answer.headers["location"] == "/console/things?created=a%20b"


def test_a_form_refused_on_reading_comes_back_with_its_errors_and_kept_values() -> None:
    answer = client().post("/things", data={"name": "", "size": "3", "csrf": "token"})
    assert answer.status_code == 400
    assert answer.json()["values"] == {"name": ""}
    assert answer.json()["errors"] == {"name": "a name is needed"}
    assert answer.json()["things"] == ["first thing"]


@pytest.mark.parametrize(
    ("name", "size", "errors"),
    [
        ("taken", "", {"name": "a thing named 'taken' already exists"}),
        ("big", "11", {"size": "at most 10"}),
    ],
)
def test_a_service_refusal_comes_back_at_its_field_or_the_fallback(
    name: str, size: str, errors: dict[str, str]
) -> None:
    answer = client().post("/things", data={"name": name, "size": size})
    assert answer.status_code == 400
    assert answer.json()["errors"] == errors


def test_without_kept_fields_a_refused_form_comes_back_whole() -> None:
    answer = client(kept=None).post("/things", data={"name": "", "size": "3"})
    assert answer.json()["values"] == {"name": "", "size": "3"}


def test_a_delete_removes_the_thing_and_goes_back_to_the_list_naming_it() -> None:
    web = client()
    answer = web.post("/things/t1/delete", data={"csrf": "token"})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/things?deleted=first+thing"
    assert web.get("/things").json()["things"] == []


def test_a_delete_of_a_thing_not_there_is_the_services_not_found() -> None:
    with pytest.raises(NotFound):
        client().post("/things/t9/delete", data={"csrf": "token"})


def delete_client(raw_notice: bool = False) -> tuple[TestClient, Things]:
    things = Things()
    things.names["t2"] = "in use"

    async def find(request: Request, visitor: Visitor) -> tuple[str, str]:
        thing_id = request.path_params["thing_id"]
        return thing_id, await things.get(visitor.user, thing_id)

    async def remove(user: Any, thing: tuple[str, str]) -> None:
        if thing[1] == "in use":
            raise Conflict("thing t2 is used by pod p1")
        await things.delete(user, thing[0])

    async def shows(visitor: Visitor, thing: tuple[str, str]) -> dict[str, Any]:
        return {"thing": thing[1]}

    deleting = DeletePage(
        PageContext(),
        "thing_delete.html",
        "thing",
        find,
        lambda thing: thing[1],
        remove,
        shows,
        "/things",
        raw_notice,
    )
    app = Starlette(
        routes=[
            Route("/things/{thing_id}/delete", deleting.show, methods=["GET"]),
            Route("/things/{thing_id}/delete", deleting.delete, methods=["POST"]),
        ]
    )
    return TestClient(app, root_path="/console", follow_redirects=False), things


def test_the_delete_page_shows_the_thing_and_asks_for_its_name() -> None:
    answer = delete_client()[0].get("/things/t1/delete")
    assert answer.status_code == 200
    assert answer.json() == {
        "page": "thing_delete.html",
        "title": "Delete first thing",
        "error": None,
        "thing": "first thing",
    }


def test_a_mistyped_name_deletes_nothing_and_says_so() -> None:
    web, things = delete_client()
    answer = web.post("/things/t1/delete", data={"confirm_name": "first"})
    assert answer.status_code == 400
    assert answer.json()["error"] == (
        "The name you typed is not this thing's name; nothing was deleted."
    )
    assert "t1" in things.names


def test_a_refused_delete_comes_back_on_the_page_with_the_services_words_and_status() -> None:
    web, things = delete_client()
    answer = web.post("/things/t2/delete", data={"confirm_name": "in use"})
    assert answer.status_code == 409
    assert answer.json()["error"] == "thing t2 is used by pod p1"
    assert "t2" in things.names


@pytest.mark.parametrize(
    ("raw_notice", "location"),
    [
        (False, "/console/things?deleted=first+thing"),
        (True, "/console/things?deleted=first%20thing"),
    ],
)
def test_the_typed_name_deletes_and_goes_back_to_the_list_naming_it(
    raw_notice: bool, location: str
) -> None:
    web, things = delete_client(raw_notice)
    answer = web.post("/things/t1/delete", data={"confirm_name": "first thing"})
    assert answer.status_code == 303
    assert answer.headers["location"] == location
    assert "t1" not in things.names
