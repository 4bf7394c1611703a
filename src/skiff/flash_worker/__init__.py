"""skiff's worker for runpod-flash endpoints (issue 35): the function protocol that
``runpod_flash`` sends, written from that protocol (``FunctionRequest`` in, ``FunctionResponse``
out), run by skiff in place of the hosted Flash images (``runpod/flash:…``,
``runpod/flash-cpu:…``).

A job's input is one request: a function's source and name (or a class's, a method name and an
instance id), its arguments as base64 cloudpickle (or plain JSON), the pip packages it needs and
local modules it imports. The worker installs the packages once per dependency set
(``dependencies.py``), defines the code once per source (``code.py``), calls it, and answers with
the result pickled the same way, the function's printed output, or the error with its type,
message and traceback.

A load-balanced Flash endpoint (``runpod/flash-lb``) gets the same calls over HTTP,
``POST /execute``, from ``lb.py``.

It stands alone: it imports only the standard library, ``cloudpickle`` and ``runpod`` (never the
rest of skiff) and only relatively, so that the same files run as ``python -m
skiff.flash_worker`` on the local provider and, copied into the Flash worker image
(``images/flash-worker``), as ``python -m skiff_flash_worker`` in a container.
"""
