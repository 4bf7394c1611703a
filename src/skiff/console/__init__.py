"""The web console, served at ``/console``: server-rendered pages over the same services as
``/v1`` and ``/v2``, signed in with an API key (``mount`` is what the composition root routes).
"""

from skiff.console.app import build, mount

__all__ = ["build", "mount"]
