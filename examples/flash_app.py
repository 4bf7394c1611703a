"""A runpod-flash app as the hosted platform's Flash documentation writes one, unchanged: the
function is defined here and computed on a skiff worker, which installs ``humanize`` with pip
the first time (README, "Flash functions")."""

import asyncio

from runpod_flash import Endpoint


@Endpoint(name="hello", cpu="cpu3c-2-4", dependencies=["humanize"])
async def describe(n):
    import humanize

    return humanize.intword(n)


print(asyncio.run(describe(1234567)))  # "1.2 million", computed on a worker
