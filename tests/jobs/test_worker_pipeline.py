"""`mad worker` alone takes a competition from imported images to stored pair subsets (paper Algorithm 1)."""

from sqlalchemy import func, select
from typer.testing import CliRunner

from app.classifiers.models import Classifier, ClassifierStatus
from app.classifiers.service import read_predictions, register_timm_pretrained
from app.cli.main import app as cli
from app.competitions.models import Competition
from app.competitions.service import competition_taxonomy
from app.images.models import CompetitionImage
from app.jobs.models import Job, JobStatus
from app.labelling.models import PairImage, PairImageRole, PairSubset, Question
from tests.jobs.conftest import set_up_competition

N_IMAGES = 500
K = 5


def test_mad_worker_alone_predicts_and_selects_every_pair(live_settings, live_service, tmp_path):
    competition_id = set_up_competition(live_service, tmp_path, images=N_IMAGES, k=K)
    env = {
        "MAD_DATABASE_URL": live_settings.database_url,
        "MAD_DATA_DIR": str(live_settings.data_dir),
        "MAD_ENV": "development",
    }
    result = CliRunner().invoke(cli, ["worker", "--exit-when-idle", "--device", "cpu"], env=env)
    assert result.exit_code == 0, result.output
    assert "Finished" in result.output

    with live_service.session() as session:
        assert set(session.scalars(select(Job.status))) == {JobStatus.done}
        competition = session.get(Competition, competition_id)
        classifiers = session.scalars(select(Classifier).order_by(Classifier.id)).all()
        assert [c.status for c in classifiers] == [ClassifierStatus.ready] * 3
        predictions = {
            c.id: read_predictions(settings=live_settings, classifier=c, n_images=N_IMAGES)
            for c in classifiers
        }
        assert all((p.top1 >= 0).all() for p in predictions.values())
        distance = competition_taxonomy(competition).distance_matrix()
        ordinals = dict(session.execute(select(CompetitionImage.image_id, CompetitionImage.ordinal)).all())

        subsets = session.scalars(select(PairSubset).order_by(PairSubset.id)).all()
        assert [(s.classifier_a_id, s.classifier_b_id) for s in subsets] == [
            (classifiers[0].id, classifiers[1].id),
            (classifiers[0].id, classifiers[2].id),
            (classifiers[1].id, classifiers[2].id),
        ]
        for subset in subsets:
            rows = session.scalars(
                select(PairImage).where(PairImage.subset_id == subset.id).order_by(PairImage.position)
            ).all()
            selected = [row for row in rows if row.role == PairImageRole.selected]
            assert len(selected) == K
            a, b = predictions[subset.classifier_a_id], predictions[subset.classifier_b_id]
            for row in rows:
                assert row.label_a != row.label_b
                assert row.distance == distance[row.label_a, row.label_b]
            assert [row.distance for row in rows] == sorted((row.distance for row in rows), reverse=True)
            for row in rows:
                ordinal = ordinals[row.image_id]
                assert (a.top1[ordinal], b.top1[ordinal]) == (row.label_a, row.label_b)
        questions = session.scalar(select(func.count()).select_from(Question))
        assert 0 < questions <= 3 * K * 2


def test_a_pretrained_tag_that_cannot_be_downloaded_fails_its_classifier_with_the_reason(
    live_settings, live_service, tmp_path
):
    set_up_competition(live_service, tmp_path, images=20, architectures=())
    with live_service.session() as session:
        competition = session.scalars(select(Competition)).one()
        register_timm_pretrained(
            db_session=session,
            settings=live_settings,
            competition=competition,
            name="r18",
            pretrained_tag="resnet18.a1_in1k",
        )
        session.commit()
    env = {"MAD_DATABASE_URL": live_settings.database_url, "MAD_DATA_DIR": str(live_settings.data_dir)}
    result = CliRunner().invoke(cli, ["worker", "--exit-when-idle", "--device", "cpu"], env=env)
    assert result.exit_code == 0, result.output
    with live_service.session() as session:
        classifier = session.scalars(select(Classifier)).one()
        assert classifier.status == ClassifierStatus.failed
        assert "resnet18.a1_in1k" in classifier.error
        assert set(session.scalars(select(Job.status))) == {JobStatus.failed}
    assert not (live_settings.predictions_dir / str(classifier.id)).exists()
