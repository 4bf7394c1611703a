"""A runpod-SDK worker that uses its endpoint's network volume, as on the hosted cloud: at
``/runpod-volume``.

Input ``{"write": NAME, "text": TEXT}`` writes a file there; ``{"read": NAME}`` reads one back.
Each answer says whether ``/runpod-volume`` is a mount point (the volume, not a directory of
the host's).
"""

import os

import runpod

VOLUME = "/runpod-volume"


def handler(job):
    job_input = job["input"]
    answer = {"mounted": os.path.ismount(VOLUME)}
    if "write" in job_input:
        with open(os.path.join(VOLUME, job_input["write"]), "w") as f:
            f.write(job_input["text"])
        answer["written"] = job_input["write"]
    if "read" in job_input:
        with open(os.path.join(VOLUME, job_input["read"])) as f:
            answer["text"] = f.read()
    return answer


runpod.serverless.start({"handler": handler})
