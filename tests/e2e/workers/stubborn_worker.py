"""A worker that ignores SIGTERM and never calls in: a graceful stop waits out its whole grace
(like a model load that blocks signals), so only a forced stop ends it sooner."""

import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("up, ignoring SIGTERM", flush=True)
time.sleep(600)
