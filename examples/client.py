"""The runpod SDK as a client of skiff: run with RUNPOD_ENDPOINT_BASE_URL=http://127.0.0.1:8000/v2."""

import os

import runpod

runpod.api_key = os.environ["SKIFF_KEY"]
hello = runpod.Endpoint(os.environ["ENDPOINT_ID"])

print(hello.run_sync({"name": "sdk"}))  # {'greeting': 'hello, sdk'}

job = hello.run({"name": "later", "seconds": 2})
print(job.status())  # IN_QUEUE or IN_PROGRESS
print(job.output(timeout=60))  # {'greeting': 'hello, later'}
print(job.status())  # COMPLETED

slow = hello.run({"seconds": 60})
print(slow.cancel())  # {'id': '...', 'status': 'CANCELLED'}

print(hello.health())  # {'jobs': {...}, 'workers': {...}}
print(hello.purge_queue())  # {'removed': 0, 'status': 'completed'}

words = runpod.Endpoint(os.environ["STREAM_ENDPOINT_ID"])
for chunk in words.run({"text": "one two three"}).stream():
    print(chunk)  # {'word': 'one'} ... {'word': 'three'}
