"""The command of a pod run as a process (local pods, Ray pods): its ``dockerEntrypoint +
dockerStartCmd``, the image being unused there."""

from __future__ import annotations

from skiff.providers.base import PodLaunch, WorkerStartError


def process_argv(launch: PodLaunch, *, runs_as: str, provider: str) -> list[str]:
    """The pod's command line; refused at its start when it has none, as the ``provider``
    provider has no image's command to fall back on. ``runs_as`` says how a pod runs there
    ("a pod on a Ray node")."""
    argv = [*launch.entrypoint, *launch.command]
    if not argv:
        raise WorkerStartError(
            f"{runs_as} runs its dockerEntrypoint and dockerStartCmd, and this pod has neither"
            f" (the {provider} provider does not use the image)"
        )
    return argv
