"""A local Ray cluster for the Ray backend's tests: its own temp folder and a free GCS port (so that
it cannot meet another Ray on this machine, another checkout's tests included), small nodes, and
the repository on the workers' path."""

from __future__ import annotations

import os
import socket
import tempfile
from typing import Any

from tests.jobkit import ROOT

NODE = {"num_cpus": 2, "object_store_memory": 80 << 20}


def start_cluster() -> Any:
    """A head node and one more, this process their driver; RAY_ADDRESS names it for others."""
    # A short folder of its own: Ray's socket paths must stay short, and Ray writes its address
    # file there, not in its default temp folder
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix="e3d-ray-")
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    from ray.cluster_utils import Cluster

    head = {**NODE, "gcs_server_port": _free_port(), "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    os.environ["RAY_ADDRESS"] = cluster.address
    return cluster


def _free_port() -> int:
    """A TCP port of 127.0.0.1 free now (the OS's choice)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
