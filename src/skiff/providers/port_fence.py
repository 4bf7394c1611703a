"""The TCP ports a sandboxed process may bind, fenced by Landlock.

A sandboxed worker or pod shares this host's network (``bubblewrap.py``), and a port is taken
by whoever binds it first. Unfenced, a tenant's process could bind the port another tenant's
load-balancing worker was just given, or that another tenant's pod serves on, and be sent that
tenant's requests. So each sandboxed process tree may bind only its own ports: a
load-balancing worker its ``PORT`` and ``PORT_HEALTH``, a pod the ports it declares, and any
process a port of the kernel's ephemeral range, which is everyone's (``bind`` to port 0 lands
there, and so does a program that asks for a free port and binds its number after, as a
notebook kernel or a training run's rendezvous does; no pod or worker is given one of them).
Anything else is refused with ``EACCES``, as a port below 1024 is to an unprivileged user.

Landlock's TCP rights hold for TCP sockets only, and a Multipath TCP socket (``IPPROTO_MPTCP``)
listens for plain TCP clients as well: so the fence also refuses, with a seccomp filter, to make
one, or an ``AF_SMC`` socket (which falls back to TCP), or an ``io_uring`` (whose socket
operations no seccomp filter sees), and every system call of another architecture's table (a
32-bit ``socketcall`` would hide its arguments).

Where the kernel allows it (Landlock ABI 6, Linux 6.12), the fenced process may also not reach
an abstract Unix socket made outside its own process tree: those are named in the network
namespace it shares with the host and with other tenants, not in its own files.

Landlock (Linux 6.7 and later, ABI 4, for network rules) and seccomp are inherited by every
child and cannot be lifted, and they need no privilege: the restriction is applied by the shim
that starts bubblewrap (``local.py``), so it holds before any of the tenant's code runs. A host
without them runs the sandbox unfenced, which the server logs once at its start
(``fence_problem``).

This file is not imported by the shim: ``local.py`` prepends its source to the shim's, run with
``python -S -I -c``, so it uses the standard library only and touches nothing of skiff's.
"""

import ctypes
import errno
import os
import platform
import struct
import sys
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
_EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"

# seccomp: what the filter needs of each architecture (its audit id; socket, io_uring_setup).
_ARCHES = {"x86_64": (0xC000003E, 41, 425), "aarch64": (0xC00000B7, 198, 425)}
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_X32_BIT = 0x40000000
_AF_INET, _AF_INET6, _AF_SMC = 2, 10, 43
_IPPROTO_MPTCP = 262
# BPF opcodes: ld word abs; jeq k; jge k; ret k.
_LD, _JEQ, _JGE, _RET = 0x20, 0x15, 0x35, 0x06


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
    if platform.machine() not in _ARCHES:
        return (
            f"no seccomp filter is written for {platform.machine()} (only "
            f"{', '.join(_ARCHES)}): sandboxed workers and pods may bind any TCP port of this host"
        )
    abi = landlock_abi()
    if abi >= NET_ABI:
        return None
    return (
        f"this kernel's Landlock (ABI {abi}) has no network rules (ABI {NET_ABI}, Linux 6.7): "
        "sandboxed workers and pods may bind any TCP port of this host"
    )


def ephemeral_ports(path: str = _EPHEMERAL_RANGE) -> range:
    """The kernel's ephemeral range, everyone's to bind; empty when it cannot be read."""
    try:
        with open(path) as f:
            low, high = (int(n) for n in f.read().split()[:2])
    except (OSError, ValueError):
        return range(0)
    return range(low, high + 1)


def _seccomp_program() -> bytes:
    """The filter: refuse MPTCP and SMC sockets, io_uring, and any other architecture's calls;
    allow the rest (the module's docstring)."""
    arch, socket_nr, io_uring_nr = _ARCHES[platform.machine()]

    def op(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
        # struct sock_filter: code, jt, jf, k.
        return struct.pack("=HBBI", code, jt, jf, k)

    no_family = _RET_ERRNO | errno.EAFNOSUPPORT
    no_protocol = _RET_ERRNO | errno.EPROTONOSUPPORT
    no_call = _RET_ERRNO | errno.ENOSYS
    program = [
        op(_LD, 4),  # 0: arch
        op(_JEQ, arch, 1, 0),  # 1: this one's table: on
        op(_RET, no_call),  # 2: another architecture's
        op(_LD, 0),  # 3: nr
        op(_JGE, _X32_BIT, 0, 1),  # 4: x32's numbers
        op(_RET, no_call),  # 5
        op(_JEQ, io_uring_nr, 0, 1),  # 6
        op(_RET, no_call),  # 7
        op(_JEQ, socket_nr, 1, 0),  # 8
        op(_RET, _RET_ALLOW),  # 9: any other call
        op(_LD, 16),  # 10: the family (args[0], its low half)
        op(_JEQ, _AF_SMC, 0, 1),  # 11
        op(_RET, no_family),  # 12
        op(_JEQ, _AF_INET, 1, 0),  # 13
        op(_JEQ, _AF_INET6, 0, 3),  # 14: neither: allowed
        op(_LD, 32),  # 15: the protocol (args[2], its low half)
        op(_JEQ, _IPPROTO_MPTCP, 0, 1),  # 16
        op(_RET, no_protocol),  # 17
        op(_RET, _RET_ALLOW),  # 18
    ]
    return b"".join(program)


def _refuse_other_sockets(libc: ctypes.CDLL) -> None:
    program = _seccomp_program()
    filters = ctypes.create_string_buffer(program, len(program))
    # struct sock_fprog: an unsigned short count, then (aligned) a pointer to the filters.
    fprog = struct.pack("=HxxxxxxQ", len(program) // 8, ctypes.addressof(filters))
    _checked(
        libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.c_char_p(fprog), 0, 0),
        "PR_SET_SECCOMP",
    )


def _checked(result: int, what: str) -> int:
    if result < 0:
        number = ctypes.get_errno()
        raise OSError(number, f"{what}: {os.strerror(number)}")
    return result


def fence_binds(ports: Iterable[int]) -> None:
    """From now on, this process and every child it makes may bind only ``ports`` and the
    ephemeral range, with no other socket that serves TCP clients; and, where the ABI allows
    it, reach no abstract Unix socket made outside. Raises OSError when the kernel refuses: a
    caller that was told the fence holds stops."""
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
        # struct landlock_net_port_attr: allowed_access, port (packed); one rule a port, the
        # same buffer each time (tens of thousands for the ephemeral range).
        rule = (ctypes.c_uint64 * 2)(_ACCESS_NET_BIND_TCP, 0)
        add_rule = libc.syscall
        for port in sorted({0, *ports, *ephemeral_ports()}):
            rule[1] = port
            if add_rule(_SYS_ADD_RULE, ruleset, _RULE_NET_PORT, rule, 0) != 0:
                _checked(-1, f"landlock_add_rule (port {port})")
        # Without privilege, a process may restrict itself only once it can gain none.
        _checked(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "PR_SET_NO_NEW_PRIVS")
        _refuse_other_sockets(libc)
        _checked(
            libc.syscall(
                ctypes.c_long(_SYS_RESTRICT_SELF), ctypes.c_int(ruleset), ctypes.c_uint32(0)
            ),
            "landlock_restrict_self",
        )
    finally:
        os.close(ruleset)


def source() -> str:
    """This module's text, which a shim runs before its own lines (``python -S -I -c``)."""
    with open(__file__) as f:
        return f.read()


def fenced(argv: list[str]) -> list[str]:
    """``argv`` run behind the fence with no port of its own: how the sandbox's probe runs bwrap,
    so that it tries what a worker's start does (``local.py``'s shim does the same)."""
    runner = f"{source()}\nfence_binds(())\nos.execvp(sys.argv[1], sys.argv[1:])\n"
    return [sys.executable, "-S", "-I", "-c", runner, *argv]
