"""B8's load-balancing worker: its own HTTP server, as users write them for the hosted
platform's load-balancing endpoints. FastAPI on uvicorn, listening on ``PORT``; ``GET /ping``
answers 200 (ready at once); ``POST /generate`` answers a small JSON body echoing the prompt,
the cheapest request a real worker could serve, so that what is measured is the path to it.

It prints ``BENCH lb listening on PORT`` once it is up, which is how B8 finds its port.
"""

from __future__ import annotations

import os
import threading

import uvicorn
from fastapi import FastAPI, Request, Response

PORT = int(os.environ["PORT"])
PORT_HEALTH = int(os.environ.get("PORT_HEALTH", PORT))

app = FastAPI()
health = app if PORT_HEALTH == PORT else FastAPI()


@health.get("/ping")
async def ping() -> Response:
    return Response(content='{"status":"healthy"}', media_type="application/json")


@app.post("/generate")
async def generate(request: Request) -> dict[str, object]:
    body = await request.json()
    return {"output": body.get("input", {}).get("prompt"), "worker": os.environ.get("PORT")}


def main() -> None:
    if health is not app:
        config = uvicorn.Config(health, host="127.0.0.1", port=PORT_HEALTH, log_level="warning")
        threading.Thread(target=uvicorn.Server(config).run, daemon=True).start()
    print(f"BENCH lb listening on {PORT}", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=PORT, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
