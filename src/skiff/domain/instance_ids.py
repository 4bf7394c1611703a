"""CPU instance ids as the hosted platform names them: ``cpu3c-2-4`` is flavor ``cpu3c`` with
2 vCPUs and 4 GB of memory. Pure parsing, shared by endpoint settings (``domain/endpoints``)
and container limits (``domain/containers``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

#: flavor-vCPUs-GB: vCPUs 1..999, GB 1..9999, no leading zeros.
PATTERN = r"^(cpu[35][cg])-([1-9][0-9]{0,2})-([1-9][0-9]{0,3})$"
_INSTANCE_ID = re.compile(PATTERN)


@dataclass(frozen=True, slots=True)
class InstanceId:
    flavor: str
    vcpus: int
    memory_gb: int

    def __str__(self) -> str:
        return f"{self.flavor}-{self.vcpus}-{self.memory_gb}"


def parse(text: str) -> InstanceId | None:
    """The instance id ``text`` names; None when it is not one."""
    match = _INSTANCE_ID.match(text)
    if match is None:
        return None
    return InstanceId(flavor=match[1], vcpus=int(match[2]), memory_gb=int(match[3]))
