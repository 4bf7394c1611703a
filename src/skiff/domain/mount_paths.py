"""Where a pod's volume may be mounted (``volumeMountPath``): one rule, wherever the value enters.

A template's value is checked when it is created or updated (``/v1``, GraphQL's
``saveTemplate``, the console), a pod's when it is created or updated (``/v1``, GraphQL's
deploy mutations, the console), and a pod made from a template checks the template's value
again, as a template stored before this rule still loads with whatever it held: a value no
provider can mount is a 400 at creation, never a pod that is accepted and then waits for ever.

The rule: ``/`` and one name, a directory at the top of the file system (``/workspace``, the
hosted platform's default; ``/runpod-volume``, what ``runpod.create_pod`` sends; ``/data``,
``/models``), where the name is letters, digits, ``.``, ``_`` and ``-``, starts with a letter, a
digit or ``_``, is at most 255 characters (a Linux file name's limit) and is not one of
``SYSTEM_DIRECTORIES``. One trailing slash is accepted and dropped (``/workspace/`` is
``/workspace``); any other spelling (``//data``, ``/./data``, ``/data/..``) is refused rather
than normalised, so the path a pod is told (``RUNPOD_VOLUME_MOUNT_PATH``) is the one it gave.

Why a top-level directory for every provider, not only for process pods (which bubblewrap can
mount nowhere else, ``providers/bubblewrap.py``): a template and a pod are stored and outlive
the provider that first ran them (an operator switches ``SKIFF_PROVIDER``, a template made for
containers is deployed on a server of processes), and a rule that depended on the provider
would turn today's 201 into tomorrow's pod that never starts. A top-level directory also keeps
the system-directory check exact: a deeper path (``/usr/local/lib``, ``/var/lib/docker``,
``/etc/ssl``) would need every system subdirectory listed to be refused. The character set
leaves out what some mount syntax reads as a separator (Docker's ``src:dst:mode`` binds take
``:``; ``,`` separates ``--mount`` options), white space and control characters.
"""

from __future__ import annotations

import re

#: A Linux file name's limit (NAME_MAX).
MAX_NAME_LENGTH = 255
#: Top-level directories a volume may not hide: what an image or the host needs to run
#: (programs, libraries, configuration, the kernel's and the runtime's state, temporary files,
#: home directories). ``/opt`` is one: images keep their software there (``/opt/conda``,
#: ``/opt/nvidia``). ``/nix`` and ``/snap`` hold the programs of hosts that use them, and a
#: process pod sees the host's file system. ``/mnt``, ``/media`` and ``/srv`` are left free:
#: they are empty, or meant for mounts, in an image.
SYSTEM_DIRECTORIES = frozenset(
    {
        "bin",
        "boot",
        "dev",
        "etc",
        "home",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "nix",
        "opt",
        "proc",
        "root",
        "run",
        "sbin",
        "snap",
        "sys",
        "tmp",
        "usr",
        "var",
    }
)
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
#: What every refusal ends with: what is accepted.
ALLOWED = (
    "a volume is mounted at a top-level directory such as /workspace (the default), "
    "/runpod-volume, /data or /models: / and one name of letters, digits, '.', '_' and '-' "
    f"(starting with a letter, a digit or '_', at most {MAX_NAME_LENGTH} characters), "
    "other than a system directory (/" + ", /".join(sorted(SYSTEM_DIRECTORIES)) + ")"
)
#: What the OpenAPI description says of the field.
MOUNT_PATH_DESCRIPTION = (
    "Where a pod's volume is mounted: a top-level directory such as /workspace (the default), "
    "/runpod-volume or /data, not a system one (/etc, /usr, /var ...)"
)


def mount_path_problem(value: str) -> str | None:
    """Why ``value`` cannot be a volume's mount path, in a few words, or None when it can."""
    if not value.startswith("/"):
        return "is not an absolute path (it must start with /)"
    name = value[1:].removesuffix("/")
    if not name:
        return "is the root directory: the volume would hide the whole system"
    if "/" in name:
        return "is not a top-level directory"
    if len(name) > MAX_NAME_LENGTH:
        return f"has a name longer than {MAX_NAME_LENGTH} characters"
    if _NAME.fullmatch(name) is None:
        return "has a character that is not accepted in its name, or starts with '.' or '-'"
    if name in SYSTEM_DIRECTORIES:
        return "is a system directory: the volume would hide what the system needs"
    return None


def check_mount_path(value: str) -> str:
    """``value`` as it is kept (without a trailing slash); ``ValueError`` saying what is
    wrong with it and what is accepted."""
    problem = mount_path_problem(value)
    if problem is not None:
        raise ValueError(f"{value!r} {problem}; {ALLOWED}")
    return value.removesuffix("/")


def check_optional_mount_path(value: str | None) -> str | None:
    """``check_mount_path`` for an input that may leave the path out."""
    return None if value is None else check_mount_path(value)
