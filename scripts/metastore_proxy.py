"""A TCP proxy in front of the tests' Hive Metastore that injects the Metastore's faults from
outside the job: the merge job under test is pointed at the proxy
(``spark.hadoop.hive.metastore.uris``), everything else talks to the Metastore itself.

Faults, asked for on the proxy's control port (one line, answered "ok" when the fault is over),
e.g. by ``scripts/adversaries.py``'s ``metastore`` action:

- ``hang``: no byte passes either way (a Metastore, or the network to it, that stops answering:
  the job's calls, its lock heartbeats included, hang) until ``resume``, when everything that
  waited goes through;
- ``restart <seconds>``: every open connection is cut and new ones are refused for that long, as
  a Metastore process restarting looks to its clients (its state is in its database, so locks
  and partitions survive it, as they do a real restart).
"""

from __future__ import annotations

import socket
import threading
import time


class MetastoreProxy:
    def __init__(self, target_port: int, host: str = "127.0.0.1"):
        self.target = (host, target_port)
        self._listener = _listen(host)
        self._control = _listen(host)
        self.port, self.control_port = self._listener.getsockname()[1], self._control.getsockname()[1]
        self._open = threading.Event()  # set: bytes flow
        self._open.set()
        self._refuse_until = 0.0
        self._sockets: set[socket.socket] = set()
        self._guard = threading.Lock()
        self.faults: list[str] = []  # what was injected, in order
        self._stopped = False

    def start(self) -> MetastoreProxy:
        for target in (self._accept, self._serve_control):
            threading.Thread(target=target, daemon=True, name=f"metastore-proxy-{target.__name__}").start()
        return self

    def stop(self) -> None:
        self._stopped = True
        self._open.set()
        for s in (self._listener, self._control):
            s.close()
        self._cut_all()

    @property
    def uris(self) -> str:
        return f"thrift://127.0.0.1:{self.port}"

    def hang(self, _seconds: float = 0) -> None:
        self.faults.append("hang")
        self._open.clear()

    def resume(self, _seconds: float = 0) -> None:
        self.faults.append("resume")
        self._open.set()

    def restart(self, seconds: float) -> None:
        self.faults.append(f"restart {seconds}")
        self._refuse_until = time.monotonic() + seconds
        self._cut_all()
        time.sleep(seconds)

    def _cut_all(self) -> None:
        with self._guard:
            sockets, self._sockets = self._sockets, set()
        for s in sockets:
            _shut(s)
            s.close()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if time.monotonic() < self._refuse_until:
                client.close()  # the Metastore is down: the client's connect fails at its first read
                continue
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()
                continue
            with self._guard:
                self._sockets |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(65536)
                if not data:
                    break
                self._open.wait()
                sink.sendall(data)
        except OSError:
            pass
        for s in (source, sink):
            _shut(s)

    def _serve_control(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self._control.accept()
            except OSError:
                return
            with conn:
                fault, seconds = conn.makefile().readline().split()
                {"hang": self.hang, "resume": self.resume, "restart": self.restart}[fault](float(seconds))
                conn.sendall(b"ok\n")


def inject(control_port: int, fault: str, seconds: float = 0) -> None:
    """Ask the proxy on ``control_port`` for a fault and wait until it is over."""
    with socket.create_connection(("127.0.0.1", control_port), timeout=seconds + 60) as conn:
        conn.sendall(f"{fault} {seconds}\n".encode())
        if conn.makefile().readline().strip() != "ok":
            raise RuntimeError(f"the Metastore proxy did not inject {fault} {seconds}")


def _shut(s: socket.socket) -> None:
    """End both directions of a connection (its other side sees it closed)."""
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _listen(host: str) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, 0))
    s.listen(64)
    return s
