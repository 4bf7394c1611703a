"""``GET /`` through the in-process app: a newcomer opening the server's address is led to the
console and the API documents, and each link it gives answers."""

from __future__ import annotations

from in_process import InProcess


async def test_the_root_page_links_the_console_and_the_api_docs(in_process: InProcess) -> None:
    page = await in_process.anonymous.get("/", headers={"Accept": "text/html,*/*;q=0.8"})
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    for path in ("/console", "/v1/docs", "/v2/docs"):
        assert f'href="{path}"' in page.text


async def test_a_json_client_gets_an_index_whose_links_answer(in_process: InProcess) -> None:
    answer = await in_process.anonymous.get("/", headers={"Accept": "application/json"})
    assert answer.status_code == 200, answer.text
    links = answer.json()["links"]
    assert links["console"] == "/console" and links["managementDocs"] == "/v1/docs"
    for path in links.values():
        followed = await in_process.anonymous.get(path, follow_redirects=True)
        assert followed.status_code == 200, (path, followed.status_code)
