"""Whether a template's ``imageName`` is a reference Docker would accept, and if not, what is
wrong with it: ``[registry[:port]/]path[:tag][@digest]``, the grammar of Docker's reference
package (github.com/distribution/reference) as ``docker pull`` applies it.

Checked when the template is written, so that a typo is a 400 naming ``imageName`` rather than a
worker that fails its pull minutes later.
"""

from __future__ import annotations

import re

#: Docker's limit on the name (registry and path, without tag or digest).
MAX_NAME_LENGTH = 255
MAX_TAG_LENGTH = 128

_HOST_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_REGISTRY = re.compile(
    rf"(?:{_HOST_COMPONENT}(?:\.{_HOST_COMPONENT})*|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
)
#: Lowercase letters and digits, joined by one ``.`` or ``_``, two ``_``, or any run of ``-``.
_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_TAG = re.compile(r"[\w][\w.-]*", re.ASCII)
_DIGEST = re.compile(r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}")
_IMAGE_ID = re.compile(r"[a-f0-9]{64}")

_SHAPE = (
    "[registry[:port]/]path[:tag][@digest], like python:3.11 or"
    " registry.example.com:5000/team/worker:v1"
)


def image_reference_problem(reference: str) -> str | None:
    """None for a valid reference; otherwise what is wrong with it, in words for its author."""
    if not reference:
        return "is empty: expected " + _SHAPE
    if any(c.isspace() for c in reference):
        return "must not contain spaces: expected " + _SHAPE
    rest, _, digest = reference.partition("@")
    if "@" in reference and not _DIGEST.fullmatch(digest):
        return (
            f"has an invalid digest {digest!r}: expected algorithm:hex, like sha256:<64 hex digits>"
        )
    if digest.startswith("sha256:") and len(digest) != len("sha256:") + 64:
        return "has an invalid sha256 digest: it must have exactly 64 hex digits"
    name, tag = rest, None
    last_slash = rest.rfind("/")
    if ":" in rest[last_slash + 1 :]:
        name, _, tag = rest.rpartition(":")
    if tag is not None and not (_TAG.fullmatch(tag) and len(tag) <= MAX_TAG_LENGTH):
        return (
            f"has an invalid tag {tag!r}: up to {MAX_TAG_LENGTH} letters, digits, '_', '.' and"
            " '-', not starting with '.' or '-'"
        )
    if not name:
        return "names no repository: expected " + _SHAPE
    if len(name) > MAX_NAME_LENGTH:
        return f"is too long: the repository name may have at most {MAX_NAME_LENGTH} characters"
    if _IMAGE_ID.fullmatch(name) and tag is None and not digest:
        return "is a 64-digit image id, not a reference: name the image by its repository"
    registry, path = _split_registry(name)
    if registry is not None and not _REGISTRY.fullmatch(registry):
        return f"has an invalid registry {registry!r}: expected host[:port]"
    for component in path.split("/"):
        if not component:
            return "has an empty path component (two '/' in a row, or one at an end)"
        if _PATH_COMPONENT.fullmatch(component.lower()) and component != component.lower():
            return f"has {component!r} in its path: a repository path must be lowercase"
        if not _PATH_COMPONENT.fullmatch(component):
            return (
                f"has an invalid path component {component!r}: lowercase letters and digits,"
                " separated by '.', '_', '__' or '-'"
            )
    return None


def _split_registry(name: str) -> tuple[str | None, str]:
    """Docker's rule: the first component names a registry when there is a '/' after it and it
    has a '.' or a ':', is ``localhost``, or has an uppercase letter (a path cannot)."""
    first, slash, rest = name.partition("/")
    if slash and ("." in first or ":" in first or first == "localhost" or first != first.lower()):
        return first, rest
    return None, name
