"""An OpenAI-style runpod worker (as vLLM workers are): the input names the route and carries
the request; with "stream": true it yields server-sent-event lines.

For the tests: the model "fail" raises (a worker error), "big" streams one 2 MB event, "slow"
streams ``events`` events a tenth of a second apart, appending a line to its "record" file before
each, and any other request naming a "record" file appends its job id there (how many times a
request ran)."""

import json
import time

import runpod

BIG = 2 * 1024 * 1024


def handler(job):
    route = job["input"]["openai_route"]
    request = job["input"].get("openai_input") or {}
    if request.get("model") == "slow":
        for i in range(request["events"]):
            with open(request["record"], "a") as record:
                record.write(f"{i}\n")
            time.sleep(0.1)
            chunk = {"choices": [{"index": 0, "delta": {"content": str(i)}}]}
            yield f"data: {json.dumps(chunk)}\n\n"
        return
    if request.get("record"):
        with open(request["record"], "a") as record:
            record.write(job["id"] + "\n")
    if route == "/v1/models":
        yield {"object": "list", "data": [{"id": "echo-1", "object": "model", "owned_by": "me"}]}
        return
    if route.startswith("/v1/models/"):
        name = route.removeprefix("/v1/models/")
        yield {"id": name, "object": "model", "created": 0, "owned_by": "me"}
        return
    if route == "/v1/embeddings":
        texts = request["input"] if isinstance(request["input"], list) else [request["input"]]
        yield {
            "object": "list",
            "model": request.get("model"),
            "data": [
                {"object": "embedding", "index": i, "embedding": [float(len(t)), 0.5]}
                for i, t in enumerate(texts)
            ],
            "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)},
        }
        return
    if request.get("model") == "fail":
        raise RuntimeError("the model ran out of GPU memory")
    text = " ".join(m["content"] for m in request.get("messages", [])) or request.get("prompt", "")
    if request.get("model") == "big":
        text = "x" * BIG
    if request.get("stream"):
        words = [text] if request.get("model") == "big" else text.split()
        for word in words:
            if route == "/v1/completions":
                choice = {"index": 0, "text": word, "finish_reason": None}
                kind = "text_completion"
            else:
                choice = {"index": 0, "delta": {"content": word}, "finish_reason": None}
                kind = "chat.completion.chunk"
            chunk = {
                "id": "c1",
                "object": kind,
                "created": 0,
                "model": request.get("model"),
                "choices": [choice],
            }
            yield f"data: {json.dumps(chunk)}\n\n"
        yield "data: [DONE]\n\n"
        return
    if route == "/v1/completions":
        yield {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 0,
            "model": request.get("model"),
            "choices": [{"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}],
        }
        return
    yield {
        "id": "chat-1",
        "object": "chat.completion",
        "created": 0,
        "model": request.get("model"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
    }


runpod.serverless.start({"handler": handler, "return_aggregate_stream": True})
