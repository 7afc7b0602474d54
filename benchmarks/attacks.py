"""Benchmark the service under the attacks of issue 15 (points 1, 5, 6): server memory and /healthz latency.

Starts `mad serve` (one process, SQLite, a temporary data dir) on 127.0.0.1 for the repository given by
--repo (default: this one; any checkout with the same CLI works, so the figures of an older commit can be
taken with this script), then, one after the other:

- body: an anonymous POST /api/v1/competitions declaring and sending --body-mb MB of JSON, and an anonymous
  multipart upload of as much to /api/v1/competitions/1/images: the answer, the bytes the server took
  before answering, and its time;
- sign-in: --sign-ins wrong passwords for a real account, 8 at a time (the limits raised so that each one
  runs Argon2), and the median time of a wrong password for a known and for an unknown username;
- taxonomy: an admin creating a competition whose custom taxonomy is a --ladder-level ladder (two nodes per
  level, each the parent of both below: 2**levels paths per class);
- half-open: --half-open connections that send half a request head and stop; how many the server still
  holds --hold-s seconds later (MAD_HEADER_TIMEOUT_S is set to 2 s; older servers have no such timeout).

During each, a client polls /healthz every 50 ms and the server's resident memory is sampled every 20 ms.
The baseline, measured first in the same run: /healthz latency and memory of the idle server. Figures:
the server's peak memory above its idle memory, and /healthz's worst latency as a ratio to the idle p50.

    .venv/bin/python benchmarks/attacks.py [--json] [--repo PATH] [--body-mb 200] [--sign-ins 40]
        [--ladder 20] [--half-open 200] [--hold-s 5]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
PASSWORD = "benchmark password 1"
CHUNK = b" " * (1024 * 1024)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Server:
    """`mad serve` of `repo` on a free port, with an admin (token) and an annotator."""

    def __init__(self, repo: Path, data_dir: Path):
        self.repo = repo
        self.port = free_port()
        self.env = {
            **os.environ,
            "PYTHONPATH": str(repo),
            "MAD_DATA_DIR": str(data_dir),
            "MAD_ENV": "development",
            "MAD_LOGIN_MAX_FAILURES": "100000",
            "MAD_LOGIN_MAX_ADDRESS_FAILURES": "100000",
            "MAD_HEADER_TIMEOUT_S": "2",
        }
        self.mad("db", "upgrade")
        token = self.mad("users", "add", "admin", "--role", "admin", "--password", PASSWORD, "--token")
        self.admin_token = re.search(r"mad_[\w-]{43}", token).group(0)
        self.mad("users", "add", "alice", "--role", "annotator", "--password", PASSWORD)
        self.mad("competitions", "create", "target")
        command = [
            sys.executable,
            "-c",
            "from app.cli.main import app; app()",
            "serve",
            "--port",
            str(self.port),
        ]
        self.process = subprocess.Popen(
            command, cwd=repo, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if request(self.port, "GET", "/healthz")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("the server did not start")

    def mad(self, *arguments: str) -> str:
        command = [sys.executable, "-c", "from app.cli.main import app; app()", *arguments]
        run = subprocess.run(command, cwd=self.repo, env=self.env, capture_output=True, text=True, check=True)
        return run.stdout  # run in the checkout, or `python -c` would import this directory's app first

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def request(port: int, method: str, path: str, body: bytes | None = None, headers=None, timeout=120):
    """(status, body, headers) of one request on a new connection."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read(), response.getheaders()
    finally:
        connection.close()


@contextmanager
def watched(server: Server):
    """Poll /healthz and sample memory while the block runs; yields a dict filled on exit."""
    figures: dict = {}
    latencies: list[float] = []
    peak = [server.rss_mb()]
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            try:
                request(server.port, "GET", "/healthz", timeout=60)
            except OSError:
                pass
            latencies.append((time.perf_counter() - start) * 1000)
            stop.wait(0.05)

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], server.rss_mb())
            stop.wait(0.02)

    threads = [threading.Thread(target=poll), threading.Thread(target=sample)]
    before = server.rss_mb()
    for thread in threads:
        thread.start()
    try:
        yield figures
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        figures["rss_peak_above_idle_mb"] = round(peak[0] - before, 1)
        figures["healthz_p50_ms"] = round(statistics.median(latencies), 1) if latencies else None
        figures["healthz_max_ms"] = round(max(latencies), 1) if latencies else None


MULTIPART_HEAD = b'--x\r\nContent-Disposition: form-data; name="files"; filename="a.png"\r\n\r\n'


def stream_body(port: int, path: str, content_type: str, size: int, headers=None) -> dict:
    """Send a request of `size` declared bytes as fast as the server takes them (a multipart one opens a
    file part first); its answer and how many bytes went before it (the kernel's buffers hold a few MB)."""
    start = time.perf_counter()
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=120) as connection:
        head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Type: {content_type}"]
        head += [f"Content-Length: {size}", *(f"{k}: {v}" for k, v in (headers or {}).items())]
        first = MULTIPART_HEAD if content_type.startswith("multipart/") else b""
        connection.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + first)
        sent = len(first)
        connection.setblocking(False)
        answer = b""
        while sent < size and not answer:
            try:
                answer = connection.recv(4096)
            except BlockingIOError:
                pass
            try:
                sent += connection.send(CHUNK[: size - sent])
            except BlockingIOError:
                time.sleep(0.001)
            except (BrokenPipeError, ConnectionResetError):
                break
        connection.settimeout(120)
        answer = answer or connection.recv(4096)
    status = int(answer.split(b" ", 2)[1]) if answer else None
    seconds = round(time.perf_counter() - start, 2)
    return {"status": status, "bytes_sent_before_answer": sent, "seconds": seconds}


def sign_in(port: int, username: str, password: str) -> tuple[int, float]:
    """A form sign-in with its CSRF token: (status, ms of the POST)."""
    status, page, headers = request(port, "GET", "/login")
    cookie = next(value.split(";")[0] for name, value in headers if name.lower() == "set-cookie")
    csrf = re.search(rb'name="csrf_token" value="([^"]+)"', page).group(1).decode()
    form = f"username={username}&password={password.replace(' ', '+')}&csrf_token={csrf}&next=/"
    start = time.perf_counter()
    status, _, _ = request(
        port,
        "POST",
        "/login",
        form.encode(),
        {"Content-Type": "application/x-www-form-urlencoded", "Cookie": cookie},
    )
    return status, (time.perf_counter() - start) * 1000


def ladder(levels: int) -> str:
    children = {"top": ["a0", "b0"]}
    for level in range(levels - 1):
        children[f"a{level}"] = children[f"b{level}"] = [f"a{level + 1}", f"b{level + 1}"]
    children[f"a{levels - 1}"] = children[f"b{levels - 1}"] = ["x", "y"]
    return json.dumps({"root": "top", "classes": ["x", "y"], "children": children})


def run(options) -> dict:
    results: dict = {"repo": str(options.repo)}
    with tempfile.TemporaryDirectory(prefix="mad-attacks-") as data_dir:
        server = Server(options.repo, Path(data_dir))
        try:
            with watched(server) as idle:
                time.sleep(2)
            results["baseline_idle"] = idle
            size = options.body_mb * 1024 * 1024
            with watched(server) as body:
                body["json"] = stream_body(server.port, "/api/v1/competitions", "application/json", size)
                body["multipart"] = stream_body(
                    server.port, "/api/v1/competitions/1/images", "multipart/form-data; boundary=x", size
                )
            results["body"] = body
            with watched(server) as signing:
                threads = [
                    threading.Thread(
                        target=lambda: [
                            sign_in(server.port, "alice", "wrong") for _ in range(options.sign_ins // 8)
                        ]
                    )
                    for _ in range(8)
                ]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join()
            signing["wrong_known_ms"] = round(
                statistics.median(sign_in(server.port, "alice", "x")[1] for _ in range(9)), 1
            )
            signing["wrong_unknown_ms"] = round(
                statistics.median(sign_in(server.port, "nobody", "x")[1] for _ in range(9)), 1
            )
            results["sign_in"] = signing
            with watched(server) as taxonomy:
                start = time.perf_counter()
                body_text = json.dumps(
                    {"name": "ladder", "taxonomy": "custom", "taxonomy_source": ladder(options.ladder)}
                )
                status, answer, _ = request(
                    server.port,
                    "POST",
                    "/api/v1/competitions",
                    body_text.encode(),
                    {"Content-Type": "application/json", "Authorization": f"Bearer {server.admin_token}"},
                    timeout=600,
                )
                taxonomy.update(
                    status=status, seconds=round(time.perf_counter() - start, 2), detail=answer[:160].decode()
                )
            results["taxonomy"] = taxonomy
            results["half_open"] = half_open(server.port, options.half_open, options.hold_s)
        finally:
            server.stop()
    return results


def half_open(port: int, count: int, hold_s: float) -> dict:
    """Open `count` connections sending half a request head; how many are still open `hold_s` later."""
    connections = []
    for _ in range(count):
        connection = socket.create_connection(("127.0.0.1", port), timeout=5)
        connection.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        connections.append(connection)
    time.sleep(hold_s)
    still_open = 0
    for connection in connections:
        connection.setblocking(False)
        try:
            still_open += connection.recv(1) != b""
        except BlockingIOError:
            still_open += 1
        except OSError:
            pass
        connection.close()
    return {"opened": count, "still_open_after_s": hold_s, "still_open": still_open}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--repo", type=Path, default=REPOSITORY, help="the checkout whose server is attacked")
    parser.add_argument("--body-mb", type=int, default=200)
    parser.add_argument("--sign-ins", type=int, default=40)
    parser.add_argument("--ladder", type=int, default=20)
    parser.add_argument("--half-open", type=int, default=200)
    parser.add_argument("--hold-s", type=float, default=5)
    options = parser.parse_args()
    results = run(options)
    if options.json:
        print(json.dumps(results, indent=2))
        return
    idle = results["baseline_idle"]
    print(f"baseline (idle): /healthz p50 {idle['healthz_p50_ms']} ms, max {idle['healthz_max_ms']} ms")
    for name in ("body", "sign_in", "taxonomy"):
        figures = results[name]
        ratio = figures["healthz_max_ms"] / idle["healthz_p50_ms"] if idle["healthz_p50_ms"] else None
        print(
            f"{name}: server memory +{figures['rss_peak_above_idle_mb']} MB, /healthz max "
            f"{figures['healthz_max_ms']} ms ({ratio:.0f}x idle p50); "
            + ", ".join(
                f"{key}={value}" for key, value in figures.items() if not key.startswith(("rss", "healthz"))
            )
        )
    print(f"half-open: {results['half_open']}")


if __name__ == "__main__":
    main()
