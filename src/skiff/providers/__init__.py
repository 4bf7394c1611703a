"""Where workers run: ``local`` (processes on this host), more to follow."""
