"""Downloading a manifest's URLs without reaching the server's own network, and URLs kept without secrets.

Every connection, the first and each redirect's, is made by GuardedBackend: it resolves the host itself, keeps
only public addresses (or those the operator allows in MAD_IMPORT_ALLOWED_HOSTS) and connects to the address
it checked, so a name that resolves elsewhere a moment later (DNS rebinding) changes nothing. Reads and
writes on a connection end at the download's deadline, however slowly bytes trickle in. Label Studio's
SSRF protection (private networks refused by default) is the model; it checks a resolved address and then
lets the HTTP library resolve again, which this does not.
"""

import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpcore
import httpx

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

MAX_REDIRECTS = 5
NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")
"""RFC 8215's prefix for a network's own NAT64 translators: not globally reachable (IANA), and where in it an
IPv4 address sits depends on the prefix length the network chose, so none of it counts as public."""
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")
SIGNING_PREFIXES = ("x-amz-", "x-goog-")
"""Query parameters of AWS SigV4 and Google Cloud signed URLs (X-Amz-Signature, X-Goog-Credential…)."""
SECRET_WORDS = (
    "sig",
    "token",
    "secret",
    "passw",
    "credential",
    "auth",
    "key",
    "accessid",
    "policy",
    "expires",
)
"""A query parameter whose name holds one of these carries a secret or a signature (Signature, sig, token,
access_token, api_key, AWSAccessKeyId, GoogleAccessId, Key-Pair-Id, Policy, Expires…)."""
AZURE_SAS_PARAMETERS = frozenset({"sv", "ss", "srt", "sp", "se", "st", "spr", "sr", "si", "skoid", "sktid"})
"""The fields of an Azure shared-access signature besides `sig`: they only make sense beside it."""


def without_credentials(url: str) -> str:
    """The URL without its user:password@ part, its fragment and every query parameter that carries a
    credential or a signature (SIGNING_PREFIXES, SECRET_WORDS, AZURE_SAS_PARAMETERS); others are kept."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(name, value) for name, value in pairs if not _is_secret_parameter(name)]
    query = parts.query if len(kept) == len(pairs) else urlencode(kept)
    return urlunsplit((parts.scheme, parts.netloc.rpartition("@")[2], parts.path, query, ""))


def _is_secret_parameter(name: str) -> bool:
    """Whether a query parameter's name marks a credential or a signature."""
    lowered = name.lower()
    return (
        lowered.startswith(SIGNING_PREFIXES)
        or any(word in lowered for word in SECRET_WORDS)
        or lowered in AZURE_SAS_PARAMETERS
    )


@dataclass(frozen=True)
class AddressPolicy:
    """Which addresses downloads may connect to: public ones, and those the operator allows by host name
    or by network."""

    allowed_names: frozenset[str]
    allowed_networks: tuple[Network, ...]

    @classmethod
    def allowing(cls, entries: Iterable[str]) -> "AddressPolicy":
        """The policy for MAD_IMPORT_ALLOWED_HOSTS: each entry an address, a network or a host name."""
        names, networks = set(), []
        for entry in entries:
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                names.add(entry.lower().rstrip("."))
        return cls(frozenset(names), tuple(networks))

    def permits(self, host: str, address: Address) -> bool:
        """Whether a connection to host may go to this address: a public one, or one the operator allows."""
        if host.lower().rstrip(".") in self.allowed_names:
            return True
        if any(address in network for network in self.allowed_networks):
            return True
        return is_public(address)


def is_public(address: Address) -> bool:
    """Whether an address is globally reachable unicast: not loopback, private, link-local (169.254.0.0/16,
    where clouds answer metadata requests), shared (100.64.0.0/10), multicast, reserved or unspecified, nor
    an IPv6 address carrying such an IPv4 one (embedded_ipv4), nor in the local-use NAT64 prefix."""
    if address.is_multicast or not address.is_global:
        return False
    if isinstance(address, ipaddress.IPv6Address):
        if address in NAT64_LOCAL_USE:
            return False
        return all(inner is None or is_public(inner) for inner in embedded_ipv4(address))
    return True


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address | None]:
    """The IPv4 addresses an IPv6 address may lead to: IPv4-mapped (::ffff:a.b.c.d), 6to4 (2002::/16),
    Teredo's server and client (2001::/32), and the last 32 bits of NAT64's well-known prefix (64:ff9b::/96,
    RFC 6052, whose translator connects there) and of the deprecated IPv4-compatible form (::a.b.c.d, RFC 4291
    2.5.5.1)."""
    last_32_bits = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    translated = address in NAT64_WELL_KNOWN or address in IPV4_COMPATIBLE
    return [
        address.ipv4_mapped,
        address.sixtofour,
        *(address.teredo or ()),
        last_32_bits if translated else None,
    ]


class DownloadRefused(httpcore.ConnectError):
    """No address of the host may be connected to; said to the user like any other failed connection."""


_deadline = threading.local()


@contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Every connection, read and write of this thread's download must end within `seconds` from now."""
    _deadline.at = time.monotonic() + seconds
    try:
        yield
    finally:
        _deadline.at = None


def _within_deadline(timeout: float | None) -> float | None:
    """The timeout cut to what is left of the thread's deadline; ReadTimeout once it has passed."""
    at = getattr(_deadline, "at", None)
    if at is None:
        return timeout
    left = at - time.monotonic()
    if left <= 0:
        raise httpcore.ReadTimeout("the download's deadline has passed")
    return left if timeout is None else min(timeout, left)


class DeadlineStream(httpcore.NetworkStream):
    """A connection whose every operation ends by the deadline of the thread using it."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self.stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.stream.read(max_bytes, _within_deadline(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, _within_deadline(timeout))

    def close(self) -> None:
        self.stream.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return DeadlineStream(self.stream.start_tls(ssl_context, server_hostname, _within_deadline(timeout)))

    def get_extra_info(self, info: str) -> Any:
        return self.stream.get_extra_info(info)


class GuardedBackend(httpcore.NetworkBackend):
    """Connections only to addresses the policy permits, resolved here and connected to as checked."""

    def __init__(self, policy: AddressPolicy) -> None:
        self.policy = policy
        self.backend = httpcore.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        """A connection to the first permitted address of host; DownloadRefused when none is permitted."""
        timeout = _within_deadline(timeout)
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as error:
            raise httpcore.ConnectError(f"cannot resolve {host}") from error
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in found]
        permitted = list(dict.fromkeys(a for a in addresses if self.policy.permits(host, a)))
        if not permitted:
            raise DownloadRefused(f"{host} has no address that imports may reach")
        last_error: Exception | None = None
        for address in permitted:
            try:
                stream = self.backend.connect_tcp(
                    str(address), port, _within_deadline(timeout), local_address, socket_options
                )
            except httpcore.ConnectError as error:
                last_error = error
                continue
            return DeadlineStream(stream)
        raise httpcore.ConnectError(f"cannot connect to {host}") from last_error

    def sleep(self, seconds: float) -> None:
        self.backend.sleep(seconds)


class GuardedTransport(httpx.HTTPTransport):
    """httpx's transport over GuardedBackend: no proxy from the environment (a proxy would connect for
    us, past the check), certificates verified against the URL's host name."""

    def __init__(self, policy: AddressPolicy) -> None:
        super().__init__(trust_env=False)
        # HTTPTransport takes no network backend, so its connection pool is made again with one.
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False), network_backend=GuardedBackend(policy)
        )


def guarded_client(policy: AddressPolicy, deadline_s: float) -> httpx.Client:
    """An HTTP client for manifest URLs: guarded connections, at most MAX_REDIRECTS redirects (each one
    checked), and no single operation longer than the deadline."""
    return httpx.Client(
        transport=GuardedTransport(policy),
        follow_redirects=True,
        max_redirects=MAX_REDIRECTS,
        timeout=httpx.Timeout(deadline_s),
        trust_env=False,
    )
