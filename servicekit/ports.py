"""Listening ports: a port another process holds is one line naming the variable to change."""

from __future__ import annotations

import errno
import socket

from servicekit.settings import ServerSettings, SettingsError

# Why a bind fails that the operator can fix by choosing another address.
_REFUSALS = {
    errno.EADDRINUSE: "already in use by another process",
    errno.EACCES: "not permitted for this user",
}


class PortTaken(SettingsError):
    """An address this process must listen on is held by another process (or forbidden)."""

    def __init__(self, variable: str, host: str, port: int, why: str) -> None:
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        super().__init__(
            f"{variable}={address} cannot be used: the address is {why}; "
            f"stop that process or set {variable} to a free host:port"
        )


def check_free(variable: str, host: str, port: int) -> None:
    """Binds a plain socket (SO_REUSEADDR like gRPC, never SO_REUSEPORT) to every address of
    host:port and closes it; PortTaken when one is held. Port 0 is always free."""
    if port == 0:
        return
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror:
        return  # gRPC or the HTTP server reports an unresolvable host in its own words
    for family, kind, proto, _, sockaddr in addresses:
        with socket.socket(family, kind, proto) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(sockaddr)
            except OSError as exc:
                if exc.errno in _REFUSALS:
                    raise PortTaken(variable, host, port, _REFUSALS[exc.errno]) from None


def listen_variables(service: str) -> tuple[str, str]:
    """The variables that set a service's gRPC and metrics addresses."""
    prefix = f"RATION_{service.upper()}"
    return f"{prefix}_LISTEN", f"{prefix}_METRICS_LISTEN"


def check_service_ports(service: str, settings: ServerSettings, *, grpc: bool = True) -> None:
    """The gRPC port (unless shared with this process's own workers) and the metrics port."""
    grpc_variable, metrics_variable = listen_variables(service)
    if grpc:
        check_free(grpc_variable, settings.host, settings.port)
    if settings.metrics_host is not None:
        check_free(metrics_variable, settings.metrics_host, settings.metrics_port)
