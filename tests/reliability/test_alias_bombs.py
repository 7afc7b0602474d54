"""A YAML alias bomb (a "billion laughs": 361 bytes that stand for 10**9 strings) in a translation file,
through PUT …/translations and `mad competitions translate`: refused at once, a 422 or a CLI message naming
the alias, before anything is expanded; nothing is stored and the server stays up. The server and the command
run in processes of their own capped at MEMORY_BYTES of address space, so that where the bomb is expanded (as
it was: a name that was no text was turned into text before its length was checked) they, not the test run,
run out of memory."""

import json
import os
import subprocess
import sys

import httpx
from sqlalchemy import func, select
from typer.testing import CliRunner

from app.cli.main import app as cli
from app.competitions.models import ClassTranslation
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.db.engine import create_db_engine, create_sessionmaker
from app.users.models import Role
from tests.conftest import bearer, make_user
from tests.reliability.test_faults import REPOSITORY, Server

MEMORY_BYTES = 2 * 1024**3
GIVE_UP_S = 600
"""Not a timing assertion: how long an expanding bomb may take to run out of MEMORY_BYTES before the test
gives up on it."""
TAXONOMY = {"root": "thing", "classes": ["clock", "fountain"], "children": {"thing": ["clock", "fountain"]}}
REFUSED = "the translation file is not CSV, YAML or JSON: aliases such as *a are not allowed"
CAPPED_CLI = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({MEMORY_BYTES}, {MEMORY_BYTES}))
from app.cli.main import app
app()
"""


def alias_bomb(levels: int = 9) -> str:
    """One row whose name is `levels` nested lists of ten aliases each: 10**levels strings once expanded
    (printed as text, about 5 GB at 9 levels)."""
    anchors = "abcdefghijklmnopqrstuvwxyz"
    nested = ["&a [l,l,l,l,l,l,l,l,l,l]"]
    nested += [f"&{anchors[i]} [" + ",".join([f"*{anchors[i - 1]}"] * 10) + "]" for i in range(1, levels)]
    return f"- {{class_id: clock, locale: de, x: [{', '.join(nested)}], name: *{anchors[levels - 1]}}}\n"


def translations_stored(database_url: str) -> int:
    engine = create_db_engine(database_url)
    try:
        with create_sessionmaker(engine)() as session:
            return session.scalar(select(func.count()).select_from(ClassTranslation))
    finally:
        engine.dispose()


def test_a_server_refuses_an_alias_bomb_at_once_and_stays_up(fresh_database_url, tmp_path):
    engine = create_db_engine(fresh_database_url)
    with create_sessionmaker(engine)() as session:
        spec = CompetitionCreate(name="bombed", taxonomy="custom", taxonomy_source=json.dumps(TAXONOMY))
        competition_id = create_competition(db_session=session, spec=spec).id
        headers = bearer(session, make_user(session, "boss", Role.admin))
        session.commit()
    engine.dispose()
    server = Server(fresh_database_url, tmp_path / "data", memory_bytes=MEMORY_BYTES)
    try:
        server.start()
        response = httpx.put(
            f"{server.url}/api/v1/competitions/{competition_id}/translations",
            files={"file": ("names.yaml", alias_bomb().encode())},
            headers=headers,
            timeout=GIVE_UP_S,
        )
        assert response.status_code == 422, response.text
        assert response.json()["detail"] == REFUSED
        assert server.healthy()
    finally:
        server.stop()
    assert translations_stored(fresh_database_url) == 0


def test_the_command_refuses_an_alias_bomb_with_a_message(fresh_database_url, tmp_path):
    env = {"MAD_DATABASE_URL": fresh_database_url, "MAD_DATA_DIR": str(tmp_path / "data")}
    taxonomy = tmp_path / "things.json"
    taxonomy.write_text(json.dumps(TAXONOMY))
    made = CliRunner().invoke(cli, ["competitions", "create", "things", "--taxonomy", str(taxonomy)], env=env)
    assert made.exit_code == 0, made.output
    bomb = tmp_path / "names.yaml"
    bomb.write_text(alias_bomb())
    ran = subprocess.run(
        [sys.executable, "-c", CAPPED_CLI, "competitions", "translate", "things", str(bomb)],
        cwd=REPOSITORY,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=GIVE_UP_S,
    )
    assert ran.returncode == 1 and REFUSED in ran.stderr, ran.stderr[-2000:]
    assert "Traceback" not in ran.stderr
    assert translations_stored(fresh_database_url) == 0
