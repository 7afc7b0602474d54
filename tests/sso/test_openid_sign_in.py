"""Signing in through a real OpenID provider (tests/sso/provider, on 127.0.0.1), over HTTP on both databases:
who may join (an allowed, verified domain or an invitation the first sign-in uses up), accounts linked by
the provider's issuer and subject whatever the e-mail says, sign-out, password sign-in turned off (and how
an admin still gets in), and every way the provider's answer can be wrong, each answered by the site's
error page with nobody signed in."""

import json
import re
import socket
import time
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from sqlalchemy import func, select
from typer.testing import CliRunner

from app.cli.main import app as cli
from app.main import create_app
from app.settings import Settings
from app.users.invitations import create_invitation
from app.users.models import OpenIDIdentity, Role, User
from app.users.service import set_active
from tests.conftest import TEST_PASSWORD, bearer, settings_for
from tests.labelling.factories import sign_in
from tests.reliability.test_access import OFF_SITE_TARGETS
from tests.sso.conftest import ALLOWED_DOMAIN, DISPLAY_NAME, MISCHIEFS, NAME, form_field, through_the_provider

HTML = {"accept": "text/html"}
FAILED = "<h1>Sign-in did not work</h1>"


def start(
    client: TestClient,
    *,
    path: str = "/login",
    next: str = "/",
    invitation: str | None = None,
    link: bool = False,
) -> str:
    """Press the provider's button on the page at `path`: the authorization URL the site redirects to."""
    data = {"csrf_token": form_field(client.get(path).text, "csrf_token"), "next": next}
    if invitation is not None:
        data["invitation"] = invitation
    if link:
        data["link"] = "true"
    answer = client.post(f"/login/sso/{NAME}", data=data, headers=HTML, follow_redirects=False)
    assert answer.status_code == 302, answer.text
    return answer.headers["location"]


def sign_in_as(client: TestClient, provider, sub: str, **starting):
    """The site's answer once `sub` has signed in on the provider's login page."""
    callback = through_the_provider(start(client, **starting), provider.issuer, sub)
    return client.get(callback, headers=HTML, follow_redirects=False)


def sign_out(client: TestClient) -> None:
    csrf = form_field(client.get("/").text, "csrf_token")
    assert client.post("/logout", data={"csrf_token": csrf}, follow_redirects=False).status_code == 303


def me(client: TestClient) -> dict | None:
    """The signed-in account, or None."""
    answer = client.get("/api/v1/me")
    return answer.json() if answer.status_code == 200 else None


def identities(db_session) -> list[tuple[str, str, str | None, int]]:
    return db_session.execute(
        select(OpenIDIdentity.issuer, OpenIDIdentity.subject, OpenIDIdentity.email, OpenIDIdentity.user_id)
    ).all()


def test_a_person_of_an_allowed_domain_joins_signs_out_and_comes_back_to_the_same_account(
    client, provider, db_session
):
    provider.account("ada", f"ada@{ALLOWED_DOMAIN}")
    authorization = start(client, next="/account")
    asked = parse_qs(urlsplit(authorization).query)
    assert asked["code_challenge_method"] == ["S256"] and len(asked["code_challenge"][0]) == 43
    assert asked["state"][0] and asked["nonce"][0] and asked["scope"] == ["openid email profile"]
    answer = client.get(through_the_provider(authorization, provider.issuer, "ada"), follow_redirects=False)
    assert answer.status_code == 303 and answer.headers["location"] == "/account"
    joined = me(client)
    assert joined is not None and (joined["username"], joined["role"]) == ("ada", "annotator")
    assert identities(db_session) == [(provider.issuer, "ada", f"ada@{ALLOWED_DOMAIN}", joined["id"])]
    assert f"You can sign in with {DISPLAY_NAME} (ada@{ALLOWED_DOMAIN})" in client.get("/account").text
    assert "Change your password" not in client.get("/account").text  # she has none

    session_cookie = client.cookies["mad_session"]
    sign_out(client)
    assert me(client) is None
    client.cookies.set("mad_session", session_cookie)  # the ended session's cookie, kept by someone
    assert me(client) is None

    assert sign_in_as(client, provider, "ada").status_code == 303
    assert me(client) == joined
    assert db_session.scalar(select(func.count()).select_from(User)) == 1


def test_the_page_after_a_sign_in_is_never_off_the_site(client, provider):
    provider.account("nora", f"nora@{ALLOWED_DOMAIN}")
    for target in OFF_SITE_TARGETS:
        answer = sign_in_as(client, provider, "nora", next=target)
        assert (answer.status_code, answer.headers["location"]) == (303, "/"), target
        sign_out(client)
    assert sign_in_as(client, provider, "nora", next="/account?tab=1").headers["location"] == "/account?tab=1"


def test_an_email_changed_at_the_provider_keeps_the_account_and_updates_its_address(
    client, provider, db_session
):
    provider.account("grace", f"grace@{ALLOWED_DOMAIN}")
    assert sign_in_as(client, provider, "grace").status_code == 303
    grace = me(client)
    sign_out(client)
    provider.account("grace", "grace.hopper@navy.example")  # not an allowed domain: she is linked already
    assert sign_in_as(client, provider, "grace").status_code == 303
    assert me(client) == grace
    assert identities(db_session) == [(provider.issuer, "grace", "grace.hopper@navy.example", grace["id"])]

    sign_out(client)  # her old address, now someone else's at the provider, makes another account
    provider.account("another-grace", f"grace@{ALLOWED_DOMAIN}")
    assert sign_in_as(client, provider, "another-grace").status_code == 303
    other = me(client)
    assert other is not None and other["id"] != grace["id"] and other["username"] == "another-grace"


@pytest.mark.parametrize(
    ("email", "verified", "reason"),
    [
        ("eve@elsewhere.example", True, "may not join through Test provider by itself"),
        (f"eve@{ALLOWED_DOMAIN}", False, f"has not verified eve@{ALLOWED_DOMAIN}"),
        (f"eve@evil-{ALLOWED_DOMAIN}", True, "may not join"),
        (None, True, "gave no e-mail address"),
    ],
)
def test_a_person_neither_a_domain_nor_an_invitation_admits_is_refused(
    client, provider, db_session, email, verified, reason
):
    provider.account("eve", email, email_verified=verified)
    answer = sign_in_as(client, provider, "eve")
    assert answer.status_code == 403 and FAILED in answer.text
    assert reason in answer.text and "ask an admin for an invitation link" in answer.text
    assert me(client) is None and identities(db_session) == []
    assert db_session.scalar(select(func.count()).select_from(User)) == 0


def test_an_invitation_is_used_up_by_the_first_sign_in_and_gives_its_role(
    client, provider, db_session, admin
):
    invitation, token = create_invitation(
        db_session=db_session, role=Role.admin, note="ida", valid_hours=1, created_by=admin
    )
    db_session.commit()
    page = client.get(f"/invitations/{token}").text
    assert f"Join with {DISPLAY_NAME}" in page and form_field(page, "invitation") == token
    provider.account("ida", "ida@elsewhere.example")  # no allowed domain: the invitation admits her
    answer = sign_in_as(client, provider, "ida", path=f"/invitations/{token}", invitation=token)
    assert answer.status_code == 303 and answer.headers["location"] == "/admin"
    ida = me(client)
    assert ida is not None and ida["role"] == "admin"
    db_session.refresh(invitation)
    assert invitation.used_at is not None and invitation.user_id == ida["id"]

    sign_out(client)
    assert client.get(f"/invitations/{token}", headers=HTML).status_code == 404
    provider.account("ivan", "ivan@elsewhere.example")
    again = sign_in_as(client, provider, "ivan", invitation=token)
    assert again.status_code == 404 and "expired or was already used" in again.text
    assert me(client) is None and [row[1] for row in identities(db_session)] == ["ida"]


def test_a_replayed_or_misdelivered_answer_signs_nobody_in(client, app, provider):
    provider.account("rita", f"rita@{ALLOWED_DOMAIN}")
    callback = through_the_provider(start(client), provider.issuer, "rita")
    with TestClient(app) as another_browser:  # the answer delivered to a browser that did not ask for it
        misdelivered = another_browser.get(callback, headers=HTML)
        assert (
            misdelivered.status_code == 400
            and "already finished, or was started in another" in misdelivered.text
        )
        german = another_browser.get(callback, headers={**HTML, "Accept-Language": "de"})
        assert german.status_code == 400 and "<h1>Die Anmeldung hat nicht geklappt</h1>" in german.text
        assert "Diese Anmeldung wurde bereits abgeschlossen oder in einem anderen Browser" in german.text
        assert me(another_browser) is None
    session_cookie = client.cookies["mad_session"]  # with the sign-in's state, nonce and PKCE verifier
    assert client.get(callback, follow_redirects=False).status_code == 303
    rita = me(client)

    replayed = client.get(callback, headers=HTML)  # its state is used up
    assert replayed.status_code == 400 and "already finished" in replayed.text and me(client) == rita
    sign_out(client)
    client.cookies.set("mad_session", session_cookie)  # the state is back, but the code was used
    reused = client.get(callback, headers=HTML)
    assert reused.status_code == 400 and "refused the sign-in (invalid_grant" in reused.text
    assert me(client) is None


def test_an_expired_code_signs_nobody_in(client, provider):
    provider.configure(code_ttl_s=1)
    provider.account("slow", f"slow@{ALLOWED_DOMAIN}")
    callback = through_the_provider(start(client), provider.issuer, "slow")
    time.sleep(2.5)
    answer = client.get(callback, headers=HTML)
    assert answer.status_code == 400 and FAILED in answer.text and "invalid_grant" in answer.text
    assert me(client) is None


FAILED_CHECK = {
    "tampered-claims": "bad_signature",
    "unsigned": "unsupported_algorithm",
    "wrong-issuer": "invalid_claim: Invalid claim: &#39;iss&#39;",
    "wrong-audience": "invalid_claim: Invalid claim: &#39;aud&#39;",
    "expired": "expired_token",
    "wrong-nonce": "invalid_claim: Invalid claim: &#39;nonce&#39;",
}


@pytest.mark.parametrize("mischief", MISCHIEFS)
def test_an_id_token_that_fails_a_check_signs_nobody_in(client, provider, db_session, mischief):
    provider.account("mallory", f"mallory@{ALLOWED_DOMAIN}")
    provider.configure(mischief=mischief)
    answer = sign_in_as(client, provider, "mallory")
    assert answer.status_code == 400 and FAILED in answer.text
    assert "Test provider&#39;s ID token failed its check (" + FAILED_CHECK[mischief] in answer.text
    assert "Traceback" not in answer.text
    assert me(client) is None and identities(db_session) == []


def test_an_id_token_about_another_subject_than_the_user_info_signs_nobody_in(client, provider, db_session):
    provider.account("mallory", f"mallory@{ALLOWED_DOMAIN}")
    provider.account("someone-else", f"someone@{ALLOWED_DOMAIN}")
    provider.configure(mischief="another-subject")  # validly signed, but not about who signed in
    answer = sign_in_as(client, provider, "mallory")
    assert (
        answer.status_code == 400 and "Test provider&#39;s user info is about another account" in answer.text
    )
    assert me(client) is None and identities(db_session) == []


def test_an_answer_naming_another_issuer_signs_nobody_in(client, provider):
    provider.account("mia", f"mia@{ALLOWED_DOMAIN}")
    callback = through_the_provider(start(client), provider.issuer, "mia")
    assert parse_qs(urlsplit(callback).query)["iss"] == [provider.issuer]  # RFC 9207
    mixed_up = callback.replace("iss=", "iss=https%3A%2F%2Fattacker.example&was=")
    answer = client.get(mixed_up, headers=HTML)
    assert (
        answer.status_code == 400 and "The answer came from &#39;https://attacker.example&#39;" in answer.text
    )
    assert me(client) is None


def closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on (just freed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("where", ["down", "another-issuer"])
def test_a_provider_down_or_naming_another_issuer_gives_a_page_to_try_later(
    tmp_path, database_url, provider, testserver_client, where
):
    port = urlsplit(provider.issuer).port
    issuer, message = {
        "down": (f"http://127.0.0.1:{closed_port()}", "Test provider did not answer (ConnectError)"),
        "another-issuer": (f"http://localhost:{port}", f"names its issuer &#39;http://127.0.0.1:{port}&#39;"),
    }[where]
    configured = provider.settings(testserver_client, issuer=issuer)
    with TestClient(create_app(settings_for(tmp_path, database_url, oidc_providers=[configured]))) as client:
        data = {"csrf_token": form_field(client.get("/login").text, "csrf_token"), "next": "/"}
        answer = client.post(f"/login/sso/{NAME}", data=data, headers=HTML, follow_redirects=False)
    assert answer.status_code == 503 and message in answer.text and "Try again shortly" in answer.text


def test_a_signed_in_person_links_a_provider_account_and_then_signs_in_with_it(
    client, provider, db_session, annotator
):
    sign_in(client, "annotator")
    provider.account("stranger", "stranger@elsewhere.example")
    assert (
        sign_in_as(client, provider, "stranger").status_code == 403
    )  # signing in, not linking: not admitted
    assert identities(db_session) == [] and me(client)["username"] == "annotator"
    page = client.get("/account").text
    assert f"Link {DISPLAY_NAME}" in page and form_field(page, "link") == "true"
    provider.account("anna-elsewhere", "anna@elsewhere.example")  # signed in: no domain or invitation needed
    answer = sign_in_as(client, provider, "anna-elsewhere", path="/account", next="/account", link=True)
    assert answer.status_code == 303 and answer.headers["location"] == "/account"
    page = client.get("/account").text
    assert f"You can sign in with {DISPLAY_NAME} (anna@elsewhere.example)" in page
    assert f"Link {DISPLAY_NAME}" not in page and "Change your password" in page
    sign_out(client)
    assert sign_in_as(client, provider, "anna-elsewhere").status_code == 303
    assert me(client)["username"] == "annotator"
    sign_out(client)
    ended = sign_in_as(client, provider, "stranger", link=True)  # a link pressed after the session ended
    assert ended.status_code == 400 and "sign in again, then link" in ended.text
    assert me(client) is None and len(identities(db_session)) == 1

    set_active(db_session=db_session, user=annotator, is_active=False)
    db_session.commit()
    refused = sign_in_as(client, provider, "anna-elsewhere")
    assert refused.status_code == 403 and "deactivated" in refused.text and me(client) is None


@pytest.mark.parametrize("settings", [{"password_sign_in": False}], indirect=True)
def test_with_password_sign_in_off_only_the_providers_and_api_tokens_sign_in(
    client, provider, db_session, admin, annotator
):
    page = client.get("/login").text
    assert 'name="password"' not in page and f"Sign in with {DISPLAY_NAME}" in page
    data = {"username": "admin", "password": TEST_PASSWORD, "csrf_token": form_field(page, "csrf_token")}
    refused = client.post("/login", data=data, follow_redirects=False)
    assert refused.status_code == 403 and "Password sign-in is turned off" in refused.text
    assert me(client) is None

    invitation, token = create_invitation(
        db_session=db_session, role=Role.annotator, note="", valid_hours=1, created_by=admin
    )
    db_session.commit()
    page = client.get(f"/invitations/{token}").text
    assert 'name="password"' not in page and f"Join with {DISPLAY_NAME}" in page
    data = {"username": "newcomer", "password": "long enough 1", "password_again": "long enough 1"}
    data["csrf_token"] = form_field(page, "csrf_token")
    refused = client.post(f"/invitations/{token}", data=data, follow_redirects=False)
    assert refused.status_code == 403 and "turned off" in refused.text
    db_session.refresh(invitation)
    assert invitation.used_at is None

    assert client.get("/api/v1/me", headers=bearer(db_session, admin)).json()["username"] == "admin"
    provider.account("otto", f"otto@{ALLOWED_DOMAIN}")
    assert sign_in_as(client, provider, "otto").status_code == 303 and me(client)["username"] == "otto"


def test_with_password_sign_in_off_an_admin_joins_through_an_invitation_made_on_the_command_line(
    tmp_path, fresh_database_url, provider, testserver_client
):
    configured = provider.settings(testserver_client)
    as_configured = configured.model_dump() | {"client_secret": configured.client_secret.get_secret_value()}
    env = {
        "MAD_DATABASE_URL": fresh_database_url,
        "MAD_DATA_DIR": str(tmp_path / "data"),
        "MAD_ENV": "development",
        "MAD_PASSWORD_SIGN_IN": "false",
        "MAD_OIDC_PROVIDERS": json.dumps([as_configured]),
    }
    made = CliRunner().invoke(cli, ["users", "invite", "--role", "admin"], env=env, catch_exceptions=False)
    token = re.search(r"/invitations/([\w-]+)", made.output).group(1)
    settings = settings_for(tmp_path, fresh_database_url, password_sign_in=False, oidc_providers=[configured])
    provider.account("root", "root@elsewhere.example")
    with TestClient(create_app(settings)) as client:
        answer = sign_in_as(client, provider, "root", path=f"/invitations/{token}", invitation=token)
        assert answer.status_code == 303 and answer.headers["location"] == "/admin"
        assert me(client)["role"] == "admin"
        assert client.get("/admin").status_code == 200


def test_settings_keep_someone_able_to_sign_in_and_providers_on_https():
    with pytest.raises(ValidationError, match="needs at least one provider"):
        Settings(password_sign_in=False)
    provider = {"name": "corp", "display_name": "Corp", "client_id": "id", "client_secret": "secret"}
    with pytest.raises(ValidationError, match="is not an https:// URL"):
        Settings(oidc_providers=[provider | {"issuer": "http://login.example.org"}])
    with pytest.raises(ValidationError, match="names must differ"):
        Settings(oidc_providers=[provider | {"issuer": "https://login.example.org"}] * 2)


def test_an_unknown_provider_or_a_start_without_the_csrf_token_is_refused(client):
    csrf = form_field(client.get("/login").text, "csrf_token")
    unknown = client.post("/login/sso/nowhere", data={"csrf_token": csrf}, headers=HTML)
    assert unknown.status_code == 404 and "no sign-in provider named" in unknown.text
    forged = client.post(f"/login/sso/{NAME}", data={"next": "/"}, headers=HTML, follow_redirects=False)
    assert forged.status_code == 403
