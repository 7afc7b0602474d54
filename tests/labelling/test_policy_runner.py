"""The policy's own process (app/labelling/active_sampling/policy_runner.py): reruns happen there, on the
committed database, and a dead process is replaced at the next rerun."""

import asyncio
import os
import signal

import pytest
from sqlalchemy import select

from app.competitions.models import Sampling
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.db.engine import create_db_engine, create_sessionmaker
from app.labelling.active_sampling.policy import set_sampling
from app.labelling.active_sampling.policy_runner import PolicyRunner, ready
from app.labelling.models import ActivePolicy
from tests.labelling.factories import labelling_competition


def active_competition(url: str) -> int:
    """A committed competition under active sampling with questions counted since its last rerun."""
    engine = create_db_engine(url)
    with create_sessionmaker(engine)() as db_session:
        competition = create_competition(db_session=db_session, spec=CompetitionCreate(name="runner", k=2))
        labelling_competition(db_session, competition, classifiers=3, images_per_pair=3)
        set_sampling(db_session, competition, Sampling.active)
        db_session.get_one(ActivePolicy, competition.id).decided_since_refresh = 5
        db_session.commit()
        competition_id = competition.id
    engine.dispose()
    return competition_id


def counted(url: str, competition_id: int) -> int:
    """The competition's questions counted since its policy's last rerun."""
    engine = create_db_engine(url)
    with create_sessionmaker(engine)() as db_session:
        count = db_session.scalar(
            select(ActivePolicy.decided_since_refresh).where(ActivePolicy.competition_id == competition_id)
        )
    engine.dispose()
    return count


def test_the_policy_reruns_in_a_process_of_its_own_started_again_if_it_died(fresh_database_url):
    competition_id = active_competition(fresh_database_url)
    runner = PolicyRunner(fresh_database_url)
    try:
        pid = runner.start().submit(os.getpid).result(timeout=60)
        assert pid != os.getpid()
        asyncio.run(runner.refresh_if_due(competition_id, ran_dry=True))  # any counted question, as when dry
        assert counted(fresh_database_url, competition_id) == 0
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(Exception, match="terminated abruptly"):
            asyncio.run(runner.refresh_if_due(competition_id, ran_dry=True))
        assert runner.start().submit(ready).result(timeout=60) is None
        assert runner.start().submit(os.getpid).result(timeout=60) not in (pid, os.getpid())
    finally:
        runner.close()
