"""Ready-made models that skiff can publish as public model endpoints
(``skiff models enable``). They run inside worker processes, never in the server: nothing
here imports the rest of skiff, and their runtimes are the optional ``models`` extra."""
