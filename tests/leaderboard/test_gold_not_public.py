"""No public page or API tells a gold image apart (issue 25, item 2).

A decided image is handed out again only for its gold question, so a public listing of a gold image with its
outcome would tell an annotator who meets it that it is gold, and its answer. An admin makes a gold question
on a decided image of a classifier's pairs: the anonymous pair gallery (API and page) and the classifier's
analysis (API and page) stop showing it, and count it among the images not shown.
"""

from sqlalchemy import or_, select

from app.images.models import Image
from app.labelling.models import PairImage, PairImageRole, PairSubset


def test_an_image_with_a_gold_question_is_shown_on_no_public_page(client, db_session, voted, admin_headers):
    competition, classifier = voted.competition, voted.active[0]
    analysis_path = f"/api/v1/classifiers/{classifier.id}/analysis"
    before = client.get(analysis_path).json()
    sha256 = before["perplexing_images"][0]["image_sha256"]
    pair_image, a_id, b_id = db_session.execute(
        select(PairImage, PairSubset.classifier_a_id, PairSubset.classifier_b_id)
        .join(PairSubset, PairSubset.id == PairImage.subset_id)
        .join(Image, Image.id == PairImage.image_id)
        .where(
            Image.sha256 == sha256,
            PairImage.role == PairImageRole.selected,
            or_(PairSubset.classifier_a_id == classifier.id, PairSubset.classifier_b_id == classifier.id),
        )
        .limit(1)
    ).one()
    gallery_path = f"/api/v1/competitions/{competition.id}/pairs/{a_id}/{b_id}"
    gallery = client.get(gallery_path).json()
    assert sha256 in {image["image_sha256"] for image in gallery["selected"]}  # decided, so public so far

    made = client.post(
        f"/api/v1/competitions/{competition.id}/labelling/gold",
        json={"image_sha256": sha256, "questions": [{"class_index": pair_image.label_a, "answer": True}]},
        headers=admin_headers,
    )
    assert made.status_code == 201, made.text

    now_gallery = client.get(gallery_path).json()
    shown = {image["image_sha256"] for image in now_gallery["selected"] + now_gallery["discarded"]}
    assert sha256 not in shown
    assert now_gallery["withheld"] == gallery["withheld"] + 1
    assert len(now_gallery["selected"]) == len(gallery["selected"]) - 1
    assert sha256 not in client.get(f"/competitions/{competition.id}/pairs/{a_id}/{b_id}").text

    after = client.get(analysis_path).json()
    assert sha256 not in {image["image_sha256"] for image in after["perplexing_images"]}
    assert after["labelled_predictions"] == before["labelled_predictions"] - 1
    assert sha256 not in client.get(f"/competitions/{competition.id}/classifiers/{classifier.id}").text
