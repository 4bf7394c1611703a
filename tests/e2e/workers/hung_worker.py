"""A worker that never calls in: its start-up hangs (like a model load that never ends), so it
never asks for a job or pings."""

import time

time.sleep(600)
