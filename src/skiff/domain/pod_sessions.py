"""What a session in a pod asks for (SSH, the console's terminal): a shell or a command, on a
terminal of a size or on plain pipes. Providers start it (``providers/pod_entry.py``), the
pod sessions service decides who may (``services/pod_shells.py``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class TerminalSize:
    cols: int
    rows: int


@dataclass(frozen=True, slots=True)
class EntryRequest:
    """What to run in the pod. ``command``: a command line for the pod's shell (``sh -c``);
    None: a login shell. ``terminal``: run on a terminal of this size (output and errors come
    as one stream); None: on pipes (output, errors and exit code apart, as ``ssh host cmd``).
    ``env``: added to the pod's own environment (``TERM``, ``SSH_CONNECTION``)."""

    command: str | None = None
    terminal: TerminalSize | None = None
    env: Mapping[str, str] = field(default_factory=dict)


#: A command of a session that asks for the SFTP subsystem (``sftp``, and ``scp`` since
#: OpenSSH 9): the SFTP server where Debian, Red Hat and Alpine put it, inside the pod.
SFTP_COMMAND = (
    "for s in /usr/lib/openssh/sftp-server /usr/libexec/openssh/sftp-server "
    "/usr/lib/ssh/sftp-server /usr/libexec/sftp-server; do "
    '[ -x "$s" ] && exec "$s"; done; '
    'echo "this pod has no SFTP server (Debian: openssh-sftp-server); scp -O and rsync work '
    'without one" >&2; exit 127'
)
