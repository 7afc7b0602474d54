"""The result pages show the API's numbers: leaderboard (live and frozen), heatmap, galleries, analyses."""

import re
from html import unescape

from tests.foundation.test_auth import _sign_in


def text_of(html: str) -> str:
    """The page's text without tags, whitespace collapsed."""
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def test_the_leaderboard_page_shows_table_1_the_heatmap_and_the_pairs(client, voted):
    competition_id = voted.competition.id
    board = client.get(f"/api/v1/competitions/{competition_id}/leaderboard").json()
    page = client.get(f"/competitions/{competition_id}/leaderboard")
    assert page.status_code == 200
    rows = re.findall(r'<tr data-classifier-id="(\d+)"', page.text)
    by_rank = sorted(board["classifiers"], key=lambda s: (s["mad_rank"], s["classifier_id"]))
    assert [int(row) for row in rows] == [s["classifier_id"] for s in by_rank]
    text = text_of(page.text)
    for standing in board["classifiers"]:
        assert (
            f"{standing['mad_score']:.3f} [{standing['score_low']:.3f}, {standing['score_high']:.3f}]" in text
        )
    assert f"{board['lambda_max']:.4f}" in text
    assert any(standing["provisional"] for standing in board["classifiers"])
    rank_cells = dict(
        re.findall(r'<tr data-classifier-id="(\d+)"[^>]*>\s*<td class="rank"[^>]*>(.*?)</td>', page.text)
    )
    for standing in board["classifiers"]:
        badge = re.fullmatch(
            r'\d+ <span class="badge"[^>]*>provisional</span>', rank_cells[str(standing["classifier_id"])]
        )
        assert (badge is not None) == standing["provisional"]
    m = len(board["classifiers"])
    heatmap = re.search(r'<svg class="heatmap".*?</svg>', page.text, re.S).group(0)
    cells = re.findall(r'<a href="(/competitions/\d+/pairs/\d+/\d+)"', heatmap)
    assert len(cells) == m * (m - 1)
    assert f"{board['matrices']['accuracy'][0][1]:.2f}" in heatmap
    assert "broken" in text and "download refused" in text  # failed classifiers are listed, not ranked
    assert "Freeze this leaderboard" not in page.text  # anonymous visitors get no admin form


def test_a_gallery_page_marks_predictions_like_fig_1c(client, voted):
    a, b = voted.active[0], voted.active[2]
    gallery = client.get(f"/api/v1/competitions/{voted.competition.id}/pairs/{a.id}/{b.id}").json()
    page = client.get(f"/competitions/{voted.competition.id}/pairs/{a.id}/{b.id}").text
    assert page.count('class="tile"') == len(gallery["selected"])
    verdicts = re.findall(r'class="prediction (right|wrong|open)"', page)
    expected = [
        "open" if image[key] is None else "right" if image[key] else "wrong"
        for image in gallery["selected"]
        for key in ("correct_a", "correct_b")
    ]
    assert verdicts == expected and "right" in verdicts and "wrong" in verdicts
    assert a.name in page and b.name in page


def test_a_classifier_page_shows_worst_classes_perplexity_and_stability(client, voted):
    classifier = voted.active[0]
    analysis = client.get(f"/api/v1/classifiers/{classifier.id}/analysis").json()
    page = client.get(f"/competitions/{voted.competition.id}/classifiers/{classifier.id}")
    assert page.status_code == 200
    text = text_of(page.text)
    assert analysis["worst_classes"][0]["name"] in text
    assert f"C-perplexity {analysis['perplexing_images'][0]['c_perplexity']:.2f}" in text
    assert 'id="stability-chart"' in page.text
    other = client.get(f"/competitions/{voted.competition.id + 1}/classifiers/{classifier.id}")
    assert other.status_code == 404


def test_a_snapshot_page_shows_the_frozen_numbers(client, voted, admin_headers):
    created = client.post(
        f"/api/v1/competitions/{voted.competition.id}/snapshots", json={"note": "v1"}, headers=admin_headers
    )
    stored = client.get(created.json()["api_url"]).json()["leaderboard"]
    page = client.get(created.json()["url"])
    assert page.status_code == 200
    text = text_of(page.text)
    assert "Frozen leaderboard digits-1" in text and "“v1”" in text
    for standing in stored["classifiers"]:
        assert f"{standing['mad_score']:.3f}" in text
    live = client.get(f"/competitions/{voted.competition.id}/leaderboard").text
    assert '<a href="/leaderboards/digits-1">digits-1</a>' in live


def test_admin_pages_need_an_admin(client, db_session, voted, admin, annotator):
    for path in ("/admin", f"/admin/competitions/{voted.competition.id}"):
        anonymous = client.get(path, follow_redirects=False)
        assert anonymous.status_code == 303 and anonymous.headers["location"].startswith("/login?next=")
    _sign_in(client, "annotator")
    assert client.get("/admin").status_code == 403
    client.post(
        "/logout",
        data={"csrf_token": re.search(r'name="csrf-token" content="([^"]+)"', client.get("/").text).group(1)},
    )
    _sign_in(client, "admin")
    overview = client.get("/admin")
    assert (
        overview.status_code == 200
        and 'id="create-competition"' in overview.text
        and "voter0" in overview.text
    )
    page = client.get(f"/admin/competitions/{voted.competition.id}")
    assert page.status_code == 200
    for marker in (
        'id="add-classifier"',
        'id="upload-images"',
        'id="exclude-image"',
        'id="live-standings"',
        "Retire",
    ):
        assert marker in page.text
    assert "Freeze this leaderboard" in client.get(f"/competitions/{voted.competition.id}/leaderboard").text
