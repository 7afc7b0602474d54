"""The service under measurement: uvicorn serving app.main:create_app on a free port of 127.0.0.1, started by
the benchmarks that drive it over HTTP (labelling.py, public_reads.py, data_path.py)."""

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPOSITORY = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 60


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_uvicorn(env: dict[str, str], port: int, *options: str, **popen) -> subprocess.Popen:
    """uvicorn on 127.0.0.1:port with the environment `env` and further uvicorn options, returned once
    /healthz answers 200; stopped, and RuntimeError raised, when it does not within START_TIMEOUT_S."""
    command = [sys.executable, "-m", "uvicorn", "--factory", "app.main:create_app"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--no-access-log", *options]
    server = subprocess.Popen(command, cwd=REPOSITORY, env=env, **popen)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            time.sleep(0.2)
    stop_uvicorn(server)
    raise RuntimeError("uvicorn did not start")


def stop_uvicorn(server: subprocess.Popen) -> None:
    """Stop uvicorn and wait for it."""
    server.terminate()
    server.wait(timeout=60)
