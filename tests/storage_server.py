"""A real Cloud Storage server for the tests: `gcp-storage-emulator` (the JSON API over
HTTP, objects on disk so it can be killed and restarted), behind a small forwarding proxy
on 127.0.0.1 that records every request and can inject faults: a 503 for the next N
matching requests, or killing the server when a matching request arrives (the connection
then drops, as with a crashed or unreachable endpoint).
"""
from __future__ import annotations

import http.client
import os
import re
import socket
import subprocess
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qs, unquote, urlsplit

from tooling.storage_emulator import free_port, start_emulator


@dataclass
class Request:
    method: str
    path: str
    query: dict
    body_name: str = ""
    """A multipart upload names its object in the body's JSON part."""

    @property
    def object_name(self) -> str:
        """The object a request is about ('' for bucket-level calls)."""
        if "name" in self.query:
            return self.query["name"][0]
        if self.body_name:
            return self.body_name
        parts = self.path.split("/o/", 1)
        return unquote(parts[1]) if len(parts) == 2 else ""

    @property
    def is_upload(self) -> bool:
        return self.path.startswith("/upload/")


@dataclass
class Fault:
    matches: Callable[[Request], bool]
    action: str  # "503" or "kill"
    remaining: int = 1


@dataclass
class StorageServer:
    data_dir: Path
    bucket: str = "runs-bucket"
    port: int = 0
    proxy_port: int = 0
    process: subprocess.Popen | None = None
    requests: list[Request] = field(default_factory=list)
    served: list[tuple[Request, int]] = field(default_factory=list)
    """Each answered request with the bytes of its response body."""
    faults: list[Fault] = field(default_factory=list)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.proxy_port}"

    def filesystem(self):
        """A gcsfs client of this server, for the tests' own reads and writes."""
        os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
        import gcsfs

        return gcsfs.GCSFileSystem(token="anon", endpoint_url=self.endpoint, skip_instance_cache=True,
                                   use_listings_cache=False)

    def env(self, staging: Path) -> dict:
        return {"STORAGE_EMULATOR_HOST": self.endpoint, "TPU_TRAINER_STAGING_DIR": str(staging),
                "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false"}

    # ------------------------------------------------------------ the server
    def start(self) -> "StorageServer":
        """Start (or restart, on the same port and objects) the server, and the proxy once."""
        self.port = self.port or free_port()
        self.process = start_emulator(self.data_dir, self.bucket, self.port)
        if not self.proxy_port:
            self._start_proxy()
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        self.kill()
        if getattr(self, "_proxy", None) is not None:
            self._proxy.shutdown()
            self._proxy.server_close()

    # ------------------------------------------------------------ the proxy
    def inject(self, matches: Callable[[Request], bool], action: str, times: int = 1) -> Fault:
        fault = Fault(matches, action, times)
        self.faults.append(fault)
        return fault

    def _fault_for(self, request: Request) -> str | None:
        for fault in self.faults:
            if fault.remaining > 0 and fault.matches(request):
                fault.remaining -= 1
                return fault.action
        return None

    def _start_proxy(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet
                pass

            def _forward(self) -> None:
                parts = urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                named = re.search(rb'"name":\s*"([^"]+)"', body[:4096]) if body else None
                request = Request(self.command, parts.path, parse_qs(parts.query),
                                  named.group(1).decode() if named else "")
                server.requests.append(request)
                action = server._fault_for(request)
                if action == "503":
                    payload = b'{"error": {"code": 503, "message": "injected: service unavailable"}}'
                    self.send_response(503)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                if action == "kill":
                    server.kill()
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                try:
                    upstream = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    data = response.read()
                except OSError:  # the server is down: drop the connection, as a dead endpoint does
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                server.served.append((request, len(data)))
                self.end_headers()
                self.wfile.write(data)
                upstream.close()

            do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

        class Proxy(ThreadingHTTPServer):
            def handle_error(self, request, client_address) -> None:  # a client gone mid-reply: expected here
                pass

        self.proxy_port = free_port()
        self._proxy = Proxy(("127.0.0.1", self.proxy_port), Handler)
        self._proxy.daemon_threads = True
        threading.Thread(target=self._proxy.serve_forever, daemon=True).start()
