"""Benchmark manifest imports under issue 25's attacks (items 4 and 5) against a running service.

Starts `mad serve` (attacks.Server: one process, SQLite, a temporary data dir) for the repository given by
--repo (default: this one; `--repo` at a checkout of an older commit gives its figures), and a web server on
127.0.0.1 that stands for a service inside the network: /secret.png (an image), /redirect (302 to it) and
/trickle.png (--trickle-bytes bytes, one every --trickle-pause-s seconds). Then, through `mad images import`:

- reach: a manifest with the internal image behind credentials and a signature, the same through a redirect,
  a closed port and an unroutable private address (10.255.255.1), and a path outside the manifest's folder.
  Figures: requests that reached the internal server, rows imported, whether an anonymous caller of the
  images API sees the credentials or the signature, and how many different reasons the three unreachable
  rows got (more than one tells a port scanner what listens where);
- slow: a manifest whose only row trickles. Figures: the import's seconds and its row's reason, and the
  latency of GET /api/v1/competitions (which opens a database transaction) polled while the import runs,
  beside its latency on the idle server measured first.

MAD_IMPORT_ALLOWED_HOSTS=127.0.0.1 is set for the slow attack only (the trickling server is local; older
servers ignore the setting), with MAD_IMPORT_URL_DEADLINE_S=--deadline-s.

    .venv/bin/python benchmarks/import_attacks.py [--json] [--repo PATH] [--trickle-bytes 101]
        [--trickle-pause-s 0.25] [--deadline-s 5]
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from PIL import Image

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attacks import REPOSITORY, Server, free_port, request  # noqa: E402

SECRET, SIGNATURE = "hunter2", "X-Amz-Signature=feedbeef"


class InternalSite:
    """The web server inside the network, counting the requests that reach it."""

    def __init__(self, trickle_bytes: int, pause_s: float) -> None:
        buffer = io.BytesIO()
        Image.new("RGB", (32, 32), (200, 30, 30)).save(buffer, format="PNG")
        image, hits = buffer.getvalue(), [0]
        self.hits = hits

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                hits[0] += 1
                if self.path.startswith("/secret.png"):
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(image)))
                    self.end_headers()
                    self.wfile.write(image)
                elif self.path == "/redirect":
                    self.send_response(302)
                    self.send_header("Location", "/secret.png")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif self.path == "/trickle.png":
                    self.send_response(200)
                    self.send_header("Content-Length", str(trickle_bytes))
                    self.end_headers()
                    try:
                        for _ in range(trickle_bytes):
                            self.wfile.write(b"x")
                            self.wfile.flush()
                            time.sleep(pause_s)
                    except OSError:
                        pass
                else:
                    self.send_error(404)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def manifest(path: Path, uris: list[str]) -> Path:
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["uri"])
        writer.writerows([uri] for uri in uris)
    return path


def import_manifest(server: Server, path: Path, **env: str) -> tuple[dict, float]:
    """The JSON report of importing the manifest into the competition, and the import's seconds."""
    report = path.with_suffix(".json")
    saved = dict(server.env)
    server.env.update(env)
    start = time.perf_counter()
    try:
        server.mad("images", "import", str(path), "-c", "target", "--report", str(report))
    finally:
        server.env = saved
    return json.loads(report.read_text()), round(time.perf_counter() - start, 2)


def competitions_ms(server: Server) -> float:
    """Milliseconds of one GET /api/v1/competitions."""
    start = time.perf_counter()
    request(server.port, "GET", "/api/v1/competitions", timeout=600)
    return (time.perf_counter() - start) * 1000


def reach(server: Server, site: InternalSite, folder: Path) -> dict:
    """Item 4: what a manifest reaches inside, what it publishes, and what its errors tell."""
    (folder.parent / "outside.png").write_bytes(b"not even an image")
    secret_url = site.base.replace("//", f"//user:{SECRET}@") + f"/secret.png?{SIGNATURE}"
    unreachable = [f"http://127.0.0.1:{free_port()}/closed.png", "http://10.255.255.1/private.png"]
    rows = [secret_url, f"{site.base}/redirect", *unreachable, "../outside.png"]
    report, seconds = import_manifest(server, manifest(folder / "reach.csv", rows))
    reasons = {item["name"]: item["detail"] for item in report["rejected"]}
    # the open port: the internal server's own URL without the image (a 404 there still answered)
    probe, _ = import_manifest(server, manifest(folder / "probe.csv", [f"{site.base}/nothing.png"]))
    open_reason = probe["rejected"][0]["detail"] if probe["rejected"] else "imported"
    listed = request(server.port, "GET", "/api/v1/competitions/1/images")[1].decode()
    return {
        "seconds": seconds,
        "internal_requests": site.hits[0],
        "rows_imported": len(report["added"]),
        "outside_path": reasons.get("../outside.png", "imported"),
        "anonymous_sees_credentials": SECRET in listed or "feedbeef" in listed,
        "distinct_reasons_open_closed_unroutable": len({open_reason, *(reasons.get(u) for u in unreachable)}),
        "reasons": {"open port": open_reason, **{u: reasons.get(u) for u in unreachable}},
    }


def slow(server: Server, site: InternalSite, folder: Path, deadline_s: float) -> dict:
    """Item 5: the service's latency while a trickling URL is imported, and how the row ends."""
    idle = [competitions_ms(server) for _ in range(10)]
    path = manifest(folder / "slow.csv", [f"{site.base}/trickle.png"])
    result: dict = {}
    env = {"MAD_IMPORT_ALLOWED_HOSTS": "127.0.0.1", "MAD_IMPORT_URL_DEADLINE_S": str(deadline_s)}

    def run_import() -> None:
        result["report"], result["s"] = import_manifest(server, path, **env)

    importing = threading.Thread(target=run_import)
    importing.start()
    busy: list[float] = []
    while importing.is_alive():
        busy.append(competitions_ms(server))
        time.sleep(0.1)
    importing.join()
    rejected = result["report"]["rejected"]
    return {
        "import_seconds": result["s"],
        "row": rejected[0]["detail"] if rejected else "imported",
        "idle_request_p50_ms": round(statistics.median(idle), 1),
        "request_p50_ms_during_import": round(statistics.median(busy), 1) if busy else None,
        "request_max_ms_during_import": round(max(busy), 1) if busy else None,
        "requests_during_import": len(busy),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--repo", type=Path, default=REPOSITORY, help="the checkout attacked")
    parser.add_argument("--trickle-bytes", type=int, default=101)
    parser.add_argument("--trickle-pause-s", type=float, default=0.25)
    parser.add_argument("--deadline-s", type=float, default=5)
    options = parser.parse_args()
    site = InternalSite(options.trickle_bytes, options.trickle_pause_s)
    with tempfile.TemporaryDirectory(prefix="mad-import-attacks-") as temporary:
        (Path(temporary) / "data").mkdir()
        server = Server(options.repo, Path(temporary) / "data")
        folder = Path(temporary) / "manifests"
        folder.mkdir()
        try:
            results = {
                "repo": str(options.repo),
                "reach": reach(server, site, folder),
                "slow": slow(server, site, folder, options.deadline_s),
            }
        finally:
            server.stop()
    if options.json:
        print(json.dumps(results, indent=2))
        return
    for name in ("reach", "slow"):
        print(f"{name}: " + ", ".join(f"{key}={value}" for key, value in results[name].items()))


if __name__ == "__main__":
    main()
