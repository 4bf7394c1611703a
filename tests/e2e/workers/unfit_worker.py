"""A runpod-SDK worker whose start-up check fails (``register_fitness_check``): the SDK reports
the failing check and its reason on a ping, then exits."""

import runpod


@runpod.serverless.register_fitness_check
def model_files_present() -> None:
    raise RuntimeError("model file /models/weights.safetensors not found")


def handler(job):  # type: ignore[no-untyped-def]
    return job["input"]


runpod.serverless.start({"handler": handler})
