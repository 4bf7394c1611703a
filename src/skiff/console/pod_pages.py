"""Pods: the list (status, GPUs, ports as links, uptime) with this host's GPUs and who holds
each, create from an image or a template, a pod's page (its settings, start, stop, restart,
reset, its Connect menu (``pod_connect.py``), and its log, followed as it comes), and delete
after typing the pod's name. Its terminal is ``terminal_pages.py``'s."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from skiff.console import forms
from skiff.console.base import Console, Visitor
from skiff.console.log_pages import TAIL_CHOICES, line_view, lines_answer, since_of, tail_of
from skiff.console.pod_connect import connect_of
from skiff.console.resource_pages import ItemPages, ListPage
from skiff.domain.pods import Pod, PodCreate, runtime_status
from skiff.errors import Conflict, NotFound

#: The actions a pod's page offers, and what each says it did.
ACTIONS = {
    "start": "started",
    "stop": "stopped",
    "restart": "restarted in place (its disk kept)",
    "reset": "reset: started fresh from its image (its disk wiped, its volume kept)",
}


@dataclass(frozen=True, slots=True)
class PodView:
    """A pod as its row and its page show it."""

    pod: Pod
    status: str
    #: ``(port, link or None, host port)`` of each port it publishes now.
    ports: list[tuple[str, str | None, int]]
    #: Seconds since its instance started, while it runs.
    uptime: float | None


def pod_name(pod: Pod) -> str:
    return pod.spec.name


def pod_id(pod: Pod) -> str:
    return pod.id


def routes(console: Console) -> list[BaseRoute]:
    services = console.services

    def view(pod: Pod) -> PodView:
        runner = services.pod_runner
        status = runtime_status(pod)
        ports = [
            (port, runner.port_url(pod, port, host_port), host_port)
            for port, host_port in pod.placement.portMappings.items()
        ]
        uptime = None
        if status == "running" and pod.lastStartedAt is not None:
            uptime = max(0.0, services.clock.now() - pod.lastStartedAt)
        return PodView(pod, status, ports, uptime)

    async def shows(visitor: Visitor) -> dict[str, Any]:
        gpus = await services.gpu_report.rows(visitor.user)
        return {
            "pods": [view(p) for p in await services.pods.all(visitor.user)],
            "gpus": gpus,
            "gpu_types": sorted({row.gpu.name for row in gpus}),
            "templates": await services.templates.all(visitor.user),
            "volumes": [r.volume for r in await services.volumes.all(visitor.user)],
        }

    def defaults(listed: Mapping[str, Any]) -> dict[str, str]:
        return {"computeType": "GPU" if listed["gpus"] else "CPU"}

    page = ListPage(console, "/pods", "pods.html", "Pods", shows, defaults)
    pods = ItemPages(console, "/pods", "pod_id", services.pods, pod_name, pod_id)

    async def pod_page(
        request: Request, visitor: Visitor, pod: Pod, error: str | None = None, status: int = 200
    ) -> Response:
        tail = tail_of(request)
        lines = await services.pod_logs.lines(pod.id, None, tail)
        return console.page(
            request,
            "pod.html",
            visitor,
            status,
            title=pod.spec.name,
            shown=view(pod),
            connect=connect_of(services, pod),
            cost=services.billing.pod_cost_per_hour(pod),
            done=ACTIONS.get(request.query_params.get("done", "")),
            error=error,
            tail=tail,
            tails=TAIL_CHOICES,
            lines=[line_view(x) for x in lines],
        )

    def read(form: dict[str, str]) -> tuple[PodCreate | None, forms.Errors]:
        data, errors = forms.pod_data(form)
        if errors:
            return None, errors
        return forms.validate(PodCreate, data, forms.POD_FIELDS, "imageName")

    async def act(request: Request) -> Response:
        visitor = await console.signed_in(request)
        pod = await pods.find(request, visitor)
        action = request.path_params["action"]
        if action not in ACTIONS:
            raise NotFound(f"no action {action!r}: {', '.join(ACTIONS)}")
        await console.form(request, visitor)
        try:
            await getattr(services.pods, action)(visitor.user, pod.id)
        except Conflict as exc:
            return await pod_page(request, visitor, pod, exc.message, exc.status_code)
        return Console.redirect(request, f"/pods/{pod.id}?{urlencode({'done': action})}")

    async def log_lines(request: Request) -> Response:
        """Lines stamped at or after ``since`` (epoch seconds), for the follow."""
        visitor = await console.signed_in(request)
        pod = await pods.find(request, visitor)
        return lines_answer(
            await services.pod_logs.lines(pod.id, since_of(request), tail_of(request))
        )

    async def delete_shows(visitor: Visitor, pod: Pod) -> dict[str, Any]:
        return {"pod": pod}

    deleting = pods.deleting("pod_delete.html", "pod", delete_shows)

    return [
        Route("/pods", page.show, methods=["GET"]),
        Route(
            "/pods", page.create(read, pods.make, "gpuTypeIds", forms.POD_FIELDS), methods=["POST"]
        ),
        Route("/pods/{pod_id}", pods.show(pod_page), methods=["GET"]),
        Route("/pods/{pod_id}/log/lines.json", log_lines, methods=["GET"]),
        Route("/pods/{pod_id}/delete", deleting.show, methods=["GET"]),
        Route("/pods/{pod_id}/delete", deleting.delete, methods=["POST"]),
        Route("/pods/{pod_id}/{action}", act, methods=["POST"]),
    ]
