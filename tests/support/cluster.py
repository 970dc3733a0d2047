"""The test session's Valkey Cluster: 3 masters and 3 replicas on loopback with a password.

The start-up is the kit's (``echoq.teaching.cluster.start_cluster``, which Notebook 7 and the
cluster benches use too); it is imported when a cluster is first needed, so a library test
that runs on one server never loads the kit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from echoq.teaching.cluster import LocalCluster


def start_test_cluster() -> LocalCluster:
    from echoq.teaching.cluster import start_cluster

    return start_cluster(masters=3, replicas=1, replace=False)  # a test's own cluster leaves it up
