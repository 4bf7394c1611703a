"""Persistence: one ``Store`` protocol and its adapters."""
