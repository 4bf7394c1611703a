"""An OpenAI-style runpod worker (as vLLM workers are): the input names the route and carries
the request; with "stream": true it yields server-sent-event lines."""

import json

import runpod


def handler(job):
    route = job["input"]["openai_route"]
    request = job["input"].get("openai_input", {})
    if route == "/v1/models":
        yield {"object": "list", "data": [{"id": "echo-1", "object": "model"}]}
        return
    text = " ".join(m["content"] for m in request.get("messages", [])) or request.get("prompt", "")
    if request.get("stream"):
        for word in text.split():
            delta = {"object": "chat.completion.chunk", "choices": [{"delta": {"content": word}}]}
            yield f"data: {json.dumps(delta)}\n\n"
        yield "data: [DONE]\n\n"
        return
    yield {
        "object": "chat.completion",
        "model": request.get("model"),
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
    }


runpod.serverless.start({"handler": handler, "return_aggregate_stream": True})
