"""Local socket checks shared by the embedded bus and the HTTP services: whether a host is this machine's
loopback only, and whether a port is free (one clear line when it is not)."""

from __future__ import annotations

import ipaddress
import socket

from voltbus.schemas.errors import BusStartFailed


def is_loopback(host: str) -> bool:
    """Whether ``host`` names this machine's loopback only (a name: every address it resolves to).

    >>> [is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "0.0.0.0", "")]
    [True, True, True, False, False]
    """
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    if not host:
        return False
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def check_port(host: str, port: int, what: str) -> None:
    """Fail with one line when ``host:port`` is already taken (port 0 or -1: any free port)."""
    if port <= 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise BusStartFailed(
                f"{what} port {host}:{port} is in use ({exc.strerror}); pass another with --port/--monitor-port "
                f"or stop the process holding it"
            ) from None
