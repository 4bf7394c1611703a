"""Where workers and pods run: ``local`` (processes on this host), ``docker`` (containers
through the Docker Engine API) and ``ray`` (actors on a Ray cluster); ``app.open_provider``
picks one from ``SKIFF_PROVIDER``."""
