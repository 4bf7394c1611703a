"""What a pod run as a process may name as its command (``local_pods.command_problem``),
checked when it is created: a program there to run, and nothing said of what the sandbox
hides: a missing path and a file that is not executable get the same answer."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

from skiff.domain.pods import PodSpec
from skiff.providers.base import PodLaunch, WorkerStartError
from skiff.providers.local_pods import NO_COMMAND, command_problem
from skiff.providers.pod_commands import process_argv


def spec(*command: str, **fields: Any) -> PodSpec:
    return PodSpec(name="p", imageName="x", dockerStartCmd=list(command), **fields)


def test_a_program_there_to_run_is_taken() -> None:
    assert command_problem(spec(sys.executable, "-V"), {}) is None
    assert command_problem(spec("sh", "-c", "true"), {"PATH": "/usr/bin:/bin"}) is None


def test_no_command_a_name_not_on_path_and_a_relative_path_are_refused() -> None:
    assert command_problem(spec(), {}) == NO_COMMAND
    refused = command_problem(spec("no-such-program-here"), {"PATH": "/usr/bin"})
    assert refused is not None and "not a program on this host" in refused
    relative = command_problem(spec("bin/serve"), {})
    assert relative is not None and "relative path" in relative


def test_a_missing_path_and_a_file_not_executable_get_one_answer(tmp_path: Path) -> None:
    plain = tmp_path / "secret.db"
    plain.write_text("data")
    missing = command_problem(spec(str(tmp_path / "nothing")), {})
    not_executable = command_problem(spec(str(plain)), {})
    assert missing is not None and not_executable is not None
    assert missing.replace("nothing", "X") == not_executable.replace("secret.db", "X")


def test_a_program_in_the_pods_volume_is_taken_and_dot_dot_does_not_leave_it() -> None:
    in_volume = spec("/workspace/bin/serve", volumeInGb=1)
    assert command_problem(in_volume, {}) is None
    escaping = spec("/workspace/../etc/passwd", volumeInGb=1)
    refused = command_problem(escaping, {})
    assert refused is not None and "not an executable file" in refused


def pod_launch(tmp_path: Path, entrypoint: list[str], command: list[str]) -> PodLaunch:
    return PodLaunch(
        pod_id="p1",
        version=1,
        image="x",
        entrypoint=entrypoint,
        command=command,
        env={},
        ports=(),
        volume=None,
        mount_path="/workspace",
        home=tmp_path,
    )


def test_a_pod_started_as_a_process_runs_its_entrypoint_then_its_command(
    tmp_path: Path,
) -> None:
    launch = pod_launch(tmp_path, ["python", "-u"], ["serve.py"])
    assert process_argv(launch, runs_as="a pod", provider="local") == ["python", "-u", "serve.py"]


@pytest.mark.parametrize(
    ("runs_as", "provider"), [("a pod run as a process", "local"), ("a pod on a Ray node", "Ray")]
)
def test_a_pod_with_no_command_is_refused_at_its_start_saying_why(
    tmp_path: Path, runs_as: str, provider: str
) -> None:
    with pytest.raises(WorkerStartError) as refused:
        process_argv(pod_launch(tmp_path, [], []), runs_as=runs_as, provider=provider)
    assert str(refused.value) == (
        f"{runs_as} runs its dockerEntrypoint and dockerStartCmd, and this pod has neither"
        f" (the {provider} provider does not use the image)"
    )
