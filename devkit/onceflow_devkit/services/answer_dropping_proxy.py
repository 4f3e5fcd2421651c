"""An HTTP proxy in front of a REST catalog that can lose the catalog's answer to a request it forwarded.

A commit whose outcome is unknown: the catalog applied it, and the client, its connection closed
without an answer, cannot tell whether it did. ``drop_answers(n, method, path)`` arms the proxy:
the next ``n`` matching requests reach the catalog whole, their answers are read from it, and
the client's connection is closed instead. Everything else passes through unchanged.

Runs in a thread of the caller's process (a test, or a chaos run); listens on 127.0.0.1.
"""

from __future__ import annotations

import http.client
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

# Headers of one hop that the proxy does not pass on (it sends each body whole, with its length).
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "trailer", "upgrade"}
# pyiceberg's REST catalog commits a table's new snapshot with this request.
TABLE_COMMIT = ("POST", re.compile(r"^/v1/(?:[^/]+/)?namespaces/[^/]+/tables/[^/]+$"))


class AnswerDroppingProxy:
    def __init__(self, upstream: str):
        target = urlsplit(upstream)
        self.upstream_host, self.upstream_port = target.hostname or "127.0.0.1", target.port or 80
        self.dropped: list[str] = []  # "METHOD path" of each request whose answer was lost
        self._rule: tuple[int, str, re.Pattern] | None = None
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="answer-dropping-proxy", daemon=True)

    @property
    def uri(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> "AnswerDroppingProxy":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def drop_answers(self, count: int, rule: tuple[str, re.Pattern] = TABLE_COMMIT) -> None:
        """Lose the answers to the next ``count`` requests of ``rule`` (method, path pattern)."""
        with self._lock:
            self._rule = (count, *rule)

    def _drops(self, method: str, path: str) -> bool:
        with self._lock:
            if self._rule is None:
                return False
            count, wanted, pattern = self._rule
            if method != wanted or not pattern.match(path.split("?", 1)[0]):
                return False
            self._rule = (count - 1, wanted, pattern) if count > 1 else None
            self.dropped.append(f"{method} {path}")
            return True

    def _handler(self):
        proxy = self

        class Forward(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format, *args):  # noqa: A002 - the base class's signature
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP | {"host"}}
                upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=60)
                try:
                    upstream.request(self.command, self.path, body=body or None, headers=headers)
                    answer = upstream.getresponse()
                    payload = answer.read()  # the catalog has done the request once this returns
                finally:
                    upstream.close()
                if proxy._drops(self.command, self.path):
                    self.close_connection = True
                    return  # no status line: the client's connection closes without an answer
                self.send_response_only(answer.status, answer.reason)
                for key, value in answer.getheaders():
                    if key.lower() not in _HOP_BY_HOP | {"content-length"}:
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_HEAD = do_DELETE = do_PUT = _forward

        return Forward
