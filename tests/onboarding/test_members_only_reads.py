"""Everything of a members-only competition is for its members and admins: its listing, data, pages,
leaderboard, images and thumbnails (an image shared with an open competition stays public, cached as such;
one only members see is cached privately), and server paths of local imports are never shown to others."""

from concurrent.futures import ThreadPoolExecutor

import pytest

from app.competitions import service as competitions_service
from app.competitions.schemas import CompetitionCreate
from app.images.service import ImageLimits, import_entries
from app.images.sources import Candidate, Provenance
from app.images.store import ImageStore
from app.storage.blobs import IMMUTABLE
from app.users.models import Role
from tests.conftest import bearer, make_user
from tests.labelling.factories import labelling_competition
from tests.support.images import image_bytes

HTML = {"Accept": "text/html"}
SERVER_PATH = "/srv/corpora/private/shared.png"
URL = "https://example.org/photos/own.png"
GUIDELINES = "Answer as the confidential protocol PX-7 says."


def import_files(db_session, settings, competition, files: list[tuple[bytes, str]]) -> list[str]:
    """Import (bytes, source uri) pairs into the competition; their hashes."""
    with ThreadPoolExecutor(2) as executor:
        report = import_entries(
            db_session=db_session,
            store=ImageStore(settings.blob_store),
            competition=competition,
            entries=[Candidate(uri.rsplit("/", 1)[-1], data, Provenance(uri)) for data, uri in files],
            limits=ImageLimits(2_000_000, 10_000_000, 64),
            executor=executor,
        )
    db_session.commit()
    return [sha256 for _, sha256 in report.added]


@pytest.fixture
def world(client, db_session, settings, competition, admin_headers):
    """A members-only competition with pairs, a snapshot, an image of its own (from a URL) and one it shares
    with an open competition (from a server path); the paths anyone might ask for."""
    shared, own = import_files(
        db_session, settings, competition, [(image_bytes(1), SERVER_PATH), (image_bytes(2), URL)]
    )
    open_one = competitions_service.create_competition(
        db_session=db_session, spec=CompetitionCreate(name="open-corpus")
    )
    import_files(db_session, settings, open_one, [(image_bytes(1), SERVER_PATH)])
    labelling_competition(db_session, competition, classifiers=2, images_per_pair=2)
    api = f"/api/v1/competitions/{competition.id}"
    closing = {"members_only": True, "guidelines": GUIDELINES, "description": GUIDELINES}
    assert client.patch(api, json=closing, headers=admin_headers).status_code == 200
    slug = client.post(f"{api}/snapshots", json={}, headers=admin_headers).json()["slug"]
    classifier_ids = [c["id"] for c in client.get(f"{api}/classifiers", headers=admin_headers).json()]
    a, b = classifier_ids
    reads = [
        api,
        f"{api}/classes",
        f"{api}/images",
        f"{api}/classifiers",
        f"{api}/leaderboard",
        f"{api}/leaderboard/history",
        f"{api}/snapshots",
        f"/api/v1/competitions/{competition.id}/pairs/{a}/{b}",
        f"/api/v1/classifiers/{a}",
        f"/api/v1/classifiers/{a}/analysis",
        f"/api/v1/leaderboards/{slug}",
    ]
    pages = [
        f"/competitions/{competition.id}/leaderboard",
        f"/competitions/{competition.id}/guidelines",
        f"/competitions/{competition.id}/pairs/{a}/{b}",
        f"/competitions/{competition.id}/classifiers/{a}",
        f"/leaderboards/{slug}",
    ]
    return {"api": api, "reads": reads, "pages": pages, "shared": shared, "own": own, "open": open_one}


def test_a_members_only_competition_shows_nothing_to_others(client, db_session, competition, world):
    stranger = bearer(db_session, make_user(db_session, "stranger", Role.annotator))
    for path in world["reads"]:
        assert client.get(path).status_code == 401, path
        refused = client.get(path, headers=stranger)
        assert refused.status_code == 403 and "members only" in refused.json()["detail"], path
    for path in world["pages"]:
        page = client.get(path, headers=HTML)
        assert page.status_code == 401 and "Sign in needed" in page.text and "PX-7" not in page.text, path
    listed = [c["name"] for c in client.get("/api/v1/competitions", headers=stranger).json()]
    assert listed == ["open-corpus"]
    assert competition.name not in client.get("/").text
    for files in ("images", "thumbnails"):
        assert client.get(f"/{files}/{world['own']}").status_code == 404
        assert client.get(f"/{files}/{world['own']}", headers=stranger).status_code == 404
        shared = client.get(f"/{files}/{world['shared']}")  # also in the open competition
        assert shared.status_code == 200 and shared.headers["cache-control"] == IMMUTABLE


def test_members_and_admins_see_it_and_only_admins_see_server_paths(
    client, db_session, competition, world, admin_headers, annotator, annotator_headers
):
    assert client.put(f"{world['api']}/members/{annotator.id}", headers=admin_headers).status_code == 200
    for headers in (annotator_headers, admin_headers):
        for path in world["reads"]:
            assert client.get(path, headers=headers).status_code == 200, path
        for path in world["pages"]:
            assert client.get(path, headers={**headers, **HTML}).status_code == 200, path
        assert "PX-7" in client.get(world["pages"][1], headers={**headers, **HTML}).text
        own = client.get(f"/images/{world['own']}", headers=headers)
        assert own.status_code == 200 and own.headers["cache-control"].startswith("private")
        assert (
            client.get(f"/thumbnails/{world['own']}", headers=headers)
            .headers["cache-control"]
            .startswith("private")
        )
    assert client.get(world["reads"][4]).status_code == 401  # a kept leaderboard still goes to members only

    def uris(headers, competition_id):
        images = client.get(f"/api/v1/competitions/{competition_id}/images", headers=headers).json()
        ours = (world["shared"], world["own"])
        return {image["sha256"]: image["source_uri"] for image in images if image["sha256"] in ours}

    assert uris(annotator_headers, competition.id) == {world["shared"]: None, world["own"]: URL}
    assert uris({}, world["open"].id) == {world["shared"]: None}
    assert uris(admin_headers, competition.id) == {world["shared"]: SERVER_PATH, world["own"]: URL}
