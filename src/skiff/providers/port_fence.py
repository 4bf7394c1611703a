"""The TCP ports a sandboxed process may bind, fenced by Landlock.

A sandboxed worker or pod shares this host's network (``bubblewrap.py``), and a port is taken
by whoever binds it first. Unfenced, a tenant's process could bind the port another tenant's
load-balancing worker was just given, or that another tenant's pod serves on, and be sent that
tenant's requests. So each sandboxed process tree may bind only its own ports: a
load-balancing worker its ``PORT`` and ``PORT_HEALTH``, a pod the ports it declares, and any
process a port the kernel picks (``bind`` to port 0: the ephemeral range, which a server, a
notebook kernel or a training run's rendezvous asks for). Anything else is refused with
``EACCES``, as a port below 1024 is to an unprivileged user.

Where the kernel allows it (Landlock ABI 6, Linux 6.12), the fenced process may also not reach
an abstract Unix socket made outside its own process tree: those are named in the network
namespace it shares with the host and with other tenants, not in its own files.

Landlock (Linux 6.7 and later, ABI 4, for network rules) is inherited by every child and
cannot be lifted, and it needs no privilege: the restriction is applied by the shim that starts
bubblewrap (``local.py``), so it holds before any of the tenant's code runs. A host without it
runs the sandbox unfenced, which the server logs once at its start (``fence_problem``).

This file is not imported by the shim: ``local.py`` prepends its source to the shim's, run with
``python -S -I -c``, so it uses the standard library only and touches nothing of skiff's.
"""

import ctypes
import os
import struct
from collections.abc import Iterable

# The same numbers on every architecture (they came after the tables were unified).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_ACCESS_NET_BIND_TCP = 1 << 0
_RULE_NET_PORT = 2
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
_PR_SET_NO_NEW_PRIVS = 38
#: The first ABI with network rules, and the first with scopes.
NET_ABI = 4
_SCOPE_ABI = 6


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """The Landlock ABI this kernel offers; 0 when it has none (too old, or turned off)."""
    version = _libc().syscall(
        ctypes.c_long(_SYS_CREATE_RULESET), None, ctypes.c_size_t(0), ctypes.c_uint32(1)
    )
    return max(int(version), 0)


def fence_problem() -> str | None:
    """Why sandboxed processes could not be fenced on this host; None when they can."""
    abi = landlock_abi()
    if abi >= NET_ABI:
        return None
    return (
        f"this kernel's Landlock (ABI {abi}) has no network rules (ABI {NET_ABI}, Linux 6.7): "
        "sandboxed workers and pods may bind any TCP port of this host"
    )


def _checked(result: int, what: str) -> int:
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")
    return result


def fence_binds(ports: Iterable[int]) -> None:
    """From now on, this process and every child it makes may bind only ``ports`` (and a port
    the kernel picks); and, where the ABI allows it, reach no abstract Unix socket made outside.
    Raises OSError when the kernel refuses: a caller that was told the fence holds stops."""
    libc = _libc()
    abi = landlock_abi()
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET if abi >= _SCOPE_ABI else 0
    # struct landlock_ruleset_attr: handled_access_fs, handled_access_net, scoped. Files are
    # the sandbox's mounts' business, not handled here.
    attr = struct.pack("=QQQ", 0, _ACCESS_NET_BIND_TCP, scoped)
    size = len(attr) if abi >= _SCOPE_ABI else 16
    ruleset = _checked(
        libc.syscall(
            ctypes.c_long(_SYS_CREATE_RULESET),
            ctypes.c_char_p(attr),
            ctypes.c_size_t(size),
            ctypes.c_uint32(0),
        ),
        "landlock_create_ruleset",
    )
    try:
        for port in sorted({0, *ports}):
            # struct landlock_net_port_attr: allowed_access, port (packed).
            rule = struct.pack("=QQ", _ACCESS_NET_BIND_TCP, port)
            _checked(
                libc.syscall(
                    ctypes.c_long(_SYS_ADD_RULE),
                    ctypes.c_int(ruleset),
                    ctypes.c_int(_RULE_NET_PORT),
                    ctypes.c_char_p(rule),
                    ctypes.c_uint32(0),
                ),
                f"landlock_add_rule (port {port})",
            )
        # Without privilege, a process may restrict itself only once it can gain none.
        _checked(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
        _checked(
            libc.syscall(
                ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)
            ),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset)
