"""Annotators in their own language, through the HTTP API, the pages and the CLI: the question and the class
name in the caller's language when the class has a name in it (from the taxonomy file or an imported
translation file), else in English and said so; the language from the account's setting, else the language
switch of the browser session, else Accept-Language; translation files checked row by row."""

import json
import re

import pytest
import yaml
from babel.dates import format_date
from sqlalchemy import event, select
from typer.testing import CliRunner

from app.cli.main import app as cli
from app.competitions.models import ClassTranslation, Competition
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.users.models import Role, User
from tests.conftest import bearer, make_user
from tests.labelling.factories import LabellingCalls, labelling_competition, sign_in

TAXONOMY = {
    "root": "thing",
    "classes": ["fountain", "clock", "unicorn", "umbrella"],
    "children": {"thing": ["fountain", "clock", "unicorn", "umbrella"]},
    "descriptions": {"fountain": "a jet of water"},
    "translations": {
        "de": {
            "names": {"fountain": "Springbrunnen", "clock": "Uhr", "unicorn": "Einhorn"},
            "descriptions": {"fountain": "ein Wasserstrahl"},
        },
        "es": {"names": {"fountain": "fuente"}},
    },
}
"""Four classes: three named in German (umbrella is not), one in Spanish."""


@pytest.fixture
def multilingual(db_session) -> Competition:
    """A competition on TAXONOMY with one pair of classifiers and four images of two questions each."""
    spec = CompetitionCreate(
        name="multilingual", taxonomy="custom", taxonomy_source=json.dumps(TAXONOMY), k=4
    )
    competition = create_competition(db_session=db_session, spec=spec)
    db_session.commit()
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=2)
    return competition


def questions(client, competition: Competition, headers: dict[str, str]) -> list[dict]:
    """The questions of every image the caller is handed, answered one after the other."""
    calls = LabellingCalls(client, competition.id, headers)
    asked, data = [], calls.post("next")
    while data["status"] == "item":
        item = data["item"]
        asked += item["questions"]
        answers = [{"question_id": q["question_id"], "answer": True} for q in item["questions"]]
        data = calls.post("answers", {"answers": answers, "next": True})["next"]
    return asked


def test_a_browser_asking_for_german_is_asked_in_german_where_a_class_has_a_german_name(
    client, db_session, multilingual, annotator
):
    headers = {**bearer(db_session, annotator), "Accept-Language": "de-CH, de;q=0.9, en;q=0.5"}
    asked = {q["class_name"]: q for q in questions(client, multilingual, headers)}
    assert set(asked) == {"Springbrunnen", "Uhr", "Einhorn", "umbrella"}
    assert asked["Springbrunnen"]["text"] == "Ist auf diesem Bild Folgendes zu sehen: Springbrunnen?"
    assert asked["Springbrunnen"]["definition"] == "ein Wasserstrahl"
    assert asked["Springbrunnen"]["language"] == "de"
    assert asked["umbrella"] == {
        **asked["umbrella"],
        "text": "Does this image contain an umbrella?",
        "language": "en",
    }


def test_the_accounts_language_comes_before_the_browsers(client, db_session, multilingual, annotator):
    annotator.locale = "es"
    db_session.commit()
    headers = {**bearer(db_session, annotator), "Accept-Language": "de"}
    asked = {q["class_name"]: q["text"] for q in questions(client, multilingual, headers)}
    assert asked["fuente"] == "¿Se ve en esta imagen lo siguiente: fuente?"
    assert asked["clock"] == "Does this image contain a clock?"


def test_an_imported_file_names_classes_for_the_next_request_and_shows_the_coverage(
    client, db_session, multilingual, annotator, admin_headers
):
    path = f"/api/v1/competitions/{multilingual.id}/translations"
    assert client.get(path, headers=admin_headers).json()["coverage"] == {"en": 1.0, "de": 0.75, "es": 0.25}
    rows = (
        "class_id,locale,name,description\n"
        "clock,es,reloj,un instrumento que mide el tiempo\n"
        "umbrella,es,paraguas,\n"
    )
    imported = client.put(path, files={"file": ("names.csv", rows.encode())}, headers=admin_headers)
    assert imported.status_code == 200, imported.text
    assert imported.json() == {"imported": {"es": 2}, "coverage": {"en": 1.0, "de": 0.75, "es": 0.75}}
    headers = {**bearer(db_session, annotator), "Accept-Language": "es"}
    asked = {q["class_name"]: q for q in questions(client, multilingual, headers)}
    assert set(asked) == {"fuente", "reloj", "paraguas", "unicorn"}
    assert asked["reloj"]["definition"] == "un instrumento que mide el tiempo"


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "t.csv",
            "class,locale,name\n",
            "the CSV header must name class_id, locale, name, description; missing: class_id",
        ),
        (
            "t.csv",
            "class_id,locale,name\nclock,fr,horloge\n",
            "row 1: locale 'fr' is not one of the pages' languages",
        ),
        (
            "t.csv",
            "class_id,locale,name\nclock,en,clock\n",
            "row 1: locale 'en' is not one of the pages' languages",
        ),
        ("t.csv", "class_id,locale,name\nclock,de,\n", "row 1: the name of class 'clock' is empty"),
        (
            "t.csv",
            "class_id,locale,name\nkettle,de,Kessel\n",
            "row 1: 'kettle' is not a class of multilingual",
        ),
        (
            "t.csv",
            "class_id,locale,name\nclock,de,Uhr\nclock,de,Wecker\n",
            "row 2: class 'clock' in de is also row 1",
        ),
        (
            "t.csv",
            "class_id,locale,name\nclock,de,Uhr\nunicorn,de,uhr\n",
            "row 2: 'uhr' is already the de name of class 'clock'",
        ),
        ("t.yaml", "clock: Uhr\n", "a YAML or JSON translation file is a list of mappings"),
        ("t.yaml", "[", "the translation file is not CSV, YAML or JSON"),
        (
            "t.yaml",
            "- {class_id: clock, locale: de, x: &u [Uhr], name: *u}\n",
            "not CSV, YAML or JSON: aliases such as *u are not allowed",  # the bomb: test_alias_bombs.py
        ),
        (
            "t.yaml",
            "- {class_id: clock, locale: de, name: [Uhr, Wecker]}\n",
            "row 1: name is a list, not text",
        ),
        ("t.yaml", "- {class_id: clock, locale: de, name: yes}\n", "row 1: name is a bool, not text"),
        ("t.json", "[" * 5000 + "]" * 5000, "not CSV, YAML or JSON: it is nested too deeply to read"),
        ("t.csv", "", "the CSV header must name"),
        ("t.json", "[]", "the translation file has no rows"),
    ],
)
def test_a_bad_translation_file_is_refused_and_nothing_is_stored(
    client, db_session, multilingual, admin_headers, name, content, message
):
    path = f"/api/v1/competitions/{multilingual.id}/translations"
    response = client.put(path, files={"file": (name, content.encode())}, headers=admin_headers)
    assert response.status_code == 422, response.text
    assert message in response.json()["detail"]
    assert db_session.scalars(select(ClassTranslation)).all() == []


def test_a_translation_file_over_its_own_limit_is_refused_with_413(
    client, db_session, multilingual, admin_headers, settings
):
    rows = b"class_id,locale,name\nclock,de,Uhr\n"
    settings.max_translation_bytes = len(rows) - 1
    path = f"/api/v1/competitions/{multilingual.id}/translations"
    response = client.put(path, files={"file": ("t.csv", rows)}, headers=admin_headers)
    assert response.status_code == 413, response.text
    detail = response.json()["detail"]
    assert detail == f"the translation file is {len(rows)} bytes; at most {len(rows) - 1} are taken" + (
        " (MAD_MAX_TRANSLATION_BYTES)"
    )
    assert db_session.scalars(select(ClassTranslation)).all() == []
    settings.max_translation_bytes = len(rows)
    assert client.put(path, files={"file": ("t.csv", rows)}, headers=admin_headers).status_code == 200


def test_only_an_admin_imports_translations(client, db_session, multilingual, annotator):
    path = f"/api/v1/competitions/{multilingual.id}/translations"
    rows = b"class_id,locale,name\nclock,de,Uhr\n"
    response = client.put(path, files={"file": ("t.csv", rows)}, headers=bearer(db_session, annotator))
    assert response.status_code == 403


def test_the_command_imports_yaml_and_says_what_each_language_covers(tmp_path, fresh_database_url):
    env = {
        "MAD_DATABASE_URL": fresh_database_url,
        "MAD_DATA_DIR": str(tmp_path / "data"),
        "MAD_ENV": "development",
    }
    taxonomy = tmp_path / "things.yaml"
    taxonomy.write_text(yaml.safe_dump(TAXONOMY))
    created = CliRunner().invoke(
        cli, ["competitions", "create", "things", "--taxonomy", str(taxonomy)], env=env
    )
    assert created.exit_code == 0, created.output
    file = tmp_path / "names.yaml"
    file.write_text(yaml.safe_dump([{"class_id": "umbrella", "locale": "de", "name": "Regenschirm"}]))
    result = CliRunner().invoke(cli, ["competitions", "translate", "things", str(file)], env=env)
    assert result.exit_code == 0, result.output
    assert "de: 1 class names imported." in result.output
    assert "Classes named per language: en 100%, de 100%, es 25%" in result.output
    bad = tmp_path / "bad.csv"
    bad.write_text("class_id,locale,name\numbrella,xx,Regenschirm\n")
    refused = CliRunner().invoke(cli, ["competitions", "translate", "things", str(bad)], env=env)
    assert refused.exit_code == 1
    assert "row 1: locale 'xx' is not one of the pages' languages" in refused.output
    small = {**env, "MAD_MAX_TRANSLATION_BYTES": str(file.stat().st_size - 1)}
    too_large = CliRunner().invoke(cli, ["competitions", "translate", "things", str(file)], env=small)
    assert too_large.exit_code == 1
    assert f"the translation file is {file.stat().st_size} bytes; at most" in too_large.output


def test_the_pages_follow_accept_language_then_the_switch_then_the_account(client, db_session, annotator):
    assert '<html lang="de">' in client.get("/login", headers={"Accept-Language": "de"}).text
    assert ">Anmelden</h1>" in client.get("/login", headers={"Accept-Language": "de"}).text
    page = client.get("/login", headers={"Accept-Language": "es-MX,es;q=0.9"}).text
    assert ">Iniciar sesión</h1>" in page
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    switched = client.post(
        "/language", data={"locale": "de", "next": "/login", "csrf_token": csrf}, follow_redirects=False
    )
    assert switched.status_code == 303 and switched.headers["location"] == "/login"
    assert ">Anmelden</h1>" in client.get("/login", headers={"Accept-Language": "es"}).text
    unknown = client.post("/language", data={"locale": "xx", "next": "/", "csrf_token": csrf})
    assert unknown.status_code == 422
    sign_in(client, annotator.username)
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/account").text).group(1)
    client.post("/language", data={"locale": "es", "next": "/account", "csrf_token": csrf})
    db_session.expire_all()
    assert db_session.get(User, annotator.id).locale == "es"
    account = client.get("/account", headers={"Accept-Language": "de"}).text
    assert ">Tu cuenta</h1>" in account
    made = annotator.created_at
    assert f"Tu cuenta se creó el {made.day} {format_date(made, 'MMM', locale='es')} {made.year}." in account


def test_the_guidelines_name_the_classes_in_the_readers_language_and_count_the_english_ones(
    client, multilingual
):
    page = client.get(f"/competitions/{multilingual.id}/guidelines", headers={"Accept-Language": "de"}).text
    assert "<dt>Springbrunnen</dt><dd>ein Wasserstrahl</dd>" in page
    assert "<dt>umbrella</dt>" in page
    assert "1 dieser Klassen haben noch keinen deutschen Namen" in page
    english = client.get(f"/competitions/{multilingual.id}/guidelines").text
    assert "<dt>fountain</dt><dd>a jet of water</dd>" in english and "classes-in-english" not in english


def test_the_admin_page_shows_the_share_of_classes_each_language_names(client, multilingual, admin):
    sign_in(client, admin.username)
    page = client.get(f"/admin/competitions/{multilingual.id}").text
    rows = re.findall(r'<th scope="row">([^<]+)</th><td>(\d+) %</td>', page)
    assert rows == [("English (en)", "100"), ("Deutsch (de)", "75"), ("Español (es)", "25")]


def test_asking_in_german_costs_no_statement_more_than_in_english(
    client, db_session, multilingual, backend, engine
):
    if backend != "sqlite":
        pytest.skip("on Postgres the hot statements run on psycopg itself, past SQLAlchemy's events")
    callers = [make_user(db_session, name, Role.annotator) for name in ("first", "english", "german")]
    path = f"/api/v1/competitions/{multilingual.id}/labelling/next"

    def statements(user: User, language: str) -> int:
        """The SQL statements of one POST …/next by this caller, asking for this language."""
        run = []
        counting = lambda *arguments: run.append(arguments[2])  # noqa: E731
        event.listen(engine, "before_cursor_execute", counting)
        try:
            response = client.post(path, headers={**bearer(db_session, user), "Accept-Language": language})
        finally:
            event.remove(engine, "before_cursor_execute", counting)
        assert response.status_code == 200 and response.json()["status"] == "item"
        return len(run)

    assert statements(callers[0], "de") == statements(callers[1], "en") + 2  # the label set, read once here
    assert statements(callers[2], "de") == statements(make_user(db_session, "other", Role.annotator), "en")
