"""A pod for the pod tests: serves its state over HTTP on the port of its first argument, on
every address (tests/pod_programs.py says what it answers)."""

import http.server
import json
import os
import pathlib
import sys
import uuid

volume = pathlib.Path(os.environ["RUNPOD_VOLUME_MOUNT_PATH"])
starts = volume / "starts"
if volume.is_dir():
    starts.write_text(str(int(starts.read_text()) + 1 if starts.exists() else 1))
disk = pathlib.Path.home() / "scratch"
#: This process, whatever its pid looks like from inside a sandbox's or container's namespace.
instance = uuid.uuid4().hex


class Answer(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.answer(
            {
                "starts": int(starts.read_text()) if starts.exists() else 0,
                "disk": disk.read_text() if disk.exists() else None,
                "pod": os.environ["RUNPOD_POD_ID"],
                "gpus": os.environ.get("RUNPOD_GPU_COUNT"),
                "cuda": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "greeting": os.environ.get("GREETING"),
                "pid": os.getpid(),
                "instance": instance,
            }
        )

    def do_POST(self) -> None:
        disk.write_text(self.rfile.read(int(self.headers["Content-Length"])).decode())
        self.answer({"written": True})

    def answer(self, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        # Requests are not worth a log line: the tests read the pod's log for its starts.
        pass


print("serving on", sys.argv[1], flush=True)
http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), Answer).serve_forever()
