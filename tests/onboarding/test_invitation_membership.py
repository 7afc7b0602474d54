"""Per-competition membership, the second half of onboarding: a members-only competition is labelled only by
its members (and admins); its labelling endpoints and page refuse everyone else with 403, and the home page
shows each annotator only the competitions they may label in."""

import re

import pytest

from app.competitions.members import add_member
from app.labelling.annotating.caller import labelling_caller
from app.users.models import Role
from tests.conftest import TEST_PASSWORD, bearer, make_user
from tests.labelling.factories import labelling_competition


@pytest.fixture
def closed(client, db_session, competition, admin_headers):
    """The competition, with images to label, made members-only through the API; its labelling path."""
    competition.k = 2
    labelling_competition(db_session, competition, classifiers=3, images_per_pair=3)
    changed = client.patch(
        f"/api/v1/competitions/{competition.id}", json={"members_only": True}, headers=admin_headers
    )
    assert changed.status_code == 200 and changed.json()["members_only"] is True
    return f"/api/v1/competitions/{competition.id}"


def sign_in(client, username: str) -> str:
    """Sign in through the login form; the CSRF token of the session."""
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', client.get("/login").text).group(1)
    client.post("/login", data={"username": username, "password": TEST_PASSWORD, "csrf_token": csrf})
    return re.search(r'name="csrf-token" content="([^"]+)"', client.get("/").text).group(1)


def test_only_members_label_in_a_members_only_competition(
    client, db_session, competition, closed, admin, admin_headers, annotator, annotator_headers
):
    refused = client.post(f"{closed}/labelling/next", headers=annotator_headers)
    assert refused.status_code == 403 and "members only" in refused.json()["detail"]
    assert client.get(f"{closed}/labelling/me", headers=annotator_headers).status_code == 403
    assert client.post(f"{closed}/labelling/next", headers=admin_headers).json()["status"] == "item"

    added = client.put(f"{closed}/members/{annotator.id}", headers=admin_headers)
    assert added.status_code == 200 and added.json()["username"] == annotator.username
    assert (
        client.put(f"{closed}/members/{annotator.id}", headers=admin_headers).status_code == 200
    )  # no change
    (member,) = client.get(f"{closed}/members", headers=admin_headers).json()
    assert member["user_id"] == annotator.id
    assert client.post(f"{closed}/labelling/next", headers=annotator_headers).json()["status"] == "item"

    assert client.delete(f"{closed}/members/{annotator.id}", headers=admin_headers).status_code == 204
    assert client.post(f"{closed}/labelling/next", headers=annotator_headers).status_code == 403
    assert client.delete(f"{closed}/members/{annotator.id}", headers=admin_headers).status_code == 404
    assert client.get(f"{closed}/members", headers=admin_headers).json() == []

    reopened = client.patch(closed, json={"members_only": False}, headers=admin_headers).json()
    assert reopened["members_only"] is False
    assert client.post(f"{closed}/labelling/next", headers=annotator_headers).json()["status"] == "item"


def test_members_are_annotators_that_exist(
    client, db_session, closed, admin, admin_headers, annotator_headers
):
    worker = make_user(db_session, "a-worker", Role.worker)
    for user_id, status in ((admin.id, 422), (worker.id, 422), (99_999, 404)):
        assert client.put(f"{closed}/members/{user_id}", headers=admin_headers).status_code == status
    assert client.put(f"{closed}/members/{admin.id}", headers=annotator_headers).status_code == 403
    assert client.get(f"{closed}/members", headers=annotator_headers).status_code == 403


def test_the_home_page_and_label_page_follow_membership(client, db_session, competition, closed, annotator):
    other = make_user(db_session, "member", Role.annotator)
    bearer(db_session, other)
    add_member(db_session=db_session, competition=competition, user=other)
    db_session.commit()

    csrf = sign_in(client, annotator.username)
    home = client.get("/").text
    assert competition.name not in home and "No competition is open to you yet" in home
    assert client.get(f"/competitions/{competition.id}/label").status_code == 403
    next_url = f"{closed}/labelling/next"
    assert client.post(next_url, headers={"X-CSRF-Token": csrf}).status_code == 403  # the cookie path too

    client.post("/logout", headers={"X-CSRF-Token": csrf})
    csrf = sign_in(client, other.username)
    assert competition.name in client.get("/").text
    assert client.get(f"/competitions/{competition.id}/label").status_code == 200
    assert client.post(next_url, headers={"X-CSRF-Token": csrf}).json()["status"] == "item"

    client.post("/logout", headers={"X-CSRF-Token": csrf})
    assert competition.name not in client.get("/").text  # nothing of it is public, its leaderboard neither


@pytest.mark.parametrize("writes", [False, True])
def test_the_caller_query_reads_the_membership_with_the_caller(
    db_session, competition, closed, annotator, writes
):
    def may_label(user) -> bool:
        caller = labelling_caller(
            db_session=db_session,
            token=None,
            user_id=user.id,
            session_generation=user.session_generation,
            competition_id=competition.id,
            writes=writes,
        )
        return caller.may_label

    assert not may_label(annotator)
    add_member(db_session=db_session, competition=competition, user=annotator)
    assert may_label(annotator)


def test_the_admin_page_says_who_members_only_would_lock_out(
    client, db_session, competition, admin, annotator
):
    """Turning "members only" on with annotators who are not members warns, naming them, before and in the
    confirmation; once they are members (or it is on) there is nothing to warn about."""
    bea = make_user(db_session, "bea", Role.annotator)
    sign_in(client, admin.username)
    page = client.get(f"/admin/competitions/{competition.id}").text
    warning = re.search(r'id="members-only-warning">(.+?)</p>', page, re.DOTALL).group(1)
    assert "lock out 2 annotators" in " ".join(warning.split())
    assert annotator.username in warning and "bea" in warning
    confirm = re.search(r'id="members-only"\s+data-confirm="([^"]+)"', page).group(1)
    assert annotator.username in confirm and "bea" in confirm

    for user in (annotator, bea):
        add_member(db_session=db_session, competition=competition, user=user)
    db_session.commit()
    page = client.get(f"/admin/competitions/{competition.id}").text
    assert "members-only-warning" not in page and 'data-confirm="' not in page
