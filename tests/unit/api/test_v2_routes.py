"""Every ``/v2`` route is declared once (api/v2.py), and both ways in are built from that list:
the mounted FastAPI app (routing and OpenAPI) and the hot dispatch (api/hot.py, and through it
the fast protocol)."""

from __future__ import annotations

import re
from pathlib import Path

from starlette.routing import Mount

from skiff.api import v2
from skiff.app import create_app
from skiff.config import Settings


def openapi_path(path: str) -> str:
    """A route's path as OpenAPI writes it: ``{path:path}`` (Starlette's converter) is
    ``{path}``."""
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", path)


def test_both_ways_in_serve_exactly_the_declared_routes(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=tmp_path / "data"))
    declared = v2.routes(app.state.services)
    named = [(r.method, r.path, r.handler.__name__) for r in declared]
    assert len({(method, path) for method, path, _ in named}) == len(named)

    mounted = next(r for r in app.routes if isinstance(r, Mount) and r.path == v2.PREFIX)
    described = mounted.app.openapi()["paths"]  # type: ignore[attr-defined]
    operations = [(m.upper(), path) for path, ops in described.items() for m in ops]
    assert operations == [(method, openapi_path(path)) for method, path, _ in named]
    for route in declared:
        operation = described[openapi_path(route.path)][route.method.lower()]
        assert operation["summary"] == route.summary and operation["tags"] == [route.tag]

    assert app.hot is not None
    for route in declared:
        path = v2.PREFIX + re.sub(r"\{[^}]+\}", "x1", route.path)
        found = app.hot.match(route.method, path)
        if route.hot:
            assert found is not None and found[0].handler.__name__ == route.handler.__name__
        else:
            assert found is None, route.path
    hot = {r.path for r in declared if r.hot}
    assert "/{endpoint_id}/run" in hot and "/{endpoint_id}/job-done/{worker_id}/{job_id}" in hot
    assert not any("/openai/" in path for path in hot)  # they stream: the framework serves them
