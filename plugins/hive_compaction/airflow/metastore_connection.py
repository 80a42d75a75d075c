"""The Thrift connection under the Metastore hook (``metastore_hook.Metastore``): addresses,
timeouts, SASL, fail-over between Metastores, and what a failed call means.

Several Metastores may be given, as in ``hive.metastore.uris`` (``hms1,hms2:9084``): they are
tried in order when connecting. SASL (``GSSAPI`` for Kerberos, ``PLAIN``) goes through
``thrift_sasl`` and ``pure-sasl``; GSSAPI also needs the ``kerberos`` module and a ticket
(``kinit``, or Airflow's ticket renewer).
"""

from __future__ import annotations

import errno
import getpass
import logging
import struct

from hmsclient import hmsclient
from thrift.protocol import TBinaryProtocol, TProtocol
from thrift.transport import TSocket, TTransport

log = logging.getLogger(__name__)

DEFAULT_PORT = 9083
AUTH_MECHANISMS = ("NOSASL", "PLAIN", "GSSAPI")


class MetastoreUnavailable(RuntimeError):
    """The Metastore could not be reached; nothing was changed."""


def parse_hosts(hosts: str, default_port: int = DEFAULT_PORT) -> list[tuple[str, int]]:
    """``"hms1,hms2:9084"`` or ``"thrift://hms1:9083,thrift://hms2:9083"`` (the form of
    ``hive.metastore.uris``) -> [(host, port), ...] in the order given; a host without a port gets
    ``default_port``. IPv6 addresses with a port go in brackets: ``[::1]:9083``."""
    out = []
    for item in str(hosts).split(","):
        item = item.strip()
        if not item:
            continue
        item = item.split("://", 1)[-1].rstrip("/")
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else ""
        elif item.count(":") == 1:
            host, port = item.split(":")
        else:  # a bare name, or a bare IPv6 address
            host, port = item, ""
        try:
            number = int(port) if port else int(default_port)
        except (TypeError, ValueError):
            raise ValueError(f"bad port in Hive Metastore address {item!r}") from None
        if not host or not 0 < number < 65536:
            raise ValueError(f"bad Hive Metastore address {item!r}")
        out.append((host, number))
    if not out:
        raise ValueError(f"no Hive Metastore host in {hosts!r}")
    return out


def format_address(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _PureSaslClient:
    """The ``sasl.Client`` interface that thrift_sasl drives, on top of pure-sasl."""

    def __init__(self, host: str, service: str, mechanism: str, **props):
        from puresasl.client import SASLClient

        self._sasl = SASLClient(host, service=service, mechanism=mechanism, **props)
        self._error = ""

    def _run(self, fn, *args):
        try:
            return True, fn(*args)
        except Exception as e:  # noqa: BLE001 - reported through getError, as sasl.Client does
            self._error = f"{type(e).__name__}: {e}"
            return False, None

    def start(self, mechanism: str):
        ok, response = self._run(self._sasl.process)
        return ok, mechanism, response

    def step(self, challenge):
        return self._run(self._sasl.process, challenge)

    def encode(self, data):
        return self._run(self._sasl.wrap, data)

    def decode(self, data):
        return self._run(self._sasl.unwrap, data)

    def getError(self) -> str:
        return self._error


def _is_closed_by_peer(e: Exception) -> bool:
    """The other end closed the connection: end of file, or a reset (Linux reports a close with
    unread data in the peer's buffer as ECONNRESET)."""
    if isinstance(e, TTransport.TTransportException) and e.type == TTransport.TTransportException.END_OF_FILE:
        return True
    inner = getattr(e, "inner", None) if isinstance(e, TTransport.TTransportException) else e
    return isinstance(inner, OSError) and inner.errno in (errno.ECONNRESET, errno.EPIPE)


# Thrift's SASL negotiation frames start with a status byte: START, OK, BAD, ERROR, COMPLETE.
_SASL_STATUSES = {1: "START", 2: "OK", 3: "BAD", 4: "ERROR", 5: "COMPLETE"}


class _RecordingSocket(TSocket.TSocket):
    """A TSocket that keeps the first bytes it receives, to tell what answered the first call."""

    first_bytes = b""

    def read(self, sz):
        buff = super().read(sz)
        if len(self.first_bytes) < 256:
            self.first_bytes += buff[: 256 - len(self.first_bytes)]
        return buff


def _sasl_frame(data: bytes) -> str | None:
    """``ERROR "Invalid status -128"`` when ``data`` starts with a SASL negotiation frame (what a
    SASL Metastore sends back to a binary call before it closes the connection), else None.
    A binary protocol reply starts with 0x80 instead."""
    if len(data) < 5 or data[0] not in _SASL_STATUSES:
        return None
    length = struct.unpack(">I", data[1:5])[0]
    return f"{_SASL_STATUSES[data[0]]} {data[5 : 5 + min(length, 200)].decode('utf-8', 'replace')!r}"


def _check_sasl_modules(mechanism: str) -> None:
    missing = []
    for module, package in (("thrift_sasl", "thrift_sasl"), ("puresasl", "pure-sasl")) + (
        (("kerberos", "kerberos (it builds against libkrb5-dev)"),) if mechanism == "GSSAPI" else ()
    ):
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    if missing:
        raise ImportError(
            f"auth_mechanism {mechanism} needs the Python package(s) {', '.join(missing)}: "
            "pip install them where the Airflow tasks run"
        )


class MetastoreConnection:
    """One Thrift connection at a time to the first Metastore of ``host`` that answers.

    ``host`` may list several Metastores (``"hms1,hms2:9084"``), each without a port of its own
    on ``port``. ``auth_mechanism`` is ``NOSASL`` (the plain binary protocol), ``GSSAPI``
    (Kerberos: the service principal is ``<kerberos_service_name>/<host>``) or ``PLAIN``
    (``username``/``password``). Every failure to reach it is MetastoreUnavailable."""

    def __init__(
        self,
        host: str,
        port: int = DEFAULT_PORT,
        timeout_seconds: float = 60.0,
        *,
        auth_mechanism: str = "NOSASL",
        kerberos_service_name: str = "hive",
        username: str | None = None,
        password: str | None = None,
        connect_timeout_seconds: float | None = None,
    ):
        self.addresses = parse_hosts(host, port)
        self.address = format_address(self.addresses[0])  # the one connected to, once connected
        self.calls = 0
        self.timeout_seconds = float(timeout_seconds)
        self.connect_timeout_seconds = float(
            min(timeout_seconds, 10.0) if connect_timeout_seconds is None else connect_timeout_seconds
        )
        self.auth_mechanism = (auth_mechanism or "NOSASL").upper()
        if self.auth_mechanism not in AUTH_MECHANISMS:
            raise ValueError(f"auth_mechanism {auth_mechanism!r} is not one of {', '.join(AUTH_MECHANISMS)}")
        # "hive", or a principal as hive.metastore.kerberos.principal gives it ("hive/_HOST@REALM"):
        # the host part is always the Metastore being connected to.
        self.kerberos_service_name = (kerberos_service_name or "hive").split("/", 1)[0].split("@", 1)[0]
        self.username, self.password = username, password
        if self.auth_mechanism != "NOSASL":
            _check_sasl_modules(self.auth_mechanism)
        self._transport = self._socket = None
        self.client = None  # the hmsclient of the open connection
        self._answered = False  # a call on this connection has been answered

    @property
    def uris(self) -> str:
        """The addresses as ``hive.metastore.uris`` writes them (for a Spark without hive-site.xml)."""
        return ",".join(f"thrift://{format_address(a)}" for a in self.addresses)

    def open(self) -> None:
        """Connects to the first Metastore that answers, in the order given."""
        failures = []
        for i, address in enumerate(self.addresses):
            try:
                transport, socket = self._open(*address)
            except (TTransport.TTransportException, OSError) as e:
                failures.append(f"thrift://{format_address(address)}: {e}")
                if len(self.addresses) > 1:
                    log.warning(
                        "Hive Metastore at thrift://%s failed to connect (%s)%s",
                        format_address(address),
                        e,
                        "; trying the next" if i + 1 < len(self.addresses) else "",
                    )
                continue
            self._transport, self._socket, self.address = transport, socket, format_address(address)
            self._answered = False
            self.client = hmsclient.HMSClient(iprot=TBinaryProtocol.TBinaryProtocol(transport))
            if failures:
                log.info("connected to the Hive Metastore at thrift://%s", self.address)
            return
        where = failures[0] if len(failures) == 1 else "any of " + "; ".join(failures)
        raise MetastoreUnavailable(
            f"cannot reach the Hive Metastore at {where}. "
            "Check the Airflow connection's host and port (and auth_mechanism) and that the service is up."
        )

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
            self._transport = self._socket = self.client = None

    def _open(self, host: str, port: int):
        """An open transport to one Metastore (SASL negotiated when asked for), and its socket."""
        socket = _RecordingSocket(host, int(port))
        socket.setTimeout(int(self.connect_timeout_seconds * 1000))
        socket.open()
        socket.setTimeout(int(self.timeout_seconds * 1000))
        if self.auth_mechanism == "NOSASL":
            return TTransport.TBufferedTransport(socket), socket
        from thrift_sasl import TSaslClientTransport

        if self.auth_mechanism == "GSSAPI":
            props = {}
        else:
            props = {
                "username": self.username or getpass.getuser(),
                "password": self.password if self.password is not None else "unused",
            }
        transport = TSaslClientTransport(
            lambda: _PureSaslClient(host, self.kerberos_service_name, self.auth_mechanism, **props),
            self.auth_mechanism,
            socket,
        )
        try:
            transport.open()  # the socket is open: this negotiates SASL only
        except Exception as e:
            socket.close()
            if not isinstance(e, TTransport.TTransportException):
                raise
            raise TTransport.TTransportException(
                type=e.type, message=self._negotiation_failure(e, host), inner=e
            ) from e
        return transport, socket

    def _negotiation_failure(self, e: TTransport.TTransportException, host: str) -> str:
        """What a failed SASL negotiation most likely means, and what to check."""
        if _is_closed_by_peer(e) or e.type == TTransport.TTransportException.TIMED_OUT:
            return (
                f"SASL {self.auth_mechanism} negotiation got no answer ({e}): does this Metastore use "
                "SASL (hive.metastore.sasl.enabled)? If it does not, set auth_mechanism to NOSASL in the "
                "connection's extra"
            )
        if self.auth_mechanism == "GSSAPI":
            return (
                f"Kerberos (SASL GSSAPI) negotiation failed: {e}. The worker needs a Kerberos ticket "
                "(kinit, or Airflow's `airflow kerberos` ticket renewer) and the Metastore's service "
                f"principal must be {self.kerberos_service_name}/{host} (kerberos_service_name in the "
                "connection's extra)"
            )
        return f"SASL {self.auth_mechanism} negotiation failed: {e} (check the connection's login and password)"

    def call(self, method: str, *args):
        """``client.method(*args)``; a transport failure is MetastoreUnavailable, saying so when it
        looks like a SASL Metastore refusing a client without SASL."""
        if self.client is None:
            raise MetastoreUnavailable("not connected to the Hive Metastore: use `with Metastore(...) as hms:`")
        self.calls += 1
        try:
            result = getattr(self.client, method)(*args)
        except (TTransport.TTransportException, TProtocol.TProtocolException, OSError) as e:
            sasl = _sasl_frame(getattr(self._socket, "first_bytes", b""))
            if not self._answered and self.auth_mechanism == "NOSASL" and (sasl or _is_closed_by_peer(e)):
                said = f", after a SASL negotiation frame {sasl}" if sasl else ""
                raise MetastoreUnavailable(
                    f"the Hive Metastore at thrift://{self.address} closed the connection at the first call "
                    f"({method}) without a Thrift answer ({e}{said}). That is what a Metastore with "
                    'hive.metastore.sasl.enabled=true does to a client without SASL: set "auth_mechanism" in '
                    'the Airflow connection\'s extra ("GSSAPI" for Kerberos, with "kerberos_service_name" when '
                    "the service principal is not hive/<host>)."
                ) from e
            if isinstance(e, TProtocol.TProtocolException):
                raise
            raise MetastoreUnavailable(f"Hive Metastore at thrift://{self.address} failed during {method}: {e}") from e
        self._answered = True
        return result
