"""What a resource's console pages are built from (console/resource_pages.py): the list, its
create and delete handlers, the delete page, and an item's own page with its form; around a
console that signs everyone in and answers a page with what it would render it with."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from skiff.console import forms
from skiff.console.base import Console, Visitor
from skiff.console.resource_pages import DeletePage, ItemPages, ListPage
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
        "made": None,
        "created": "new one",
        "deleted": None,
    }


async def test_a_list_page_hands_over_its_own_notices_and_what_a_create_made_once() -> None:
    """The keys and users pages: their notices are others (``revoked``, ``changed``), and a
    create answers with the list showing the key it made, never put in a URL."""

    async def shows(visitor: Visitor) -> dict[str, Any]:
        return {"things": []}

    page = ListPage(PageContext(), "/keys", "keys.html", "Keys", shows, notices=("revoked",))
    app = Starlette(routes=[Route("/keys", page.show, methods=["GET"])])
    listed = TestClient(app).get("/keys?revoked=k1&created=x").json()
    assert listed["revoked"] == "k1"
    assert "created" not in listed and "deleted" not in listed
    scope = {"type": "http", "method": "POST", "path": "/keys", "query_string": b"", "headers": []}
    made = await page.answer(Request(scope), VISITOR, made={"name": "ci", "key": "sk_1"})
    assert orjson.loads(made.body)["made"] == {"name": "ci", "key": "sk_1"}


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


class Boxes:
    """A service of boxes ``(id, name, size)``: a size over 10 is refused as invalid, and the
    box named "in use" is not deleted."""

    def __init__(self) -> None:
        self.boxes = {"b1": ("b1", "first box", 1), "b2": ("b2", "in use", 2)}

    async def get(self, user: Any, box_id: str) -> tuple[str, str, int]:
        if box_id not in self.boxes:
            raise NotFound("box not found")
        return self.boxes[box_id]

    async def create(self, user: Any, data: dict[str, str]) -> tuple[str, str, int]:
        box = (f"b{len(self.boxes) + 1}", data["name"], 0)
        self.boxes[box[0]] = box
        return box

    async def delete(self, user: Any, box_id: str) -> None:
        if self.boxes[box_id][1] == "in use":
            raise Conflict(f"box {box_id} is used by pod p1")
        del self.boxes[box_id]

    async def resize(self, user: Any, box_id: str, size: int) -> None:
        if size > 10:
            raise Invalid("size: at most 10", field="size")
        box_id, name, _ = self.boxes[box_id]
        self.boxes[box_id] = (box_id, name, size)


def read_size(form: dict[str, str]) -> tuple[int | None, forms.Errors]:
    size = form.get("size", "")
    return (int(size), {}) if size.isdigit() else (None, {"size": "a number is needed"})


def item_client() -> tuple[TestClient, Boxes]:
    boxes = Boxes()
    items = ItemPages(PageContext(), "/boxes", "box_id", boxes, lambda b: b[1], lambda b: b[0])

    async def box_page(
        request: Request,
        visitor: Visitor,
        box: tuple[str, str, int],
        refused: forms.Refused | None = None,
    ) -> Response:
        return items.console.form_page(request, "box.html", visitor, refused, box=list(box))

    async def make(request: Request) -> Response:
        return PlainTextResponse(await items.make(USER, {"name": "new box"}))

    async def shows(visitor: Visitor, box: tuple[str, str, int]) -> dict[str, Any]:
        return {"box": list(box)}

    deleting = items.deleting("box_delete.html", "box", shows)
    app = Starlette(
        routes=[
            Route("/boxes/new", make, methods=["POST"]),
            Route("/boxes/{box_id}", items.show(box_page), methods=["GET"]),
            Route(
                "/boxes/{box_id}",
                items.update(box_page, read_size, boxes.resize, "size", ("size",)),
                methods=["POST"],
            ),
            Route("/boxes/{box_id}/delete", deleting.show, methods=["GET"]),
            Route("/boxes/{box_id}/delete", deleting.delete, methods=["POST"]),
        ]
    )
    return TestClient(app, root_path="/console", follow_redirects=False), boxes


def test_an_items_page_shows_the_item_the_path_names() -> None:
    answer = item_client()[0].get("/boxes/b1")
    assert answer.status_code == 200
    assert answer.json() == {
        "page": "box.html",
        "box": ["b1", "first box", 1],
        "values": {},
        "errors": {},
    }


def test_an_items_page_of_an_item_not_there_is_the_services_not_found() -> None:
    with pytest.raises(NotFound):
        item_client()[0].get("/boxes/b9")


def test_a_saved_change_goes_back_to_the_items_page_saying_so() -> None:
    web, boxes = item_client()
    answer = web.post("/boxes/b1", data={"size": "7"})
    assert answer.status_code == 303
    assert answer.headers["location"] == "/console/boxes/b1?saved=1"
    assert boxes.boxes["b1"] == ("b1", "first box", 7)


@pytest.mark.parametrize(
    ("size", "errors"),
    [("big", {"size": "a number is needed"}), ("11", {"size": "at most 10"})],
)
def test_a_refused_change_comes_back_on_the_items_page_with_its_errors_and_kept_values(
    size: str, errors: dict[str, str]
) -> None:
    web, boxes = item_client()
    answer = web.post("/boxes/b1", data={"size": size, "other": "x"})
    assert answer.status_code == 400
    assert answer.json()["values"] == {"size": size}
    assert answer.json()["errors"] == errors
    assert answer.json()["box"] == ["b1", "first box", 1]
    assert boxes.boxes["b1"] == ("b1", "first box", 1)


def test_a_make_names_what_the_services_create_made() -> None:
    web, boxes = item_client()
    assert web.post("/boxes/new").text == "new box"
    assert boxes.boxes["b3"] == ("b3", "new box", 0)


def test_the_items_delete_page_removes_it_by_its_id_and_goes_back_to_the_list() -> None:
    web, boxes = item_client()
    assert web.get("/boxes/b1/delete").json()["title"] == "Delete first box"
    answer = web.post("/boxes/b1/delete", data={"confirm_name": "first box"})
    assert answer.headers["location"] == "/console/boxes?deleted=first+box"
    assert "b1" not in boxes.boxes
    refused = web.post("/boxes/b2/delete", data={"confirm_name": "in use"})
    assert refused.status_code == 409
    assert refused.json()["error"] == "box b2 is used by pod p1"
