"""A load-balancing worker as users write them for the hosted platform: its own FastAPI server
on ``PORT``, ``GET /ping`` on ``PORT_HEALTH`` (200 ready, 204 still initializing).

``LB_WARMUP_FILE``: while that file does not exist, ``/ping`` answers 204 (the model is still
"loading"); tests create it to let traffic in.
"""

import asyncio
import hashlib
import os
import socket
import threading
from pathlib import Path

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse

PORT = int(os.environ["PORT"])
PORT_HEALTH = int(os.environ.get("PORT_HEALTH", PORT))
WORKER = os.environ.get("RUNPOD_POD_ID", socket.gethostname())
WARMUP = os.environ.get("LB_WARMUP_FILE")

app = FastAPI()
health = app if PORT_HEALTH == PORT else FastAPI()
served = 0


@health.get("/ping")
def ping() -> Response:  # sync: FastAPI runs it in a thread, the file check may block
    if WARMUP and not Path(WARMUP).exists():
        return Response(status_code=204)
    return Response(content='{"status":"healthy"}', media_type="application/json")


@app.post("/generate")
async def generate(request: Request) -> dict[str, object]:
    global served
    body = await request.json()
    await asyncio.sleep(float(body.get("sleep", 0)))
    served += 1
    return {
        "worker": WORKER,
        "port": PORT,
        "prompt": body.get("prompt"),
        "served": served,
        "authorization": request.headers.get("authorization"),
        "forwarded_prefix": request.headers.get("x-forwarded-prefix"),
        "query": str(request.url.query),
    }


@app.api_route("/echo/{rest:path}", methods=["GET", "POST", "PUT"])
async def echo(request: Request) -> dict[str, object]:
    """What reached the worker: the request line and headers as sent, and the body's bytes."""
    body = await request.body()
    return {
        "method": request.method,
        "raw_path": request.scope["raw_path"].decode("latin-1"),
        "query": request.scope["query_string"].decode("latin-1"),
        "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in request.headers.raw],
        "body_length": len(body),
        "body_sha": hashlib.sha256(body).hexdigest(),
        # What tells skiff's proxy apart (its requests carry it in X-Skiff-Lb-Key).
        "lb_key": os.environ.get("SKIFF_LB_KEY"),
    }


@app.get("/stream")
async def stream(n: int = 5, pause: float = 0.3) -> StreamingResponse:
    async def events():  # type: ignore[no-untyped-def]
        for i in range(n):
            yield f"data: {i}\n\n"
            await asyncio.sleep(pause)

    return StreamingResponse(events(), media_type="text/event-stream")


@app.get("/cookies")
async def cookies() -> Response:
    response = Response("ok")
    response.set_cookie("a", "1")
    response.set_cookie("b", "2")
    return response


@app.get("/big-header")
async def big_header(size: int) -> Response:
    return Response("ok", headers={"x-big": "b" * size})


@app.get("/teapot")
async def teapot() -> Response:
    return Response("short and stout", status_code=418)


def main() -> None:
    if health is not app:
        config = uvicorn.Config(health, host="0.0.0.0", port=PORT_HEALTH, log_level="warning")
        threading.Thread(target=uvicorn.Server(config).run, daemon=True).start()
    print(f"lb worker {WORKER} listening on {PORT} (health {PORT_HEALTH})", flush=True)
    uvicorn.run(app, host="0.0.0.0", port=PORT, log_level="warning")


if __name__ == "__main__":
    main()
