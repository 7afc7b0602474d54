"""A real OpenID provider on 127.0.0.1 for the sign-in tests: tests/sso/provider/provider.mjs, the npm package
oidc-provider (pinned by its package-lock.json; `make test` runs `npm ci` there) run by node on a free port.

Without node or the installed package these tests skip with the reason, and fail under MAD_REQUIRE_BROWSER=1
(CI), as the browser tests do. The provider's test controls add accounts, shorten the authorization codes'
lifetime and rewrite the ID tokens it hands out (MISCHIEFS); each test starts with the defaults.
"""

import json
import os
import re
import select
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urljoin

import httpx
import pytest

from app.settings import OpenIDProvider
from tests.conftest import settings_for

PROVIDER_DIR = Path(__file__).parent / "provider"
START_TIMEOUT_S = 60
NAME = "test"
DISPLAY_NAME = "Test provider"
ALLOWED_DOMAIN = "lab.example.org"
ACCOUNT_PASSWORD = "provider password 1"
TESTSERVER_CALLBACK = f"http://testserver/login/sso/{NAME}/callback"
MISCHIEFS = ("tampered-claims", "unsigned", "wrong-issuer", "wrong-audience", "expired", "wrong-nonce")
"""How the provider can spoil its ID tokens (provider.mjs): a claim changed under the signature, no signature
(alg none), and validly signed tokens with another issuer, another audience (and this client as azp), long
expired, or another sign-in's nonce. (provider.mjs has one more, "another-subject": a validly signed token
about someone else than the user info.)"""


@dataclass
class Client:
    """A client registered at the provider (RFC 7591), with what updates it (RFC 7592)."""

    client_id: str
    client_secret: str
    registration: dict


@dataclass
class RunningProvider:
    """The running provider: its issuer URL and its test controls."""

    issuer: str

    def register(self, redirect_uri: str) -> Client:
        """A new client whose redirect URI is this one."""
        answer = httpx.post(f"{self.issuer}/reg", json={"redirect_uris": [redirect_uri]})
        answer.raise_for_status()
        registration = answer.json()
        return Client(registration["client_id"], registration["client_secret"], registration)

    def redirect_to(self, client: Client, redirect_uri: str) -> None:
        """Change the client's redirect URI (for a live server, once it knows its port)."""
        fields = ("client_id", "client_secret", "grant_types", "response_types", "token_endpoint_auth_method")
        body = {name: client.registration[name] for name in fields} | {"redirect_uris": [redirect_uri]}
        answer = httpx.put(
            client.registration["registration_client_uri"],
            json=body,
            headers={"Authorization": f"Bearer {client.registration['registration_access_token']}"},
        )
        answer.raise_for_status()

    def account(self, sub: str, email: str | None, email_verified: bool = True) -> None:
        """Add the account `sub` (password ACCOUNT_PASSWORD), or change its e-mail address."""
        self._control(
            "accounts",
            {"sub": sub, "password": ACCOUNT_PASSWORD, "email": email, "email_verified": email_verified},
        )

    def configure(self, *, mischief: str = "none", code_ttl_s: int = 30) -> None:
        """How the provider spoils its ID tokens (one of MISCHIEFS, or none) and how long its codes last."""
        self._control("config", {"mischief": mischief, "code_ttl_s": code_ttl_s})

    def _control(self, what: str, body: dict) -> None:
        httpx.post(f"{self.issuer}/__test/{what}", json=body).raise_for_status()

    def settings(self, client: Client, **overrides) -> OpenIDProvider:
        """The provider as MAD_OIDC_PROVIDERS names it, for this client; people of ALLOWED_DOMAIN may join."""
        fields = dict(
            name=NAME,
            display_name=DISPLAY_NAME,
            issuer=self.issuer,
            client_id=client.client_id,
            client_secret=client.client_secret,
            allowed_domains=[ALLOWED_DOMAIN],
        )
        return OpenIDProvider.model_validate(fields | overrides)


def _why_it_cannot_start() -> str | None:
    """Why node cannot run the provider here, or None."""
    if shutil.which("node") is None:
        return "node is not installed (the sign-in tests run a real OpenID provider on it)"
    if not (PROVIDER_DIR / "node_modules" / "oidc-provider").is_dir():
        return f"oidc-provider is not installed: run `npm ci --prefix {PROVIDER_DIR}` (make test does)"
    return None


@pytest.fixture(scope="session")
def running_provider(tmp_path_factory) -> Iterator[RunningProvider]:
    """provider.mjs under node for the whole session; skipped (failed under MAD_REQUIRE_BROWSER=1) if it
    cannot run here."""
    missing = _why_it_cannot_start()
    if missing is not None:
        if os.environ.get("MAD_REQUIRE_BROWSER") == "1":
            pytest.fail(f"MAD_REQUIRE_BROWSER=1 but {missing}")
        pytest.skip(missing)
    log = tmp_path_factory.mktemp("provider") / "provider.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            ["node", "provider.mjs"], cwd=PROVIDER_DIR, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    try:
        ready, _, _ = select.select([process.stdout], [], [], START_TIMEOUT_S)
        line = process.stdout.readline() if ready and process.stdout else ""
        if not line:
            pytest.fail(f"the test OpenID provider did not start: {log.read_text()}")
        yield RunningProvider(json.loads(line)["issuer"])
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.fixture
def provider(running_provider: RunningProvider) -> Iterator[RunningProvider]:
    """The provider with its defaults: ID tokens as it signs them, codes valid for 30 s."""
    running_provider.configure()
    yield running_provider
    running_provider.configure()


@pytest.fixture(scope="session")
def testserver_client(running_provider: RunningProvider) -> Client:
    """The client of the test client's application (its callback at http://testserver)."""
    return running_provider.register(TESTSERVER_CALLBACK)


@pytest.fixture
def settings(request, tmp_path, database_url, provider: RunningProvider, testserver_client: Client):
    """The test settings (tests/conftest.py) with the provider configured, which the `app` and `client`
    fixtures use; indirect parameters override settings, and the provider's under "provider"."""
    overrides = dict(getattr(request, "param", {}))
    configured = provider.settings(testserver_client, **overrides.pop("provider", {}))
    return settings_for(tmp_path, database_url, oidc_providers=[configured], **overrides)


def form_field(page: str, name: str) -> str:
    """The value of a page's hidden form field."""
    found = re.search(rf'name="{name}" value="([^"]*)"', page)
    assert found, f"no {name} field in the page"
    return found.group(1)


def through_the_provider(authorization_url: str, issuer: str, sub: str) -> str:
    """Sign in as `sub` on the provider's own login page, as a browser would, starting at the authorization
    URL the application redirected to; the URL the provider then sends the browser back to."""
    with httpx.Client() as browser:
        url = authorization_url
        while url.startswith(issuer):
            answer = browser.get(url)
            if answer.status_code == 200 and "provider-sign-in" in answer.text:
                action = re.search(r'action="([^"]+)"', answer.text)
                assert action, answer.text
                answer = browser.post(
                    urljoin(url, action.group(1)), data={"login": sub, "password": ACCOUNT_PASSWORD}
                )
            assert answer.status_code in (302, 303), answer.text
            url = urljoin(url, answer.headers["location"])
        return url
