"""A manifest import stays inside: no loopback, private or metadata address (also after a redirect, and the
same answer whatever listens there), no credentials kept, no path outside the manifest's folder; and a
slow URL neither holds the database nor runs past its deadline. Through the CLI, on both databases."""

import csv
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import s3fs
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.db.engine import create_db_engine, create_sessionmaker
from app.images.models import Image
from app.images.remote_sources import OUTSIDE_S3_LOCATIONS, UNREACHABLE
from app.images.url_fetch import is_public, without_credentials
from app.main import create_app
from app.users.models import Role
from tests.conftest import bearer, make_user, settings_for
from tests.foundation.test_cli import query
from tests.foundation.test_import_at_scale import invoke
from tests.support.images import image_bytes

TRANSLATED_INSIDE = (
    "64:ff9b::a00:5",  # NAT64 (RFC 6052) of 10.0.0.5
    "64:ff9b::a9fe:a9fe",  # of 169.254.169.254, cloud metadata
    "64:ff9b::7f00:1",  # of 127.0.0.1
    "64:ff9b:1::a00:5",  # local-use NAT64 (RFC 8215) of 10.0.0.5
    "::a9fe:a9fe",  # IPv4-compatible (RFC 4291, deprecated) 169.254.169.254
    "::7f00:1",  # IPv4-compatible 127.0.0.1
)
"""IPv6 addresses that lead to IPv4 addresses inside the server's network."""
TRICKLE_BYTES = 101
TRICKLE_PAUSE_S = 0.2
"""The trickling URL sends a byte every 0.2 s: 20 s for its 101 bytes, ten times the deadline below."""
DEADLINE_S = 2


class Site:
    """A web server on 127.0.0.1: /x.png an image, /to-loopback a redirect to it by address, /trickle.png
    101 bytes one at a time; it counts the requests for /x.png and says when a trickle starts and ends."""

    def __init__(self) -> None:
        self.image = image_bytes(7)
        self.image_hits = 0
        self.trickle_started = threading.Event()
        self.trickle_sent_all = threading.Event()
        site = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path == "/x.png":
                    site.image_hits += 1
                    self._send(site.image)
                elif path == "/to-loopback":
                    self.send_response(302)
                    self.send_header("Location", f"http://127.0.0.1:{site.port}/x.png")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                elif path == "/trickle.png":
                    self._trickle()
                else:
                    self.send_error(404)

            def _send(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _trickle(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", str(TRICKLE_BYTES))
                self.end_headers()
                site.trickle_started.set()
                try:
                    for _ in range(TRICKLE_BYTES):
                        self.wfile.write(b"x")
                        self.wfile.flush()
                        time.sleep(TRICKLE_PAUSE_S)
                except OSError:
                    return
                site.trickle_sent_all.set()

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"


@pytest.fixture
def cli_env(tmp_path, fresh_database_url):
    """A database of its own with the competition "corpus"."""
    env = {"MAD_DATABASE_URL": fresh_database_url, "MAD_DATA_DIR": str(tmp_path / "data")}
    assert invoke(env, "competitions", "create", "corpus").exit_code == 0
    return env


@pytest.fixture
def site():
    serving = Site()
    serving.thread.start()
    yield serving
    serving.server.shutdown()
    serving.thread.join()


def closed_port() -> int:
    """A port on 127.0.0.1 with nothing listening."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def write_manifest(path: Path, uris: list[str]) -> Path:
    with path.open("w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["uri", "source_url"])
        writer.writerows([uri, ""] for uri in uris)
    return path


def import_report(env, manifest: Path) -> tuple[str, dict]:
    """The CLI's output and its JSON report of importing the manifest."""
    report = manifest.with_suffix(".json")
    result = invoke(env, "images", "import", str(manifest), "-c", "corpus", "--report", str(report))
    assert result.exit_code == 0, result.output
    return result.output, json.loads(report.read_text())


def test_manifest_rows_cannot_reach_private_addresses_or_leave_the_folder(cli_env, tmp_path, site):
    folder = tmp_path / "manifest"
    folder.mkdir()
    (tmp_path / "outside.png").write_bytes(image_bytes(1))
    (folder / "link.png").symlink_to(tmp_path / "outside.png")
    (folder / "inside.png").write_bytes(image_bytes(2))
    secret_url = site.url("/x.png?X-Amz-Signature=feedbeef&X-Amz-Credential=AKIA&id=3", "u:hunter2@127.0.0.1")
    private = [
        secret_url,
        site.url("/to-loopback", "localhost"),  # allowed by name below; its redirect to 127.0.0.1 is not
        f"http://127.0.0.1:{closed_port()}/nothing-listens.png",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:127.0.0.1]:9/mapped.png",
        "http://10.255.255.1/private.png",
    ]
    manifest = write_manifest(folder / "manifest.csv", [*private, "../outside.png", "link.png", "inside.png"])

    env = {**cli_env, "MAD_IMPORT_ALLOWED_HOSTS": "localhost", "MAD_IMPORT_URL_DEADLINE_S": "5"}
    output, report = import_report(env, manifest)
    reasons = [item["detail"] for item in report["rejected"]]
    assert reasons[: len(private)] == [UNREACHABLE] * len(private)  # an open port reads as a closed one
    assert reasons[len(private) :] == ["path outside the manifest's folder"] * 2
    assert [item["name"] for item in report["added"]] == ["inside.png"]
    assert site.image_hits == 0
    assert "hunter2" not in output + json.dumps(report) and "feedbeef" not in output + json.dumps(report)

    allowed = {**cli_env, "MAD_IMPORT_ALLOWED_HOSTS": "127.0.0.1"}
    output, report = import_report(allowed, write_manifest(folder / "allowed.csv", [secret_url]))
    assert len(report["added"]) == 1 and site.image_hits == 1
    stored = query(cli_env["MAD_DATABASE_URL"], select(Image.source_uri))
    assert {uri for (uri,) in stored} == {"inside.png", site.url("/x.png?id=3")}
    assert "hunter2" not in output + json.dumps(report) and "AKIA" not in output + json.dumps(report)


def admin_client(tmp_path: Path, database_url: str) -> tuple[TestClient, dict[str, str]]:
    """A client of the service on this database, and an admin's headers."""
    engine = create_db_engine(database_url)
    with create_sessionmaker(engine)() as session:
        headers = bearer(session, make_user(session, "boss", Role.admin))
    engine.dispose()
    return TestClient(create_app(settings_for(tmp_path, database_url))), headers


def test_a_trickling_url_holds_no_lock_and_fails_at_its_deadline(cli_env, tmp_path, site):
    manifest = write_manifest(tmp_path / "slow.csv", [site.url("/trickle.png")])
    env = {
        **os.environ,
        **cli_env,
        "MAD_IMPORT_ALLOWED_HOSTS": "127.0.0.1",
        "MAD_IMPORT_URL_DEADLINE_S": str(DEADLINE_S),
    }
    report_path = tmp_path / "report.json"
    mad = Path(sys.executable).with_name("mad")
    command = [str(mad), "images", "import", str(manifest), "-c", "corpus", "--report", str(report_path)]
    client, headers = admin_client(tmp_path, cli_env["MAD_DATABASE_URL"])
    with client, subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as run:
        assert site.trickle_started.wait(30)
        changed = client.patch("/api/v1/competitions/1", json={"description": "meanwhile"}, headers=headers)
        served_while_downloading = not site.trickle_sent_all.is_set()
        output = run.communicate(timeout=60)[0].decode()
    assert changed.status_code == 200 and served_while_downloading
    assert run.returncode == 0, output
    assert not site.trickle_sent_all.is_set()  # the import gave up before the 20 s the body takes
    (rejected,) = json.loads(report_path.read_text())["rejected"]
    assert rejected["detail"] == f"not downloaded within {DEADLINE_S} s (MAD_IMPORT_URL_DEADLINE_S)"


@pytest.mark.parametrize(
    ("url", "kept"),
    [
        (
            "http://u:pw@h.org:8080/a.png?X-Amz-Signature=s&X-Amz-Credential=c&id=3#x",
            "http://h.org:8080/a.png?id=3",
        ),
        ("https://h.org/a.jpg?sv=2022-11-02&sp=r&se=2030&sig=abc&page=2", "https://h.org/a.jpg?page=2"),
        ("https://h.org/a.jpg?X-Goog-Signature=s&GoogleAccessId=g&Expires=1", "https://h.org/a.jpg"),
        ("https://h.org/a.jpg?Policy=p&Key-Pair-Id=k&Signature=s", "https://h.org/a.jpg"),
        ("https://h.org/a.jpg?access_token=t&api_key=k&size=big", "https://h.org/a.jpg?size=big"),
        ("https://h.org/a%20b.jpg?w=1&h=2", "https://h.org/a%20b.jpg?w=1&h=2"),
    ],
)
def test_urls_are_kept_without_credentials_or_signatures(url, kept):
    assert without_credentials(url) == kept


@pytest.mark.parametrize(
    ("address", "public"),
    [
        ("93.184.215.14", True),
        ("2606:2800:21f:cb07:6820:80da:af6b:8b2c", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.1.1", False),
        ("169.254.169.254", False),  # cloud metadata
        ("100.100.100.200", False),  # shared address space (a cloud's metadata too)
        ("0.0.0.0", False),
        ("224.0.0.1", False),
        ("240.0.0.1", False),
        ("::1", False),
        ("fd00:ec2::254", False),
        ("fe80::1", False),
        ("::ffff:127.0.0.1", False),
        ("2002:7f00:1::", False),  # 6to4 around 127.0.0.1
        *((address, False) for address in TRANSLATED_INSIDE),
        ("64:ff9b::808:808", True),  # NAT64 of 8.8.8.8
        ("::808:808", True),
        ("64:ff9b:1:808:8:800::", False),  # local-use NAT64 (its /48 form of 8.8.8.8): the network's own
    ],
)
def test_only_public_unicast_addresses_are_public(address, public):
    assert is_public(ipaddress.ip_address(address)) is public


NAMESPACE_PROBE = r"""
import json, subprocess, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typer.testing import CliRunner
from app.cli.main import app as cli
from tests.support.images import image_bytes

folder, addresses, allowed = Path(sys.argv[1]), sys.argv[2].split(","), sys.argv[3]
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
for address in addresses:
    subprocess.run(["ip", "-6", "addr", "add", f"{address}/128", "dev", "lo", "nodad"], check=True)
hits = []

class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        hits.append(self.path)
        body = image_bytes(int(self.path.strip("/.png")))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

class Server(ThreadingHTTPServer):
    address_family = __import__("socket").AF_INET6

server = Server(("::", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
manifest = folder / "manifest.csv"
urls = [f"http://[{address}]:{server.server_address[1]}/{n}.png" for n, address in enumerate(addresses)]
manifest.write_text("uri\n" + "\n".join(urls) + "\n")
env = {
    "MAD_DATABASE_URL": f"sqlite:///{folder}/mad.sqlite3",
    "MAD_DATA_DIR": str(folder / "data"),
    "MAD_IMPORT_ALLOWED_HOSTS": allowed,
    "MAD_IMPORT_URL_DEADLINE_S": "10",
}
for args in (["db", "upgrade"], ["competitions", "create", "corpus"]):
    assert CliRunner().invoke(cli, args, env=env).exit_code == 0
report = folder / "report.json"
command = ["images", "import", str(manifest), "-c", "corpus", "--processes", "1", "--report", str(report)]
ran = CliRunner().invoke(cli, command, env=env)
assert ran.exit_code == 0, ran.output
print(json.dumps({"hits": hits, "report": json.loads(report.read_text())}))
"""


def import_in_a_network_of_its_own(folder: Path, addresses: tuple[str, ...], allowed: str) -> dict:
    """A manifest of one URL per address, each served on the loopback interface of a new network namespace
    (unshare -rn: the addresses exist only there), imported by the CLI in it; what the server was asked for
    and the import's report."""
    if subprocess.run(["unshare", "-rn", "true"], capture_output=True).returncode != 0 or not shutil.which(
        "ip"
    ):
        pytest.skip("needs unshare -rn (unprivileged network namespaces) and ip (iproute2)")
    folder.mkdir()
    probe = subprocess.run(
        ["unshare", "-rn", sys.executable, "-c", NAMESPACE_PROBE, str(folder), ",".join(addresses), allowed],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    return json.loads(probe.stdout.strip().splitlines()[-1])


def test_nat64_and_ipv4_compatible_forms_of_inside_addresses_are_not_reached(tmp_path):
    """On an IPv6-only host behind DNS64/NAT64 these addresses lead to the private, loopback and metadata
    IPv4 addresses they embed; here each is an address of a namespace's loopback with a web server behind it,
    reached only when MAD_IMPORT_ALLOWED_HOSTS names its network."""
    refused = import_in_a_network_of_its_own(tmp_path / "refused", TRANSLATED_INSIDE, "")
    assert refused["hits"] == []
    assert [row["detail"] for row in refused["report"]["rejected"]] == [UNREACHABLE] * len(TRANSLATED_INSIDE)
    allowed = import_in_a_network_of_its_own(
        tmp_path / "allowed", TRANSLATED_INSIDE, "64:ff9b::/96,64:ff9b:1::/48,::/96"
    )
    assert sorted(allowed["hits"]) == sorted(f"/{n}.png" for n in range(len(TRANSLATED_INSIDE)))
    assert len(allowed["report"]["added"]) == len(TRANSLATED_INSIDE)


def test_manifest_s3_rows_read_only_the_storage_and_the_locations_allowed(cli_env, tmp_path, s3_storage_url):
    """The server's credentials read every bucket here; a manifest's rows read only the storage's own bucket
    and prefix and what MAD_IMPORT_ALLOWED_S3 names, and a row elsewhere is refused unread: the same reason
    whether its key exists or not."""
    storage = s3_storage_url.removeprefix("s3://")  # bucket/mad
    other = f"mad-{uuid.uuid4().hex[:12]}"
    filesystem = s3fs.S3FileSystem(skip_instance_cache=True)
    filesystem.mkdir(other)
    objects = {
        f"{storage}/incoming/a.png": 1,
        f"{other}/public/b.png": 2,
        f"{storage.split('/')[0]}/elsewhere/c.png": 3,  # the storage's bucket, outside its prefix
        f"{other}/publicity/d.png": 4,  # beside the allowed prefix, not under it
        f"{other}/secret/e.png": 5,
    }
    for key, seed in objects.items():
        filesystem.pipe_file(key, image_bytes(seed))
    uris = [f"s3://{key}" for key in objects]
    uris += [f"s3://{other}/secret/missing.png", f"s3://{other}/public/../secret/e.png"]
    env = {**cli_env, "MAD_STORAGE_URL": s3_storage_url, "MAD_IMPORT_ALLOWED_S3": f"s3://{other}/public"}

    _, report = import_report(env, write_manifest(tmp_path / "manifest.csv", uris))
    assert [item["name"] for item in report["added"]] == uris[:2]
    assert {item["name"]: item["detail"] for item in report["rejected"]} == dict.fromkeys(
        uris[2:], OUTSIDE_S3_LOCATIONS
    )
    stored = query(cli_env["MAD_DATABASE_URL"], select(Image.source_uri))
    assert sorted(uri for (uri,) in stored) == sorted(uris[:2])
    manifest = str(tmp_path / "manifest.csv")
    misnamed = invoke({**env, "MAD_IMPORT_ALLOWED_S3": other}, "images", "import", manifest, "-c", "corpus")
    assert (
        misnamed.exit_code == 1
        and f"MAD_IMPORT_ALLOWED_S3: Value error, '{other}' is not s3://" in misnamed.output
    )
