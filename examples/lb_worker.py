"""A load-balancing worker as the hosted platform expects one: its own HTTP server (FastAPI
here) on ``PORT``, and ``GET /ping`` on ``PORT_HEALTH`` answering 200 once it is ready (204
while it is still loading). Nothing in it knows about skiff."""

import os
import threading
import time

import uvicorn
from fastapi import FastAPI, Response

PORT = int(os.environ.get("PORT", "80"))
PORT_HEALTH = int(os.environ.get("PORT_HEALTH", PORT))

app = FastAPI()
health = app if PORT_HEALTH == PORT else FastAPI()
ready = threading.Event()


@health.get("/ping")
def ping() -> Response:
    return Response(status_code=200 if ready.is_set() else 204)


@app.post("/generate")
def generate(body: dict) -> dict:
    prompt = str(body.get("prompt", ""))
    return {"text": prompt[::-1], "worker": os.environ.get("RUNPOD_POD_ID", "local")}


def load_model() -> None:
    time.sleep(1)  # stands in for loading weights: /ping says 204 until it is done
    ready.set()


if __name__ == "__main__":
    threading.Thread(target=load_model, daemon=True).start()
    if health is not app:
        config = uvicorn.Config(health, host="0.0.0.0", port=PORT_HEALTH, log_level="warning")
        threading.Thread(target=uvicorn.Server(config).run, daemon=True).start()
    uvicorn.run(app, host="0.0.0.0", port=PORT, log_level="warning")
