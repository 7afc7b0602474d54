"""A pair's gallery: its selected and discarded images with both predictions and their outcomes (paper
Fig. 1c)."""

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.classifiers.models import Classifier
from app.competitions.models import Competition
from app.errors import NotFound
from app.images.models import Image
from app.jobs.selections import pair_selection
from app.labelling.models import PairImage, PairImageRole, PairSubset
from app.labelling.results import QUESTION_A, QUESTION_B, image_withheld, with_pair_questions
from app.leaderboard.schemas import ClassifierRef, GalleryImage, PairGalleryRead


def pair_gallery(*, db_session: Session, competition: Competition, a_id: int, b_id: int) -> PairGalleryRead:
    """A pair's selected and discarded images in selection order, both predictions and their outcomes.

    Only images with no open question and no gold question are listed (results.image_withheld): a model's
    prediction on an image is public once every question on the image is decided, so annotators cannot
    learn which model asked what (an image shared with another pair would otherwise give the other pair's
    open question away), and never on a gold image, which annotators are still handed. The counts of labelled
    and correct images cover every selected image whose two questions are decided, as the leaderboard does.
    """
    a_id, b_id = min(a_id, b_id), max(a_id, b_id)
    subset = db_session.scalar(
        select(PairSubset).where(
            PairSubset.competition_id == competition.id,
            PairSubset.classifier_a_id == a_id,
            PairSubset.classifier_b_id == b_id,
        )
    )
    if subset is None:
        raise NotFound(f"classifiers {a_id} and {b_id} have no selected images in this competition (yet)")
    rows = db_session.execute(
        with_pair_questions(
            select(
                PairImage,
                Image.sha256,
                QUESTION_A.outcome,
                QUESTION_B.outcome,
                image_withheld(competition.id),
            )
            .join(PairSubset, PairSubset.id == PairImage.subset_id)
            .join(Image, Image.id == PairImage.image_id),
            decided=False,
        )
        .where(PairImage.subset_id == subset.id)
        .order_by(PairImage.position)
    ).all()
    names = competition.class_names
    images: dict[PairImageRole, list[GalleryImage]] = {role: [] for role in PairImageRole}
    labelled = withheld = reserve = correct_a = correct_b = 0
    for pair_image, sha256, right_a, right_b, withheld_image in rows:
        decided = right_a is not None and right_b is not None
        if pair_image.role == PairImageRole.selected and decided:
            labelled, correct_a, correct_b = labelled + 1, correct_a + right_a, correct_b + right_b
        if pair_image.role == PairImageRole.reserve:
            reserve += 1
            continue
        if withheld_image:
            withheld += pair_image.role == PairImageRole.selected
            continue
        images[pair_image.role].append(
            GalleryImage(
                position=pair_image.position,
                image_sha256=sha256,
                image_url=f"/images/{sha256}",
                thumbnail_url=f"/thumbnails/{sha256}",
                distance=pair_image.distance,
                label_a=str(names[pair_image.label_a]),
                label_b=str(names[pair_image.label_b]),
                prob_a=pair_image.prob_a,
                prob_b=pair_image.prob_b,
                below_threshold=pair_image.below_threshold,
                correct_a=right_a,
                correct_b=right_b,
                case=3 - int(right_a) - int(right_b) if decided else None,
            )
        )
    classifier_a, classifier_b = db_session.get_one(Classifier, a_id), db_session.get_one(Classifier, b_id)
    return PairGalleryRead(
        competition_id=competition.id,
        classifier_a=ClassifierRef(id=classifier_a.id, name=classifier_a.name),
        classifier_b=ClassifierRef(id=classifier_b.id, name=classifier_b.name),
        selected=images[PairImageRole.selected],
        discarded=images[PairImageRole.discarded],
        withheld=withheld,
        reserve=reserve,
        labelled=labelled,
        correct_a=correct_a,
        correct_b=correct_b,
        selection=pair_selection(db_session=db_session, competition=competition, pair=(a_id, b_id)),
    )
