"""A Detectron download site on loopback for tests: files in Detectron's layout, each with its `.md5sum`.

`DetectronMirror(folder, max_requests)` serves `folder` at `http://127.0.0.1:<ephemeral port>/detectron/` from a
thread, answers at most `max_requests` requests (GET and HEAD; a missing file is 404) and stops by itself after
them or when closed. `add(path, data)` writes a file and its `.md5sum` text (`md5=` to publish a wrong one);
`cut_short(path)` makes the server announce the whole Content-Length but close after half the bytes;
`stall(path)` sends that half and then waits (until `release()` or STALL_S) before closing; `answer(path, status,
body)` answers requests for `path` with that status and body instead (an HTTP error, a captive portal's page).
`requests` lists (method, path below the base) in order. The `detectron_mirror` fixture starts one over a
temporary folder and points tfdet at it: TFDET_DETECTRON_URL at the mirror, TFDET_CACHE at an empty folder.
"""

import hashlib
import http.server
import pathlib
import socket
import threading

import pytest

BASE_PATH = "/detectron/"
POLL_S = 0.05
STALL_S = 20


class DetectronMirror:
    """Files below `folder` served at `self.url` (the base), at most `max_requests` requests, from a thread."""

    def __init__(self, folder, max_requests=20):
        self.folder = pathlib.Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.requests = []
        self.remaining = max_requests
        self.truncated = set()
        self.stalled = set()
        self.answers = {}
        self.released = threading.Event()
        self._stopping = threading.Event()
        self._server = http.server.HTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.timeout = POLL_S  # handle_request returns after this when no request comes
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}{BASE_PATH.rstrip('/')}"
        self._thread = threading.Thread(target=self._serve, name="detectron-mirror", daemon=True)
        self._thread.start()

    def add(self, path, data, md5=None):
        """Serve `data` at `path` (below the base) and its md5 (or `md5`) as the text of `path.md5sum`."""
        target = self.folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        (self.folder / f"{path}.md5sum").write_text((md5 or hashlib.md5(data).hexdigest()) + "\n")
        return f"{self.url}/{path}"

    def cut_short(self, path):
        """Send only half of `path`'s bytes (after a Content-Length of all of them), then close the connection."""
        self.truncated.add(path)

    def stall(self, path):
        """Send half of `path`'s bytes, then hold the connection open until `release()` (or STALL_S)."""
        self.stalled.add(path)

    def answer(self, path, status, body=b""):
        """Answer requests for `path` with HTTP `status` and `body` (text/html) instead of its file."""
        self.answers[path] = (status, body)

    def release(self):
        self.released.set()

    def paths(self, method="GET"):
        """The paths asked for with `method`, in order."""
        return [path for asked, path in self.requests if asked == method]

    def close(self):
        self.released.set()
        self._stopping.set()
        self._thread.join(timeout=10)
        self._server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _serve(self):
        while self.remaining > 0 and not self._stopping.is_set():
            self._server.handle_request()

    def _handler_class(self):
        mirror = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self._answer(body=True)

            def do_HEAD(self):
                self._answer(body=False)

            def _answer(self, body):
                mirror.remaining -= 1
                # the path as sent: files on disk keep '%3A' in their names, as in Detectron's cache
                relative = self.path[len(BASE_PATH) :] if self.path.startswith(BASE_PATH) else ""
                mirror.requests.append((self.command, relative or self.path))
                if relative in mirror.answers:
                    self._send(*mirror.answers[relative], body)
                    return
                file = mirror.folder / relative
                if not relative or ".." in relative.split("/") or not file.is_file():
                    self.send_error(404)
                    return
                data = file.read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not body:
                    return
                if relative in mirror.truncated | mirror.stalled:
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    if relative in mirror.stalled:
                        mirror.released.wait(STALL_S)
                    self.close_connection = True
                    return
                self.wfile.write(data)

            def _send(self, status, data, body):
                self.send_response(status)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

            def log_message(self, *args):  # keep the test output clean
                pass

        return Handler


def unused_loopback_url():
    """A base URL on 127.0.0.1 where nothing listens (a port just bound and released): connections are refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/detectron"


@pytest.fixture
def detectron_mirror(tmp_path, monkeypatch):
    """A DetectronMirror over tmp_path/mirror, with TFDET_DETECTRON_URL pointing at it and TFDET_CACHE at
    tmp_path/cache (the mirror's `cache` attribute)."""
    with DetectronMirror(tmp_path / "mirror") as mirror:
        mirror.cache = tmp_path / "cache"
        monkeypatch.setenv("TFDET_DETECTRON_URL", mirror.url)
        monkeypatch.setenv("TFDET_CACHE", str(mirror.cache))
        yield mirror
