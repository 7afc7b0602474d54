"""The usernames of accounts that OpenID sign-ins make, through the real provider of tests/sso on both
databases: never a reserved name (`local-worker`, what `mad worker` and `mad demo` run as) in any case or
Unicode form, so that the local worker's token path stays the service's own; and two first sign-ins with one
name at the same moment both get an account, under different names."""

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from typer.testing import CliRunner

from app.cli.main import app as cli
from app.db.engine import create_db_engine, create_sessionmaker
from app.main import create_app
from app.users.models import ApiToken, Role, User, username_key
from app.users.openid import ProviderIdentity, sign_in_identity
from app.users.service import LOCAL_WORKER
from tests.conftest import settings_for
from tests.onboarding.test_usernames import LiveService, while_another_account_is_made
from tests.sso.conftest import ALLOWED_DOMAIN, through_the_provider
from tests.sso.test_openid_sign_in import me, sign_in_as, sign_out, start

WORKER_NAMES = ("Local-Worker", "local-worker", "ｌｏｃａｌ-ｗｏｒｋｅｒ")  # the last in fullwidth letters


@pytest.fixture
def committed(tmp_path, fresh_database_url, backend, provider, testserver_client) -> Iterator[LiveService]:
    """The app with the provider on a committed database of its own (which `mad` commands see too)."""
    settings = settings_for(
        tmp_path, fresh_database_url, oidc_providers=[provider.settings(testserver_client)]
    )
    engine = create_db_engine(fresh_database_url)
    try:
        with TestClient(create_app(settings)) as client:
            yield LiveService(client, create_sessionmaker(engine), backend, {})
    finally:
        engine.dispose()


def accounts(live: LiveService) -> dict[str, Role]:
    """Every account's role by username."""
    with live.sessions() as session:
        return dict(session.execute(select(User.username, User.role)).all())


def test_sign_ins_never_take_the_local_worker_s_name_and_mad_worker_still_runs_as_it(
    committed, provider, tmp_path, fresh_database_url
):
    for sub in WORKER_NAMES:
        provider.account(sub, f"worker{len(accounts(committed))}@{ALLOWED_DOMAIN}")
        assert sign_in_as(committed.client, provider, sub).status_code == 303
        assert username_key(me(committed.client)["username"]) != LOCAL_WORKER
        sign_out(committed.client)
    people = accounts(committed)
    assert people == {
        "Local-Worker-2": Role.annotator,
        "local-worker-3": Role.annotator,
        "local-worker-4": Role.annotator,
    }

    env = {"MAD_DATABASE_URL": fresh_database_url, "MAD_DATA_DIR": str(tmp_path / "data")}
    ran = CliRunner().invoke(cli, ["worker", "--exit-when-idle", "--device", "cpu"], env=env)
    assert ran.exit_code == 0, ran.output
    with committed.sessions() as session:
        holders = session.execute(select(User.username, User.role).join(ApiToken)).all()
    assert holders == [(LOCAL_WORKER, Role.worker)]  # the worker's token, and no token of a person's
    assert accounts(committed) == people | {LOCAL_WORKER: Role.worker}


def test_a_person_who_has_the_worker_s_name_from_before_is_never_given_its_token(
    committed, tmp_path, fresh_database_url
):
    with committed.sessions() as session:  # as a sign-in made it before sign-ins checked reserved names
        session.add(User(username=LOCAL_WORKER, role=Role.annotator))
        session.commit()
    env = {"MAD_DATABASE_URL": fresh_database_url, "MAD_DATA_DIR": str(tmp_path / "data")}
    ran = CliRunner().invoke(cli, ["worker", "--exit-when-idle", "--device", "cpu"], env=env)
    assert ran.exit_code == 1
    assert "'local-worker' is a person's, not this machine's worker" in ran.output
    with committed.sessions() as session:
        assert session.scalars(select(ApiToken)).all() == []


def test_two_first_sign_ins_with_one_name_at_the_same_moment_both_get_an_account(
    committed, provider, testserver_client
):
    """The other sign-in has made `twin` and not committed yet while this one looks for a free name; on
    Postgres this one then waits on the unique index and is broken by it, on SQLite it waits to begin."""
    provider.account("twin", f"twin@{ALLOWED_DOMAIN}")
    configured = provider.settings(testserver_client)

    def sign_in_elsewhere(session):
        identity = ProviderIdentity(
            issuer=provider.issuer,
            subject="another-twin",
            email=f"twin.other@{ALLOWED_DOMAIN}",
            email_verified=True,
            preferred_username="twin",
        )
        sign_in_identity(
            db_session=session, identity=identity, provider=configured, invitation_token=None, signed_in=None
        )

    callback = through_the_provider(start(committed.client), provider.issuer, "twin")
    answer = while_another_account_is_made(
        committed, sign_in_elsewhere, lambda: committed.client.get(callback, follow_redirects=False)
    )
    assert answer.status_code == 303, answer.text
    assert me(committed.client)["username"] == "twin-2"
    assert accounts(committed) == {"twin": Role.annotator, "twin-2": Role.annotator}
