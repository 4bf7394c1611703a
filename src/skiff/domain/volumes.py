"""Network volumes: a user's storage that outlives workers, mounted at ``/runpod-volume`` in
every worker of the endpoints that name it (``networkVolumeId``).

A volume is a directory on the server (``volume_dirs.py``); its ``size`` is the quota it was
given, in GB. A volume grows and is renamed, never shrinks (the v1 reference's rule).
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, Field

from skiff.domain.input_types import Int, StrictInput, Text

#: The v1 reference's bounds of ``size``, in GB.
MIN_SIZE_GB = 0
MAX_SIZE_GB = 4000
#: A GB of ``size`` in bytes: read as a GiB, the larger of the two readings, so a volume
#: promised as N GB never holds less than a user counting either way expects.
BYTES_PER_GB = 1024**3
#: skiff is one data center (this host); a volume created without one is said to be here.
DEFAULT_DATA_CENTER = "local"
MAX_NAME_LENGTH = 191


class NetworkVolumeCreate(StrictInput):
    name: Text = Field(min_length=1, max_length=MAX_NAME_LENGTH)
    size: Int = Field(
        ge=MIN_SIZE_GB,
        le=MAX_SIZE_GB,
        description="GB (of 2^30 bytes). It must fit in the disk space the server has free.",
    )
    dataCenterId: Text | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_NAME_LENGTH,
        description=f"Kept as a label: a skiff server is one data center. Default "
        f"{DEFAULT_DATA_CENTER!r}.",
    )


class NetworkVolumeUpdate(StrictInput):
    """Rename, grow, or both; a field left out (or null) stays as it is."""

    name: Text | None = Field(default=None, min_length=1, max_length=MAX_NAME_LENGTH)
    size: Int | None = Field(
        default=None,
        ge=MIN_SIZE_GB,
        le=MAX_SIZE_GB,
        description="GB: at least the current size (a volume never shrinks), and what it grows "
        "by must fit in the disk space the server has free.",
    )


class NetworkVolume(BaseModel):
    """A volume as the store keeps it."""

    id: str
    name: str
    size: int = Field(description="GB")
    dataCenterId: str
    createdAt: float


@dataclass(frozen=True, slots=True)
class VolumeUsers:
    """What of its owner's names a network volume (``networkVolumeId``) and would be left
    waiting for ever on a volume that is gone: endpoints (their workers mount it) and pods
    (being deleted ones left out), by id, oldest first."""

    endpoints: tuple[str, ...] = ()
    pods: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.endpoints or self.pods)

    def refusal(self, volume_id: str) -> str:
        """Why the volume cannot be deleted, naming each user and what frees it."""
        named = []
        if self.endpoints:
            named.append(f"endpoint(s) {', '.join(self.endpoints)}")
        if self.pods:
            named.append(f"pod(s) {', '.join(self.pods)}")
        frees = []
        if self.endpoints:
            frees.append("set the endpoints' networkVolumeId to null (or delete them)")
        if self.pods:
            frees.append("delete the pods")
        return (
            f"network volume {volume_id} is attached to {' and '.join(named)}: "
            f"{' and '.join(frees)} first"
        )


@dataclass(frozen=True, slots=True)
class VolumeReport:
    """A volume and the disk space its directory takes now."""

    volume: NetworkVolume
    used_bytes: int


def size_bytes(size_gb: int) -> int:
    return size_gb * BYTES_PER_GB


def shrink_refusal(current_gb: int, wanted_gb: int) -> str | None:
    """Why ``wanted_gb`` is refused for a volume of ``current_gb``, or None when it is not."""
    if wanted_gb < current_gb:
        return (
            f"size: a network volume grows but never shrinks; it has {current_gb} GB, "
            f"so ask for {current_gb} or more"
        )
    return None


def room_refusal(
    wanted_gb: int, free_bytes: int, used_bytes: int = 0, field: str = "size"
) -> str | None:
    """Why a volume of ``wanted_gb`` does not fit, or None when it does: the disk must have
    room for all of it, counting what the volume holds already (``used_bytes``) as its own.
    ``field`` names the size in the refusal (a pod's volume is its ``volumeInGb``)."""
    available = free_bytes + used_bytes
    if size_bytes(wanted_gb) <= available:
        return None
    return (
        f"{field}: {wanted_gb} GB does not fit: the disk that holds the volumes has "
        f"{available / BYTES_PER_GB:.1f} GB available for it"
    )
