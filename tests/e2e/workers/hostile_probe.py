"""A hostile tenant's code: it tries every way it knows to the server's data and to other
tenants' processes, and reports what it reached. Run as a runpod-SDK worker (its job's input
says where to look and what to look for; the output is the report) or as a pod's command (the
same input as its one JSON argument; the report is printed to its log as one line).

Input: ``data_dir`` and ``volumes_dir`` (the server's, as the host sees them), ``server_pid``
(the server's pid on the host), ``markers`` (other tenants' secrets: seen anywhere, they are
reported), ``ports`` (TCP ports other tenants' pods declare: bound, they are reported).
"""

import json
import os
import signal
import socket
import subprocess
import sys


def _read(path, limit=1 << 20):
    try:
        with open(path, "rb") as f:
            return f.read(limit)
    except OSError:
        return None


def probe(spec):
    markers = [m.encode() for m in spec["markers"]]
    data_dir = spec["data_dir"]
    reached = []  # (what, where) for every attempt that got somewhere
    found = []  # (marker, where) for every secret seen

    def look(where, blob):
        if blob:
            for marker in markers:
                if marker in blob:
                    found.append([marker.decode(), where])

    # 1. The database by path, with its journal files.
    for name in ("skiff.db", "skiff.db-wal", "skiff.db-shm"):
        blob = _read(os.path.join(data_dir, name))
        if blob is not None:
            reached.append(["read", os.path.join(data_dir, name)])
            look(name, blob)
    # 2. Whatever find turns up by name, in the data directory's parent and /tmp.
    roots = [os.path.dirname(data_dir.rstrip("/")), "/tmp", spec["volumes_dir"]]
    listed = subprocess.run(
        ["find", *roots, "-name", "skiff.db*", "-o", "-name", "*.log", "-o", "-path", "*/home/*"],
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.split()
    for path in listed:
        blob = _read(path)
        if blob is None or not os.path.isfile(path) or path.startswith(os.environ["HOME"]):
            continue
        look(path, blob)
        # Files beside the data directory are the host's (readable by design); what counts is
        # reaching the data directory, the volumes, or a database.
        inside = path.startswith((data_dir, spec["volumes_dir"]))
        if inside or os.path.basename(path).startswith("skiff.db"):
            reached.append(["found", path])
    # 3. Every file under the data and volumes directories, read whole.
    for top in (data_dir, spec["volumes_dir"]):
        for folder, _, files in os.walk(top):
            if folder.startswith(os.environ["HOME"]):
                continue  # its own home, inside the data directory's path
            for name in files:
                path = os.path.join(folder, name)
                blob = _read(path)
                if blob is not None:
                    reached.append(["walked", path])
                    look(path, blob)
    # 4. Other processes' environments and command lines.
    own = os.getpid()
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != own:
            if b"hostile_probe" in (_read(f"/proc/{entry}/cmdline") or b""):
                continue  # its own (a pod's command line holds the markers it was given)
            for part in ("environ", "cmdline"):
                look(f"/proc/{entry}/{part}", _read(f"/proc/{entry}/{part}"))
    # 5. The server's open files, and the server itself.
    server = spec["server_pid"]
    try:
        fds = os.listdir(f"/proc/{server}/fd")
        reached.append(["listed", f"/proc/{server}/fd"])
        for fd in fds:
            look(f"/proc/{server}/fd/{fd}", _read(f"/proc/{server}/fd/{fd}"))
    except OSError:
        pass
    try:
        os.kill(server, 0)
        reached.append(["signalled", str(server)])
    except OSError:
        pass
    # 6. Writing into the data directory (the host checks it never got the file).
    try:
        with open(os.path.join(data_dir, "pwned"), "w") as f:
            f.write("pwned")
    except OSError:
        pass
    # 7. Another tenant's ports: bound first, they would be sent that tenant's requests.
    # Multipath TCP serves plain TCP clients too, and is not a TCP socket to Landlock.
    for port in spec.get("ports", []):
        for kind, protocol in (("bound", 0), ("bound with MPTCP", 262)):
            try:
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM, protocol) as sock:
                    sock.bind(("127.0.0.1", port))
                    reached.append([kind, str(port)])
            except OSError:
                pass
    procs = [p for p in os.listdir("/proc") if p.isdigit()]
    return {"reached": reached, "found": found, "uid": os.getuid(), "processes": len(procs)}


if __name__ == "__main__" and len(sys.argv) > 1:
    print("PROBE " + json.dumps(probe(json.loads(sys.argv[1]))), flush=True)
    signal.pause()  # a pod keeps running
elif __name__ == "__main__":
    import runpod

    runpod.serverless.start({"handler": lambda job: probe(job["input"])})
