"""Free TCP ports on 127.0.0.1, so several testbeds (and test servers) run side by side."""

from __future__ import annotations

import contextlib
import socket

LOOPBACK = "127.0.0.1"


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free on 127.0.0.1 a moment ago.

    All sockets are held open until every port is chosen, so the ports differ from each other.
    Another process may still take one before our component binds it; a component that fails
    to bind fails the start with its log tail, and a retry picks new ports.
    """
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((LOOPBACK, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports
