"""A worker that dies at start, every time (a missing model file, say)."""

import sys

print("loading model weights from /models/missing.safetensors", flush=True)
print("FileNotFoundError: /models/missing.safetensors", file=sys.stderr, flush=True)
sys.exit(3)
