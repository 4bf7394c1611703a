"""The behaviour: job lifecycle, workers, scaling, reaping. Pure decisions live in ``domain``."""
