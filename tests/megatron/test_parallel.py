"""rlec.megatron.parallel: the one-process world's rendezvous cannot collide on a port (issue 55 item 5)."""

from __future__ import annotations

import socket

import pytest


def test_a_one_process_world_starts_while_its_would_be_port_is_taken(monkeypatch) -> None:
    """``init_distributed`` without torchrun took a port "free a moment ago" for ``MASTER_PORT``; under load another
    process (tests/verl_plugin/test_router_replay.py's neighbour) took it first: ``DistNetworkError ... EADDRINUSE``.
    Here another listener holds the very port the environment names, and two groups are started one after the other
    on it (two processes at once met the same way): both start, since the store is in memory and no port is bound."""
    import torch

    from rlec.megatron.parallel import init_distributed

    if torch.distributed.is_initialized():
        pytest.fail("a default process group is already up in this test process")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for var in ("RANK", "LOCAL_RANK", "WORLD_SIZE"):
            monkeypatch.delenv(var, raising=False)
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        monkeypatch.setenv("MASTER_PORT", str(port))  # what a second group started at once would also have picked
        for _ in range(2):
            init_distributed(world_size=1, backend="gloo")
            try:
                assert torch.distributed.get_world_size() == 1 and torch.distributed.get_rank() == 0
                value = torch.tensor([3.0])
                torch.distributed.all_reduce(value)  # the group works, not just exists
                assert value.item() == 3.0
            finally:
                torch.distributed.destroy_process_group()
            monkeypatch.delenv("WORLD_SIZE")  # set by init_distributed: the second start is again without torchrun
