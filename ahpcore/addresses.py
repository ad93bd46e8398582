"""The addresses ``ahp serve`` tells clients to connect to."""

from __future__ import annotations

import contextlib
import ipaddress
import socket


def ws_url(host: str, port: int) -> str:
    return f"ws://[{host}]:{port}/" if ":" in host else f"ws://{host}:{port}/"


def connect_urls(host: str, port: int) -> list[str]:
    """The addresses a client can use: the bound one, or for a wildcard bind (0.0.0.0,
    ::) loopback first and then the machine's other addresses, which a client
    elsewhere needs; the wildcard itself is no address to connect to."""
    try:
        wildcard = ipaddress.ip_address(host).is_unspecified
    except ValueError:
        wildcard = False
    if not wildcard:
        return [ws_url(host, port)]
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    found = ["::1" if family == socket.AF_INET6 else "127.0.0.1"]
    for address in machine_addresses(family):
        if address not in found:
            found.append(address)
    return [ws_url(address, port) for address in found]


def machine_addresses(family: socket.AddressFamily) -> list[str]:
    """This machine's non-loopback addresses of ``family`` the standard library can find:
    those its host name resolves to, and the one its default route leaves from."""
    candidates: list[str] = []
    with contextlib.suppress(OSError, UnicodeError):
        for *_, sockaddr in socket.getaddrinfo(
            socket.gethostname(), None, family, socket.SOCK_STREAM
        ):
            candidates.append(str(sockaddr[0]))
    # Connecting a UDP socket only picks a route: nothing is sent to the
    # documentation address (RFC 5737, RFC 3849).
    with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as probe:
        probe.connect(("2001:db8::1" if family == socket.AF_INET6 else "192.0.2.1", 9))
        candidates.append(str(probe.getsockname()[0]))
    addresses: list[str] = []
    for candidate in candidates:
        try:
            ip = ipaddress.ip_address(candidate)
        except ValueError:  # a link-local IPv6 address with its %zone: not for a URL
            continue
        wanted = not (ip.is_loopback or ip.is_link_local or ip.is_unspecified)
        if wanted and str(ip) not in addresses:
            addresses.append(str(ip))
    return addresses
