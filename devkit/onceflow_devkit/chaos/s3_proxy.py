"""An HTTP proxy in front of an S3 endpoint that fails a seeded share of requests.

Runs in the chaos harness's process: one thread per client connection. Every
onceflow S3 client of a chaos run (boto3 in Airflow tasks and Spark workers,
pyarrow's S3FileSystem) gets the proxy's URL as its endpoint; the harness's
own audit talks to the endpoint directly.

Per request, in arrival order::

    read the request line and headers
    decide      one draw from random.Random(seed): the fault kind (or none) and a delay
    s3_error_500      read the body, answer 500 InternalError (S3 XML)   not forwarded
    s3_slow_down_503  read the body, answer 503 SlowDown (S3 XML)        not forwarded
    s3_reset_before   read the body, reset the TCP connection (RST)      not forwarded
    s3_slow           sleep the drawn delay, then forward as below
    s3_reset_after    forward, read the endpoint's whole answer, then RST: the request
                      took effect but the client never learns it (a retried
                      ``If-None-Match: *`` PUT then gets 412)
    no fault          forward, stream the endpoint's answer back

Forwarding keeps the request's bytes: method, path and query, every
end-to-end header (``Host`` too: SigV4 signs it) and the body as sent, with
its chunked framing if any (the SDK's ``aws-chunked`` encoding travels inside
it untouched). Client connections are kept alive; each forwarded request uses
a fresh upstream connection, so a stale pooled connection can never make the
proxy resend a request that may already have taken effect.

The same seed gives the same sequence of decisions for the same order of
requests. With concurrent clients the order is the order in which requests
arrive, so a run is reproducible only as far as its request order is.
"""

from __future__ import annotations

import http.client
import logging
import random
import socket
import struct
import threading
import time
from dataclasses import astuple, dataclass, fields
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterator, NamedTuple
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

S3_FAULT_KINDS = ("s3_error_500", "s3_slow_down_503", "s3_reset_before", "s3_reset_after", "s3_slow")
REQUESTS = "requests"                # counts(): every request the proxy read
UPSTREAM_ERRORS = "upstream_errors"  # counts(): real failures to reach the endpoint (not injected)

_PIECE = 1 << 20
_UPSTREAM_TIMEOUT_S = 300.0
# Headers not copied as they are: hop-by-hop ones belong to one connection;
# Expect too, since the proxy has already answered "100 Continue" itself;
# Content-Length and Transfer-Encoding describe framing, which the proxy sets.
_NOT_COPIED = frozenset(
    ("connection", "keep-alive", "proxy-connection", "proxy-authenticate", "proxy-authorization",
     "te", "trailer", "upgrade", "expect", "transfer-encoding", "content-length")
)
_ERRORS = {
    "s3_error_500": (500, "Internal Server Error", "InternalError", "We encountered an internal error. Please try again."),
    "s3_slow_down_503": (503, "Slow Down", "SlowDown", "Please reduce your request rate."),
}


@dataclass(frozen=True)
class S3FaultRates:
    """The probability of each fault kind per request; the rest are forwarded untouched."""

    s3_error_500: float = 0.0
    s3_slow_down_503: float = 0.0
    s3_reset_before: float = 0.0
    s3_reset_after: float = 0.0
    s3_slow: float = 0.0

    def __post_init__(self) -> None:
        for f in fields(self):
            rate = getattr(self, f.name)
            if not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
                raise ValueError(f"S3FaultRates.{f.name}={rate!r}: a rate is a probability between 0 and 1")
        if sum(astuple(self)) > 1.0 + 1e-9:
            raise ValueError(
                f"S3FaultRates add up to {sum(astuple(self)):.3f}: each request gets at most one fault, "
                f"so the rates must add up to 1 or less ({self})"
            )

    def pick(self, draw: float) -> str | None:
        """The fault kind for a uniform ``draw`` in [0, 1), or None for no fault."""
        bound = 0.0
        for kind, rate in zip(S3_FAULT_KINDS, astuple(self)):
            bound += rate
            if draw < bound:
                return kind
        return None


class FaultEvent(NamedTuple):
    """One injected fault, for the failure report."""

    request: int   # 1-based number of the request, in arrival order
    method: str
    path: str      # path and query as the client sent them
    kind: str


class S3FaultProxy:
    """Seeded fault injection between S3 clients and one S3 endpoint (chaos harness process).

    ``rates`` may be replaced at any time, from any thread; it applies to the
    requests that arrive afterwards.
    """

    def __init__(
        self,
        upstream_url: str,
        seed: int,
        rates: S3FaultRates = S3FaultRates(),
        slow_s: tuple[float, float] = (0.5, 2.0),
        drop_headers: frozenset[str] = frozenset(),
    ):
        """``drop_headers``: request headers never forwarded (lower case), to play a
        store that ignores them, e.g. ``if-none-match`` (no conditional writes)."""
        parts = urlsplit(upstream_url)
        if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
            raise ValueError(
                f"S3FaultProxy upstream_url={upstream_url!r}: give the plain-HTTP endpoint as http://host:port "
                "(the proxy speaks HTTP only; it is meant for a local S3 server such as moto_server)"
            )
        low, high = slow_s
        if not 0.0 <= low <= high:
            raise ValueError(f"S3FaultProxy slow_s={slow_s!r}: give (minimum, maximum) seconds with 0 <= minimum <= maximum")
        self.upstream = (parts.hostname, parts.port or 80)
        self.drop_headers = frozenset(h.lower() for h in drop_headers)
        self.slow_s = (float(low), float(high))
        self._lock = threading.Lock()
        self._random = random.Random(seed)
        self._rates = self._checked(rates)
        self._counts = dict.fromkeys((*S3_FAULT_KINDS, REQUESTS, UPSTREAM_ERRORS), 0)
        self._events: list[FaultEvent] = []
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()

    @staticmethod
    def _checked(rates: S3FaultRates) -> S3FaultRates:
        if not isinstance(rates, S3FaultRates):
            raise TypeError(f"S3FaultProxy.rates must be an S3FaultRates, not {type(rates).__name__}")
        return rates

    # -- control (harness thread) -------------------------------------------
    @property
    def rates(self) -> S3FaultRates:
        with self._lock:
            return self._rates

    @rates.setter
    def rates(self, rates: S3FaultRates) -> None:
        rates = self._checked(rates)
        with self._lock:
            self._rates = rates

    def counts(self) -> dict[str, int]:
        """Injected faults by kind, plus ``requests`` (all read) and ``upstream_errors``."""
        with self._lock:
            return dict(self._counts)

    def events(self) -> list[FaultEvent]:
        """Every injected fault so far, in decision order."""
        with self._lock:
            return list(self._events)

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("S3FaultProxy is not started: call start() first")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> str:
        """Listen on a free port of 127.0.0.1; returns the endpoint URL for clients."""
        if self._server is not None:
            raise RuntimeError(f"S3FaultProxy is already running at {self.url}")
        # Port 0: the kernel picks a free port at bind time, no window for a race.
        server = _Server(("127.0.0.1", 0), _ProxyHandler)
        server.proxy = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name=f"s3-fault-proxy:{self.url}", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        """Stop listening and close every client connection. Idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        with self._lock:
            connections = list(self._connections)
        for conn in connections:  # wakes handler threads waiting on idle keep-alive connections
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> "S3FaultProxy":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- per request (handler threads) --------------------------------------
    def _decide(self, method: str, path: str) -> tuple[int, str | None, float]:
        """(request number, fault kind or None, slow delay) for the request arriving now."""
        with self._lock:
            # Always two draws, so the stream stays aligned whatever the rates.
            draw = self._random.random()
            delay = self._random.uniform(*self.slow_s)
            self._counts[REQUESTS] += 1
            number = self._counts[REQUESTS]
            kind = self._rates.pick(draw)
            if kind is not None:
                self._counts[kind] += 1
                self._events.append(FaultEvent(number, method, path, kind))
            return number, kind, delay

    def _count_upstream_error(self) -> None:
        with self._lock:
            self._counts[UPSTREAM_ERRORS] += 1

    def _track(self, conn: socket.socket, open_: bool) -> None:
        with self._lock:
            (self._connections.add if open_ else self._connections.discard)(conn)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # bursts of new pooled connections from Spark tasks and Airflow workers
    block_on_close = False  # stop() closes the connections instead of waiting for idle clients
    proxy: S3FaultProxy


class _ClientGone(Exception):
    """The client hung up or broke off while sending its request."""


class _UpstreamError(Exception):
    """The endpoint could not be reached or broke off (a real failure, not an injected one)."""


class _ProxyHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: boto3 and pyarrow pool connections
    disable_nagle_algorithm = True  # a head and a small body are two writes: no 40 ms delayed-ACK stall
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.server.proxy._track(self.connection, True)

    def finish(self) -> None:
        self.server.proxy._track(self.connection, False)
        super().finish()

    def log_message(self, format: str, *args) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _proxy(self) -> None:
        proxy = self.server.proxy
        number, kind, delay = proxy._decide(self.command, self.path)
        body = self._request_body()
        try:
            if kind in _ERRORS:
                _drain(body)
                self._answer_error(kind, number)
            elif kind == "s3_reset_before":
                _drain(body)
                self._reset()
            else:
                if kind == "s3_slow":
                    time.sleep(delay)
                self._forward(body, reset_after=kind == "s3_reset_after")
        except (_ClientGone, OSError) as exc:  # the client hung up: nobody is left to answer
            log.debug("S3 fault proxy: client of %s %s went away: %r", self.command, self.path, exc)
            self.close_connection = True

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_OPTIONS = do_PATCH = _proxy

    # -- request body: the bytes as sent, framing included ------------------
    def _request_body(self) -> Iterator[bytes]:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._chunked_body()
        length = int(self.headers.get("Content-Length") or 0)
        return self._sized_body(length)

    def _sized_body(self, length: int) -> Iterator[bytes]:
        while length > 0:
            piece = self._read(lambda: self.rfile.read(min(length, _PIECE)))
            if not piece:
                raise _ClientGone(f"closed the connection with {length} body bytes unsent")
            length -= len(piece)
            yield piece

    def _read(self, read) -> bytes:
        try:
            return read()
        except OSError as exc:
            raise _ClientGone(repr(exc)) from exc

    def _chunked_body(self) -> Iterator[bytes]:
        while True:
            line = self._read(lambda: self.rfile.readline(65537))
            if not line.endswith(b"\n"):
                raise _ClientGone("closed the connection inside a chunked body")
            yield line
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                break
            yield from self._sized_body(size + 2)  # data and its CRLF
        while True:  # trailers (aws-chunked checksums may travel here), then the empty line
            line = self._read(lambda: self.rfile.readline(65537))
            if not line.endswith(b"\n"):
                raise _ClientGone("closed the connection inside chunked trailers")
            yield line
            if line in (b"\r\n", b"\n"):
                return

    # -- answers -------------------------------------------------------------
    def _answer_error(self, kind: str, number: int) -> None:
        status, reason, code, message = _ERRORS[kind]
        request_id = f"onceflow-fault-{number}"
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>{code}</Code><Message>{message}</Message>"
            f"<Resource>{_xml_escape(self.path)}</Resource><RequestId>{request_id}</RequestId></Error>"
        ).encode()
        self.send_response(status, reason)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("x-amz-request-id", request_id)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _reset(self) -> None:
        """Abort the client connection with a TCP RST: SO_LINGER 0, then a real close."""
        self.close_connection = True
        sock = self.connection
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # rfile holds a reference to the socket; close() frees the descriptor only once it is gone.
        self.rfile.close()
        sock.close()

    def _forward(self, body: Iterator[bytes], reset_after: bool) -> None:
        try:
            upstream, response = self._send_upstream(body)
        except _UpstreamError as exc:
            self.server.proxy._count_upstream_error()
            log.warning("S3 fault proxy: %s %s: %s", self.command, self.path, exc)
            self.close_connection = True  # the request body may be half read
            self._answer_bad_gateway(str(exc))
            return
        try:
            if reset_after:
                _upstream_read(response.read)  # the request has fully taken effect upstream
                self._reset()
            else:
                self._relay(response)
        except _UpstreamError as exc:  # the answer's head may be out already: cut the connection
            self.server.proxy._count_upstream_error()
            log.warning("S3 fault proxy: %s %s: %s", self.command, self.path, exc)
            self.close_connection = True
        finally:
            upstream.close()

    def _send_upstream(self, body: Iterator[bytes]) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        upstream = http.client.HTTPConnection(*self.server.proxy.upstream, timeout=_UPSTREAM_TIMEOUT_S)
        chunked = "chunked" in self.headers.get("Transfer-Encoding", "").lower()
        try:
            upstream.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for name, value in self.headers.items():
                if name.lower() not in _NOT_COPIED and name.lower() not in self.server.proxy.drop_headers:
                    upstream.putheader(name, value)
            if chunked:
                upstream.putheader("Transfer-Encoding", "chunked")
            elif "Content-Length" in self.headers:
                upstream.putheader("Content-Length", self.headers["Content-Length"])
            upstream.endheaders()
        except OSError as exc:
            upstream.close()
            _drain(body)  # so the client reads the 502 instead of a reset from unread bytes
            raise _UpstreamError(f"cannot reach {self.server.proxy.upstream}: {exc}") from exc
        try:
            for piece in body:  # _ClientGone from reading the body propagates as is
                upstream.send(piece)
            return upstream, upstream.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            upstream.close()
            raise _UpstreamError(f"{self.server.proxy.upstream} broke off: {exc!r}") from exc
        except _ClientGone:
            upstream.close()
            raise

    def _relay(self, response: http.client.HTTPResponse) -> None:
        """Status, headers and body of the endpoint's answer, streamed as they come."""
        length = response.getheader("Content-Length")
        no_body = self.command == "HEAD" or response.status in (204, 304) or response.status < 200
        rechunk = length is None and not no_body
        self.send_response_only(response.status, response.reason)
        for name, value in response.getheaders():
            if name.lower() not in _NOT_COPIED:
                self.send_header(name, value)
        if length is not None:
            self.send_header("Content-Length", length)
        if rechunk:
            self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while True:
            piece = _upstream_read(response.read1, _PIECE) if not no_body else b""
            if not piece:
                break
            self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece) if rechunk else piece)
        if rechunk:
            self.wfile.write(b"0\r\n\r\n")

    def _answer_bad_gateway(self, why: str) -> None:
        body = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            f"<Error><Code>BadGateway</Code><Message>S3 fault proxy: {_xml_escape(why)}</Message></Error>"
        ).encode()
        try:
            self.send_response(502, "Bad Gateway")
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)
        except OSError:
            pass


def _upstream_read(read, *args) -> bytes:
    try:
        return read(*args)
    except (OSError, http.client.HTTPException) as exc:
        raise _UpstreamError(f"the endpoint broke off its answer: {exc!r}") from exc


def _drain(body: Iterator[bytes]) -> None:
    for _ in body:
        pass


def _xml_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
