"""The `mad` command line against a real database: setup, accounts, competitions, image import."""

import json
import os
import subprocess
import sys

import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from app.cli.main import app as cli
from app.competitions.models import Competition
from app.db.engine import create_db_engine, create_sessionmaker
from app.images.models import CompetitionImage, Image
from app.users.models import User
from tests.support.images import image_bytes, write_images

runner = CliRunner()


@pytest.fixture
def cli_env(tmp_path, fresh_database_url):
    """Environment for a CLI run on a database of its own."""
    return {
        "MAD_DATABASE_URL": fresh_database_url,
        "MAD_DATA_DIR": str(tmp_path / "data"),
        "MAD_ENV": "development",
    }


def invoke(env, *args, input=None):
    return runner.invoke(cli, list(args), env=env, input=input, catch_exceptions=False)


def unboxed(output: str) -> str:
    """Typer's error box without its frame and line breaks: it wraps at the terminal's width, so a long
    temporary path can break a phrase across lines."""
    return " ".join(output.replace("│", " ").split())


def query(url, statement):
    engine = create_db_engine(url)
    try:
        with create_sessionmaker(engine)() as session:
            return session.execute(statement).all()
    finally:
        engine.dispose()


def test_every_command_explains_itself():
    for command in (
        ["--help"],
        ["db", "upgrade", "--help"],
        ["serve", "--help"],
        ["users", "add", "--help"],
        ["competitions", "create", "--help"],
        ["images", "import", "--help"],
    ):
        result = runner.invoke(cli, command, terminal_width=200)
        assert result.exit_code == 0, command
        assert "Usage" in result.output


def test_db_upgrade_makes_an_empty_database_usable(database_factory, tmp_path):
    env = {"MAD_DATABASE_URL": database_factory.empty_url(), "MAD_DATA_DIR": str(tmp_path / "data")}
    refused = invoke(env, "users", "list")
    assert refused.exit_code == 1 and "mad db upgrade" in refused.output
    assert invoke(env, "db", "upgrade").exit_code == 0
    assert invoke(env, "users", "add", "root", "--role", "admin", "--password", "long enough").exit_code == 0


def test_users_add_prompts_for_a_password_and_can_issue_a_token(cli_env):
    result = invoke(
        cli_env, "users", "add", "alice", "--role", "annotator", "--token", input="s3cret-pass\ns3cret-pass\n"
    )
    assert result.exit_code == 0, result.output
    assert "mad_" in result.output
    (user,) = query(cli_env["MAD_DATABASE_URL"], select(User))
    assert user[0].username == "alice" and user[0].password_hash.startswith("$argon2id$")
    again = invoke(cli_env, "users", "add", "alice", "--password", "whatever12")
    assert again.exit_code == 1 and "is taken" in again.output


def test_users_password_deactivate_and_reactivate(cli_env):
    from app.security import verify_password

    assert invoke(cli_env, "users", "add", "bob", "--password", "first password").exit_code == 0
    changed = invoke(cli_env, "users", "password", "bob", input="second password\nsecond password\n")
    assert changed.exit_code == 0 and "New password set for bob" in changed.output
    ((user,),) = query(cli_env["MAD_DATABASE_URL"], select(User))
    assert verify_password(user.password_hash, "second password")
    assert not verify_password(user.password_hash, "first password")
    short = invoke(cli_env, "users", "password", "bob", "--password", "short")
    assert short.exit_code == 1 and "at least 8 characters" in short.output
    assert invoke(cli_env, "users", "password", "nobody", "--password", "long enough").exit_code == 1

    assert invoke(cli_env, "users", "deactivate", "bob").exit_code == 0
    listed = runner.invoke(cli, ["users", "list"], env=cli_env, terminal_width=200)
    assert "deactivated" in listed.output
    assert query(cli_env["MAD_DATABASE_URL"], select(User.is_active)) == [(False,)]
    assert invoke(cli_env, "users", "reactivate", "bob").exit_code == 0
    assert query(cli_env["MAD_DATABASE_URL"], select(User.is_active)) == [(True,)]


def test_help_wraps_whole_sentences_to_the_terminal():
    """Docstring paragraphs are unwrapped, so that every line of a paragraph but its last fills the terminal
    (Typer kept the source's line breaks, which broke sentences mid-way)."""
    for width in (100, 140):
        output = runner.invoke(cli, ["classifiers", "add", "--help"], env={"COLUMNS": str(width)}).output
        prose = [line.strip() for line in output.split("╭")[0].splitlines()[3:]]
        for line, after in zip(prose, prose[1:], strict=False):
            assert not (line and after) or len(line) > width - 25, (width, line)


def test_import_of_a_thousand_images_with_bad_ones_and_a_duplicate(cli_env, tmp_path):
    folder = tmp_path / "corpus"
    write_images(folder, 1000)
    (folder / "duplicate.png").write_bytes((folder / "part0" / "image_00000.png").read_bytes())
    (folder / "truncated.jpg").write_bytes(image_bytes(5000, "JPEG")[:150])
    (folder / "readme.txt").write_text("not an image")
    (folder / "animation.gif").write_bytes(image_bytes(5001, "GIF"))
    os.symlink("/etc/hostname", folder / "escape.png")

    assert invoke(cli_env, "competitions", "create", "corpus-test").exit_code == 0
    result = runner.invoke(
        cli, ["images", "import", str(folder), "-c", "corpus-test"], env=cli_env, terminal_width=200
    )

    assert result.exit_code == 0, result.output
    assert "1000 added, 1 duplicates, 4 rejected" in result.output
    for bad in ("truncated.jpg", "readme.txt", "animation.gif", "escape.png"):
        assert bad in result.output
    url = cli_env["MAD_DATABASE_URL"]
    assert query(url, select(func.count()).select_from(Image)) == [(1000,)]
    ordinals = [
        row[0] for row in query(url, select(CompetitionImage.ordinal).order_by(CompetitionImage.ordinal))
    ]
    assert ordinals == list(range(1000))
    stored = list((tmp_path / "data" / "images").rglob("*.*"))
    assert len(stored) == 1000


def test_import_errors_say_what_to_do(cli_env, tmp_path):
    invoke(cli_env, "db", "upgrade")
    missing = invoke(cli_env, "images", "import", str(tmp_path / "nowhere"), "-c", "x")
    assert missing.exit_code == 1 and "does not exist" in missing.output
    (tmp_path / "one.png").write_bytes(image_bytes(1))
    unknown = invoke(cli_env, "images", "import", str(tmp_path / "one.png"), "-c", "nope")
    assert unknown.exit_code == 1 and "mad competitions list" in unknown.output


def test_competition_create_takes_guidelines_from_a_file(cli_env, tmp_path):
    guidelines = tmp_path / "guidelines.txt"
    guidelines.write_text("Answer yes for any part of the class.\n\nFlag screenshots.")
    assert invoke(cli_env, "competitions", "create", "guided", "--guidelines", str(guidelines)).exit_code == 0
    assert query(cli_env["MAD_DATABASE_URL"], select(Competition.guidelines)) == [(guidelines.read_text(),)]
    missing = invoke(
        cli_env, "competitions", "create", "unguided", "--guidelines", str(tmp_path / "none.txt")
    )
    assert missing.exit_code == 2 and "does not exist" in unboxed(missing.output)


def test_competition_create_validates_its_parameters(cli_env, tmp_path):
    even = invoke(cli_env, "competitions", "create", "x", "--panel", "4")
    assert even.exit_code == 1 and "odd" in even.output
    bad_file = tmp_path / "tax.yaml"
    bad_file.write_text("root: a\nclasses: [b]\nchildren: {a: [b], b: [a]}\n")
    cyclic = invoke(cli_env, "competitions", "create", "y", "--taxonomy", str(bad_file))
    assert cyclic.exit_code == 1 and "taxonomy" in cyclic.output


def test_the_cli_and_the_server_start_without_torch():
    """torch and timm load only where a model runs (worker, demo, registering timm weights)."""
    check = "import sys, app.cli.main, app.main; print(sorted({'torch', 'timm'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


EVERY_HELP_AND_AN_ARGUMENT_ERROR = """
import contextlib, io, json, sys
import typer
from app.cli.main import app

def paths(command, prefix):
    yield prefix
    for name, sub in getattr(command, "commands", {}).items():
        yield from paths(sub, [*prefix, name])

runs = [[*path, "--help"] for path in paths(typer.main.get_command(app), [])]
runs += [["classifiers", "add"], ["users", "add", "x", "--role", "nobody"], ["demo", "--images", "3"]]
codes = {}
for args in runs:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            app(args)
        except SystemExit as exit:
            codes[" ".join(args)] = exit.code
print(json.dumps({"codes": codes, "loaded": sorted({name.split(".")[0] for name in sys.modules})}))
"""


def test_help_and_argument_errors_load_no_heavy_package():
    """`mad --help`, every subcommand's help and argument errors answer at once: torch, the database layer
    and numpy load only in the command that needs them (each command imports its domain). Typer itself
    loads pydantic to read a command's parameters."""
    run = subprocess.run(
        [sys.executable, "-c", EVERY_HELP_AND_AN_ARGUMENT_ERROR], capture_output=True, text=True, check=True
    )
    report = json.loads(run.stdout)
    helps = {args: code for args, code in report["codes"].items() if args.endswith("--help")}
    assert len(helps) >= 25 and set(helps.values()) == {0}, helps
    assert report["codes"]["classifiers add"] == 2 and report["codes"]["demo --images 3"] == 2
    assert report["codes"]["users add x --role nobody"] == 2
    heavy = {"torch", "timm", "numpy", "scipy", "sqlalchemy", "alembic", "PIL", "httpx", "fastapi"}
    assert heavy & set(report["loaded"]) == set()
