"""Server memory and time for uploading hostile archives, against uploading an ordinary archive first.

The zip bomb is issue 15's: a ~2 MB zip of 40 members of 49 MB each (zeros, deflated). The pixel bomb is a
zip of 4 RGBA PNGs just under the pixel limit (9,459 × 9,459 = 89.5 Mpx, Pillow's default), which are small
files that decode to 358 MB each. A server process (uvicorn on 127.0.0.1, SQLite in a temporary data dir
unless --database-url) receives first an ordinary zip of real JPEGs of about the zip bomb's size (the
baseline), then the zip bomb, then the pixel bomb, through the upload endpoint. Growth is the process's peak
resident memory (VmHWM) after each upload above its resident memory (VmRSS) before the first; the peak
only rises, so an upload that needs no more memory than the one before shows the same growth.

    .venv/bin/python benchmarks/zip_bomb.py [--json] [--database-url postgresql://root@127.0.0.1/DB]

`--source DIR` measures another checkout's server, e.g. the commit before the fix:

    git worktree add /tmp/before 0e98170
    .venv/bin/python benchmarks/zip_bomb.py --source /tmp/before
"""

import argparse
import io
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import httpx
import numpy as np
from PIL import Image, PngImagePlugin

REPOSITORY = Path(__file__).resolve().parent.parent
MEMBERS, MEMBER_BYTES = 40, 49 * 1024 * 1024
PIXEL_BOMB_SIDE, PIXEL_BOMB_IMAGES = 9_459, 4
PASSWORD = "zip-bomb-benchmark"
SECRET_KEY = "zip-bomb-benchmark-secret-key-" + "x" * 32


def bomb_zip() -> bytes:
    """40 members of 49 MB of zeros, deflated at level 9: about 2 MB."""
    buffer = io.BytesIO()
    zeros = bytes(MEMBER_BYTES)
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for index in range(MEMBERS):
            archive.writestr(f"bomb/{index:02d}.jpg", zeros)
    return buffer.getvalue()


def pixel_bomb_zip() -> bytes:
    """4 different RGBA PNGs of 9,459² pixels (distinct by a text chunk), stored in a zip."""
    picture = Image.new("RGBA", (PIXEL_BOMB_SIDE, PIXEL_BOMB_SIDE), (40, 90, 160, 200))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for index in range(PIXEL_BOMB_IMAGES):
            info = PngImagePlugin.PngInfo()
            info.add_text("copy", str(index))
            png = io.BytesIO()
            picture.save(png, format="PNG", pnginfo=info, compress_level=1)
            archive.writestr(f"pixels/{index}.png", png.getvalue())
    return buffer.getvalue()


def ordinary_zip(target_bytes: int) -> bytes:
    """Real JPEGs (noisy colour fields, 480×360) until the zip is about target_bytes."""
    rng = np.random.default_rng(0)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        index = 0
        while buffer.tell() < target_bytes:
            pixels = rng.integers(0, 256, (360, 480, 3), dtype=np.uint8)
            jpeg = io.BytesIO()
            Image.fromarray(pixels).save(jpeg, format="JPEG", quality=60)
            archive.writestr(f"photos/{index:04d}.jpg", jpeg.getvalue())
            index += 1
    return buffer.getvalue()


def mad(source: Path, env: dict, *args: str) -> str:
    """Run the `mad` command of the source checkout; its standard output."""
    command = [sys.executable, "-c", "from app.cli.main import app; app()", *args]
    done = subprocess.run(command, cwd=source, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"mad {' '.join(args)} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def memory_kib(pid: int, field: str) -> int:
    """VmRSS or VmHWM of a process, in KiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)[1])


def upload(http: httpx.Client, competition_id: int, name: str, data: bytes) -> tuple[float, dict]:
    """Seconds to upload one archive, and the import report's counts."""
    start = time.perf_counter()
    response = http.post(
        f"/api/v1/competitions/{competition_id}/images", files=[("files", (name, data, "application/zip"))]
    )
    seconds = time.perf_counter() - start
    body = response.json()
    counts = {key: len(value) for key, value in body.items()} if response.is_success else body
    return seconds, {"status": response.status_code, **counts}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="Print one JSON line of figures.")
    parser.add_argument("--source", type=Path, default=REPOSITORY, help="Checkout whose server is measured.")
    parser.add_argument("--database-url", default="", help="Empty: SQLite in the temporary data dir.")
    args = parser.parse_args()
    source = args.source.resolve()
    bomb, pixels = bomb_zip(), pixel_bomb_zip()
    ordinary = ordinary_zip(len(bomb))
    with tempfile.TemporaryDirectory(prefix="mad-zip-bomb-") as workdir:
        env = {
            **os.environ,
            "PYTHONPATH": str(source),
            "MAD_ENV": "test",
            "MAD_SECRET_KEY": SECRET_KEY,
            "MAD_DATA_DIR": str(Path(workdir) / "data"),
            "MAD_DATABASE_URL": args.database_url,
        }
        mad(source, env, "db", "upgrade")
        output = mad(
            source, env, "users", "add", "admin", "--role", "admin", "--password", PASSWORD, "--token"
        )
        token = re.search(r"(mad_\S+)", output)[1]
        mad(source, env, "competitions", "create", "bomb")
        port = free_port()
        server = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app", "--port", str(port)],
            cwd=source,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            figures = measure(server.pid, port, token, ordinary, bomb, pixels)
        finally:
            server.terminate()
            server.wait(timeout=30)
    sizes = {
        "ordinary_zip_bytes": len(ordinary),
        "bomb_zip_bytes": len(bomb),
        "pixel_bomb_zip_bytes": len(pixels),
    }
    figures = {"source": str(source), **sizes, **figures}
    if args.json:
        print(json.dumps(figures))
        return
    for name, value in figures.items():
        print(f"{name:>28}: {value}")


def measure(pid: int, port: int, token: str, ordinary: bytes, bomb: bytes, pixels: bytes) -> dict:
    """Upload the ordinary archive, the zip bomb and the pixel bomb; time and memory growth of each."""
    with httpx.Client(
        base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {token}"}, timeout=600
    ) as http:
        deadline = time.monotonic() + 60
        while True:
            try:
                if http.get("/healthz").is_success:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the server did not start")
            time.sleep(0.2)
        competition_id = next(c["id"] for c in http.get("/api/v1/competitions").json() if c["name"] == "bomb")
        rss_before = memory_kib(pid, "VmRSS")
        figures: dict = {"rss_before_mib": round(rss_before / 1024, 1)}
        for label, archive in (("baseline", ordinary), ("bomb", bomb), ("pixel_bomb", pixels)):
            seconds, report = upload(http, competition_id, f"{label}.zip", archive)
            growth = memory_kib(pid, "VmHWM") - rss_before
            figures |= {
                f"{label}_seconds": round(seconds, 2),
                f"{label}_growth_mib": round(growth / 1024, 1),
                f"{label}_report": report,
            }
    figures["ratio"] = round(figures["bomb_growth_mib"] / max(figures["baseline_growth_mib"], 0.1), 2)
    return figures


if __name__ == "__main__":
    main()
