"""A fault-injecting HTTP proxy between the object store client and moto's S3 server.

Every request is relayed to the server unless a rule matches it first: `500` answers an S3
InternalError (before the request reaches the server), `drop` reads the request and closes the
connection without a word (an upload lost mid-flight), `cut` relays a GET but closes the
connection halfway through the body (a read lost mid-flight). Each rule fires `times` times
(None: always); `seen` records every (method, key, status) the proxy relayed or faulted.
"""

from __future__ import annotations

import http.client
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


@dataclass
class Fault:
    method: str
    key_suffix: str  # matched against the request's path (bucket/key) without its query
    kind: str  # "500", "drop" or "cut"
    times: int | None = 1
    fired: int = 0

    def matches(self, method: str, path: str) -> bool:
        return (method == self.method and urlsplit(path).path.endswith(self.key_suffix)
                and (self.times is None or self.fired < self.times))


class FaultProxy:
    def __init__(self, upstream: str):
        self.upstream = urlsplit(upstream)
        self.faults: list[Fault] = []
        self.seen: list[tuple[str, str, str]] = []
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def inject(self, *faults: Fault) -> None:
        with self.lock:
            self.faults = list(faults)
            self.seen.clear()

    def fired(self) -> int:
        return sum(f.fired for f in self.faults)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _take(self, method: str, path: str) -> Fault | None:
        with self.lock:
            fault = next((f for f in self.faults if f.matches(method, path)), None)
            if fault is not None:
                fault.fired += 1
            return fault

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):  # quiet
                pass

            def _relay(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fault = proxy._take(self.command, self.path)
                key = urlsplit(self.path).path
                if fault is not None and fault.kind == "drop":
                    proxy.seen.append((self.command, key, "dropped"))
                    self.close_connection = True
                    return
                if fault is not None and fault.kind == "500":
                    proxy.seen.append((self.command, key, "500"))
                    payload = b"<Error><Code>InternalError</Code><Message>injected</Message></Error>"
                    self.send_response(500)
                    self.send_header("Content-Length", str(len(payload)))
                    self.send_header("Content-Type", "application/xml")
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=30)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "keep-alive")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                response = conn.getresponse()
                data = response.read()
                proxy.seen.append((self.command, key, "cut" if fault else str(response.status)))
                self.send_response(response.status)
                for name, value in response.getheaders():
                    if name.lower() not in ("connection", "transfer-encoding", "keep-alive"):
                        self.send_header(name, value)
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data[:len(data) // 2] if fault is not None else data)
                if fault is not None:  # "cut": half the body, then the connection goes
                    self.wfile.flush()
                    self.close_connection = True
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _relay

        return Handler
