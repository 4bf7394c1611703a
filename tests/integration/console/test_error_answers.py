"""How the console answers what it cannot do: a page with the way back for a browser, the same
words as JSON for a script, and the sign-in form for a visitor without a session."""

from __future__ import annotations

import re

import httpx

from in_process import InProcess

JSON = {"Accept": "application/json"}


async def csrf_of(console: httpx.AsyncClient, path: str) -> str:
    page = await console.get(path)
    token = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert token is not None, page.text
    return token.group(1)


def heading_and_words(page: httpx.Response) -> tuple[str, str]:
    assert page.headers["content-type"].startswith("text/html")
    heading = re.search(r"<h1[^>]*>(.*?)</h1>", page.text, re.S)
    assert heading is not None, page.text
    return heading.group(1).strip(), page.text


async def test_a_page_without_a_session_sends_to_the_sign_in_form_and_back(
    in_process: InProcess,
) -> None:
    answer = await in_process.anonymous.get("/console/templates?page=2")
    assert answer.status_code in (302, 303)
    assert answer.headers["location"].endswith("?next=%2Fconsole%2Ftemplates%3Fpage%3D2")


async def test_a_post_or_a_script_without_a_session_is_told_to_sign_in(
    in_process: InProcess,
) -> None:
    posted = await in_process.anonymous.post("/console/templates", data={"name": "x"})
    assert (posted.status_code, posted.json()) == (401, {"error": "sign in first"})
    asked = await in_process.anonymous.get("/console/templates", headers=JSON)
    assert (asked.status_code, asked.json()) == (401, {"error": "sign in first"})


async def test_a_form_without_its_token_is_refused_on_a_page_and_as_json(
    console: httpx.AsyncClient,
) -> None:
    page = await console.post("/console/templates", data={"name": "x"})
    assert page.status_code == 403
    heading, text = heading_and_words(page)
    assert heading == "Refused" and "This form is out of date" in text
    script = await console.post("/console/templates", data={"name": "x"}, headers=JSON)
    assert script.status_code == 403
    assert script.json()["error"].startswith("This form is out of date")


async def test_an_unknown_page_and_an_unknown_id_answer_the_consoles_404(
    console: httpx.AsyncClient,
) -> None:
    page = await console.get("/console/no-such-page")
    assert page.status_code == 404
    assert heading_and_words(page)[0] == "Not found" and "There is no such page." in page.text
    script = await console.get("/console/no-such-page", headers=JSON)
    assert (script.status_code, script.json()) == (404, {"error": "There is no such page."})
    endpoint = await console.get("/console/endpoints/ep-unknown", headers=JSON)
    assert endpoint.status_code == 404
    assert "ep-unknown" in endpoint.json()["error"]
    endpoint_page = await console.get("/console/endpoints/ep-unknown")
    assert endpoint_page.status_code == 404
    assert heading_and_words(endpoint_page)[0] == "Not found" and "ep-unknown" in endpoint_page.text


async def test_a_refusal_the_page_could_not_foresee_is_said_on_a_page_of_its_own(
    in_process: InProcess, console: httpx.AsyncClient
) -> None:
    endpoint = await in_process.create_endpoint(name="uses-it")
    template_id = endpoint["templateId"]
    token = await csrf_of(console, "/console/templates")
    page = await console.post(f"/console/templates/{template_id}/delete", data={"csrf": token})
    assert page.status_code == 409
    heading, text = heading_and_words(page)
    assert heading == "Not possible" and f"used by endpoint(s) {endpoint['id']}" in text
    script = await console.post(
        f"/console/templates/{template_id}/delete", data={"csrf": token}, headers=JSON
    )
    assert script.status_code == 409 and script.json()["error"]


async def test_another_http_error_is_a_page_with_its_status(console: httpx.AsyncClient) -> None:
    page = await console.get("/console/templates/t-1/delete")
    assert page.status_code == 405
    assert heading_and_words(page)[0] == "Error"
