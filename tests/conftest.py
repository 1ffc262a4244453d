"""Shared test set-up: one torch thread (2-core machines thrash with more)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """Every test runs torch on one thread: faster and steadier than two on a loaded 2-core box."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
