"""A port is free only when a plain bind (no SO_REUSEPORT) succeeds; errors name the variable."""

from __future__ import annotations

import socket

import pytest

from servicekit.ports import PortTaken, check_free


def test_a_port_held_by_a_listener_is_taken_and_the_error_names_the_variable() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        with pytest.raises(PortTaken, match=f"RATION_BUDGET_LISTEN=127.0.0.1:{port} cannot"):
            check_free("RATION_BUDGET_LISTEN", "127.0.0.1", port)


def test_a_listener_that_allows_port_sharing_still_counts_as_taken() -> None:
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        with pytest.raises(PortTaken):
            check_free("RATION_MEMORY_LISTEN", "127.0.0.1", sock.getsockname()[1])


def test_a_closed_port_and_port_zero_are_free() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    check_free("RATION_BUDGET_LISTEN", "127.0.0.1", port)
    check_free("RATION_BUDGET_LISTEN", "127.0.0.1", 0)
