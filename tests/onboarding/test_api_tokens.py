"""API tokens are listed (names, when made and last used: never the tokens), revoked one at a time (API, CLI,
admin page), and ended by a new password or a deactivation unless kept on purpose."""

import re

import pytest
from typer.testing import CliRunner

from app.cli.main import app as cli
from app.users.models import Role
from tests.conftest import TEST_PASSWORD, make_user
from tests.onboarding.test_invitations import form_token

NEW_PASSWORD = "a fresh passphrase"


@pytest.fixture
def alice(db_session):
    return make_user(db_session, "alice", Role.annotator)


def issue(client, admin_headers, user_id: int, name: str) -> dict[str, str]:
    """Bearer headers of a new token issued through the API."""
    response = client.post(f"/api/v1/users/{user_id}/tokens", json={"name": name}, headers=admin_headers)
    assert response.status_code == 201, response.text
    return {"Authorization": f"Bearer {response.json()['token']}"}


def works(client, headers) -> bool:
    """Whether the token signs in (200) rather than being refused (401)."""
    status = client.get("/api/v1/me", headers=headers).status_code
    assert status in (200, 401)
    return status == 200


def test_tokens_are_listed_by_name_and_revoked_one_at_a_time(client, admin_headers, annotator_headers, alice):
    laptop = issue(client, admin_headers, alice.id, "laptop")
    script = issue(client, admin_headers, alice.id, "nightly script")
    assert works(client, laptop)
    listed = client.get(f"/api/v1/users/{alice.id}/tokens", headers=admin_headers)
    assert listed.status_code == 200
    assert [(t["username"], t["name"]) for t in listed.json()] == [
        ("alice", "laptop"),
        ("alice", "nightly script"),
    ]
    assert listed.json()[0]["last_used_at"] is not None and listed.json()[1]["last_used_at"] is None
    assert "mad_" not in listed.text and "hash" not in listed.text  # neither tokens nor their hashes

    laptop_id = listed.json()[0]["id"]
    revoked = client.delete(f"/api/v1/users/{alice.id}/tokens/{laptop_id}", headers=admin_headers)
    assert revoked.status_code == 200 and revoked.json()["name"] == "laptop"
    assert not works(client, laptop) and works(client, script)
    again = client.delete(f"/api/v1/users/{alice.id}/tokens/{laptop_id}", headers=admin_headers)
    assert again.status_code == 404 and again.json()["code"] == "not_found"
    (left,) = client.get(f"/api/v1/users/{alice.id}/tokens", headers=admin_headers).json()
    assert left["name"] == "nightly script"

    assert client.get(f"/api/v1/users/{alice.id}/tokens", headers=annotator_headers).status_code == 403
    assert client.delete(f"/api/v1/users/{alice.id}/tokens/{left['id']}", headers=script).status_code == 403
    assert client.get("/api/v1/users/99999/tokens", headers=admin_headers).status_code == 404


def test_a_new_password_revokes_the_tokens_unless_kept(client, admin_headers, alice):
    kept = issue(client, admin_headers, alice.id, "kept")
    body = {"password": NEW_PASSWORD, "keep_tokens": True}
    assert (
        client.put(f"/api/v1/users/{alice.id}/password", json=body, headers=admin_headers).status_code == 200
    )
    assert works(client, kept)
    body = {"password": NEW_PASSWORD + "!"}
    assert (
        client.put(f"/api/v1/users/{alice.id}/password", json=body, headers=admin_headers).status_code == 200
    )
    assert not works(client, kept)
    assert client.get(f"/api/v1/users/{alice.id}/tokens", headers=admin_headers).json() == []

    own = issue(client, admin_headers, alice.id, "own")  # a person changing their own password
    change = {"current_password": NEW_PASSWORD + "!", "new_password": TEST_PASSWORD, "keep_tokens": True}
    assert client.put("/api/v1/me/password", json=change, headers=own).status_code == 200
    assert works(client, own)
    change = {"current_password": TEST_PASSWORD, "new_password": NEW_PASSWORD}
    assert client.put("/api/v1/me/password", json=change, headers=own).status_code == 200
    assert not works(client, own)


def test_a_deactivation_revokes_the_tokens_unless_kept(client, admin_headers, alice):
    kept = issue(client, admin_headers, alice.id, "kept")
    for keep_tokens, still_works in ((True, True), (False, False)):
        off = {"is_active": False, "keep_tokens": keep_tokens}
        assert client.patch(f"/api/v1/users/{alice.id}", json=off, headers=admin_headers).status_code == 200
        assert not works(client, kept)  # a deactivated account's tokens never work
        on = {"is_active": True}
        assert client.patch(f"/api/v1/users/{alice.id}", json=on, headers=admin_headers).status_code == 200
        assert works(client, kept) == still_works


def sign_in(client, username: str) -> None:
    """Sign the client in with the test password."""
    page = client.get("/login").text
    form = {"username": username, "password": TEST_PASSWORD, "csrf_token": form_token(page)}
    assert client.post("/login", data=form, follow_redirects=False).status_code == 303


def test_the_admin_page_lists_tokens_with_a_revoke_button_each(client, admin, admin_headers, alice):
    issue(client, admin_headers, alice.id, "laptop")
    sign_in(client, "admin")
    page = client.get("/admin").text
    table = re.search(r'<table[^>]* id="tokens-table">.*?</table>', page, re.S).group(0)
    rows = re.findall(r'<tr data-token="(\d+)">\s*<th scope="row">(\w+)</th>\s*<td>([^<]+)</td>', table)
    assert [(user, name) for _, user, name in rows] == [("admin", "test"), ("alice", "laptop")]
    laptop_id = rows[1][0]
    revoke = f'data-method="DELETE" action="/api/v1/users/{alice.id}/tokens/{laptop_id}"'
    assert revoke in table and "mad_" not in page
    assert 'data-action="/api/v1/users/{user_id}/tokens" id="issue-token"' in page
    assert 'name="keep_tokens"' in page  # the set-password form offers to keep them


def test_the_account_page_offers_to_keep_tokens_only_to_who_has_some(client, admin_headers, alice):
    sign_in(client, "alice")
    assert 'name="keep_tokens"' not in client.get("/account").text
    issue(client, admin_headers, alice.id, "laptop")
    assert "Keep my 1 API token working" in client.get("/account").text


def test_the_command_line_lists_and_revokes_tokens_and_revokes_them_on_a_new_password(
    tmp_path, fresh_database_url
):
    env = {
        "MAD_DATABASE_URL": fresh_database_url,
        "MAD_DATA_DIR": str(tmp_path / "data"),
        "MAD_ENV": "development",
    }
    runner = CliRunner()

    def mad(*args: str) -> str:
        result = runner.invoke(cli, list(args), env=env)
        assert result.exit_code == 0, (args, result.output)
        return " ".join(result.output.replace("│", " ").split())

    mad("users", "add", "bob", "--password", TEST_PASSWORD)
    first = mad("users", "token", "add", "bob", "--name", "laptop")
    mad("users", "token", "add", "Bob", "--name", "script")
    assert first.startswith("mad_")
    listed = mad("users", "token", "list", "bob")
    ids = dict((name, int(id_)) for id_, name in re.findall(r"(\d+) bob (laptop|script)", listed))
    assert set(ids) == {"laptop", "script"} and "never" in listed and first not in listed
    assert (
        mad("users", "token", "revoke", str(ids["laptop"]))
        == f"Revoked token {ids['laptop']} (laptop) of bob."
    )
    assert "laptop" not in mad("users", "token", "list") and "script" in mad("users", "token", "list")
    unknown = runner.invoke(cli, ["users", "token", "revoke", str(ids["laptop"])], env=env)
    assert unknown.exit_code == 1 and f"no API token with id {ids['laptop']}" in unknown.output

    kept = mad("users", "password", "bob", "--password", NEW_PASSWORD, "--keep-tokens")
    assert kept == "New password set for bob." and "script" in mad("users", "token", "list", "bob")
    assert mad("users", "password", "bob", "--password", TEST_PASSWORD) == (
        "New password set for bob and revoked their 1 API token."
    )
    assert mad("users", "token", "list", "bob") == "No API tokens of bob."
    mad("users", "token", "add", "bob", "--name", "again")
    assert mad("users", "deactivate", "bob", "--keep-tokens") == "Deactivated bob."
    assert "again" in mad("users", "token", "list")
    assert mad("users", "deactivate", "bob") == "Deactivated bob and revoked their 1 API token."
    assert mad("users", "token", "list") == "No API tokens."
