"""Coordination of the ``skiff serve`` replicas sharing one database: wake-ups, leadership and
liveness. ``LocalCluster`` for one replica (SQLite), ``PostgresCluster`` for several."""

from __future__ import annotations

from skiff.cluster.base import Cluster, ClusterUnavailable
from skiff.cluster.local import LocalCluster
from skiff.cluster.postgres import PostgresCluster

__all__ = ["Cluster", "ClusterUnavailable", "LocalCluster", "PostgresCluster"]
