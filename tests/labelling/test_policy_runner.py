"""The policy's own process (app/labelling/active_sampling/policy_runner.py): reruns happen there, on the
committed database, and a dead process is replaced at the next rerun."""

import asyncio
import os
import re
import signal
from dataclasses import replace
from datetime import datetime, timedelta

import httpx
from sqlalchemy import select, text, update

from app.competitions.models import Competition, Sampling
from app.competitions.schemas import CompetitionCreate
from app.competitions.service import create_competition
from app.db.base import utcnow
from app.db.engine import create_db_engine, create_sessionmaker
from app.labelling.active_sampling import policy, policy_runner
from app.labelling.active_sampling.policy import set_sampling
from app.labelling.active_sampling.policy_runner import (
    BATCHES_PER_INTERVAL,
    POLICY_NICENESS,
    PolicyRunner,
    ready,
    refresh_if_due_at,
)
from app.labelling.models import ActivePolicy, LabelItem
from app.users.models import Role
from tests.labelling.factories import labelling_competition, users_with_tokens
from tests.reliability.test_faults import wait_for
from tests.support.browser import serving


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


def policy_row_value(url: str, competition_id: int, column):
    """A column of the competition's policy row, as committed."""
    engine = create_db_engine(url)
    with create_sessionmaker(engine)() as db_session:
        value = db_session.scalar(select(column).where(ActivePolicy.competition_id == competition_id))
    engine.dispose()
    return value


def counted(url: str, competition_id: int) -> int:
    """The competition's questions counted since its policy's last rerun."""
    return policy_row_value(url, competition_id, ActivePolicy.decided_since_refresh)


def resting_until(url: str, competition_id: int) -> datetime | None:
    """Until when the competition's policy rests."""
    return policy_row_value(url, competition_id, ActivePolicy.resting_until)


def test_the_policy_reruns_in_a_process_of_its_own_started_again_if_it_died(fresh_database_url):
    competition_id = active_competition(fresh_database_url)
    runner = PolicyRunner(fresh_database_url)
    try:
        pid = runner.start().submit(os.getpid).result(timeout=60)
        assert pid != os.getpid()
        # Below the server's CPU priority, so that requests go first (os.nice(0) reads the niceness).
        assert runner.start().submit(os.nice, 0).result(timeout=60) == os.nice(0) + POLICY_NICENESS
        asyncio.run(runner.refresh_if_due(competition_id, ran_dry=True))  # any counted question, as when dry
        assert counted(fresh_database_url, competition_id) == 0
        assert resting_until(fresh_database_url, competition_id) is not None  # its rest began
        os.kill(pid, signal.SIGKILL)
        asyncio.run(runner.refresh_if_due(competition_id, ran_dry=True))  # kept for the admin, not raised
        assert "terminated abruptly" in runner.failures[competition_id].error
        assert runner.start().submit(ready).result(timeout=60) is None
        assert runner.start().submit(os.getpid).result(timeout=60) not in (pid, os.getpid())
    finally:
        runner.close()


def test_a_server_process_hands_its_decided_questions_over_in_batches(fresh_database_url):
    competition_id = active_competition(fresh_database_url)  # 5 counted, refresh_interval 20
    runner = PolicyRunner(fresh_database_url)
    try:
        assert runner.count(competition_id, 1)  # before the first rerun asked: handed over at once
        asyncio.run(runner.refresh_if_due(competition_id, ran_dry=False))
        assert counted(fresh_database_url, competition_id) == 6  # counted there, not yet due
        assert runner.batch[competition_id] == 20 // BATCHES_PER_INTERVAL
        assert not runner.count(competition_id, 1)  # below the batch: kept in this process
        assert counted(fresh_database_url, competition_id) == 6
        assert runner.count(competition_id, 1)
        os.kill(runner.start().submit(os.getpid).result(timeout=60), signal.SIGKILL)
        asyncio.run(runner.refresh_if_due(competition_id, ran_dry=False))  # fails: the count stays here
        assert runner.pending[competition_id] == 2
        assert runner.count(competition_id, 12)
        asyncio.run(runner.refresh_if_due(competition_id, ran_dry=False))  # 6 + 14 = 20: the policy reruns
        assert counted(fresh_database_url, competition_id) == 0 and competition_id not in runner.pending
    finally:
        runner.close()


METRICS_TOKEN = "metrics-token"


def failures_counted(http: httpx.Client, competition_id: int) -> float:
    """mad_policy_rerun_failures_total of the competition in /metrics (0 before its first)."""
    text = http.get("/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}).raise_for_status().text
    found = re.search(
        rf'^mad_policy_rerun_failures_total{{competition="{competition_id}"}} (\S+)$', text, re.M
    )
    return float(found.group(1)) if found else 0.0


def answer_one_item(http: httpx.Client, competition_id: int, token: str) -> dict:
    """An annotator's next item answered (each answer decides its question, a panel of one); the next."""
    prefix = f"/api/v1/competitions/{competition_id}/labelling"
    headers = {"Authorization": f"Bearer {token}"}
    item = http.post(f"{prefix}/next", headers=headers).raise_for_status().json()["item"]
    answers = [{"question_id": q["question_id"], "answer": True} for q in item["questions"]]
    body = {"answers": answers, "next": True}
    return http.post(f"{prefix}/answers", json=body, headers=headers).raise_for_status().json()["next"]


def test_a_failed_rerun_shows_on_the_admin_page_and_in_the_metrics_while_labelling_goes_on(
    fresh_database_url, tmp_path
):
    with serving(fresh_database_url, tmp_path / "data", metrics_token=METRICS_TOKEN) as server:
        with server.sessions() as db_session:
            spec = CompetitionCreate(name="failing", k=2, panel_size=1)
            competition = create_competition(db_session=db_session, spec=spec)
            labelling_competition(db_session, competition, classifiers=3, images_per_pair=3)
            set_sampling(db_session, competition, Sampling.active)
            db_session.get_one(ActivePolicy, competition.id).decided_since_refresh = 100  # a rerun is due
            ((_, annotator),) = users_with_tokens(db_session, "annotator", 1)
            ((_, admin),) = users_with_tokens(db_session, "admin", 1, Role.admin)
            db_session.commit()
            competition_id = competition.id
            before = priorities(db_session, competition_id)
        page = f"/admin/competitions/{competition_id}"
        with httpx.Client(base_url=server.url, timeout=60) as http:
            counted_before = failures_counted(http, competition_id)
            pid = server.app.state.policy_runner.start().submit(os.getpid).result(timeout=60)
            os.kill(pid, signal.SIGKILL)  # the policy's process dies, as under the out-of-memory killer

            assert answer_one_item(http, competition_id, annotator)["status"] == "item"
            shown = wait_for(
                lambda: 'id="policy-failure"' in (text := admin_page(http, page, admin)) and text,
                "the failure",
            )
            assert "The active policy's last rerun failed at" in shown and "BrokenProcessPool" in shown
            assert failures_counted(http, competition_id) == counted_before + 1
            with server.sessions() as db_session:
                assert priorities(db_session, competition_id) == before  # the last good rerun's
            assert counted(fresh_database_url, competition_id) == 100  # still due, and the failed
            assert server.app.state.policy_runner.pending[competition_id] > 0  # rerun's count kept

            assert answer_one_item(http, competition_id, annotator)["status"] in ("item", "finished")
            wait_for(lambda: counted(fresh_database_url, competition_id) == 0, "a rerun in a new process")
            # The failure is cleared once the rerun has also written its priorities (after its commit).
            wait_for(lambda: failure_shown(admin_page(http, page, admin)) is None, "the failure cleared")
            assert failures_counted(http, competition_id) == counted_before + 1


def failure_shown(page: str) -> str | None:
    """The admin page's paragraph on the policy's last failed rerun, if it has one."""
    found = re.search(r'<p [^>]*id="policy-failure">(.*?)</p>', page, re.DOTALL)
    return found.group(1) if found else None


def admin_page(http: httpx.Client, page: str, token: str) -> str:
    return http.get(page, headers={"Authorization": f"Bearer {token}"}).raise_for_status().text


def priorities(db_session, competition_id: int) -> dict[int, float]:
    """Each label item's priority, by id."""
    return dict(
        db_session.execute(
            select(LabelItem.id, LabelItem.priority).where(LabelItem.competition_id == competition_id)
        ).all()
    )


def test_a_rerun_writes_its_priorities_in_short_transactions_and_stops_for_a_later_run(
    fresh_database_url, monkeypatch
):
    competition_id = active_competition(fresh_database_url)
    engine = create_db_engine(fresh_database_url)
    sessions = create_sessionmaker(engine)
    monkeypatch.setattr(policy, "LEVELS_AT_ONCE", 1)  # one item per transaction
    try:
        with sessions() as db_session, db_session.begin():
            db_session.execute(update(LabelItem).values(priority=1e-9))  # below every level: all rewritten
            first = policy.refresh_if_due(db_session, competition_id=competition_id, ran_dry=True).rerun
        assert first is not None and len(first.levels.item_ids) >= 3
        assert stored_priorities(sessions, competition_id) == {
            item_id: 1e-9 for item_id in first.levels.item_ids.tolist()
        }
        written = policy.write_levels_in_turn(sessions, competition_id, first)
        assert written.batches == len(first.levels.item_ids)
        assert written.paused_s > 0, "paused after each batch but the last"
        assert stored_priorities(sessions, competition_id) == dict(
            zip(first.levels.item_ids.tolist(), first.levels.priorities.tolist(), strict=True)
        )

        with sessions() as db_session, db_session.begin():
            db_session.execute(update(LabelItem).values(priority=1e-9))
            db_session.get_one(ActivePolicy, competition_id).decided_since_refresh = 1
            second = policy.refresh_if_due(db_session, competition_id=competition_id, ran_dry=True).rerun
        assert second is not None

        def later_run_after_one_batch():
            """A session; after the first batch, another rerun (a dry queue's) commits in between."""
            opened.append(True)
            if len(opened) == 2:
                with sessions() as db_session, db_session.begin():
                    policy.refresh(db_session, db_session.get_one(Competition, competition_id))
            return sessions()

        opened: list[bool] = []
        assert policy.write_levels_in_turn(later_run_after_one_batch, competition_id, second).batches == 1
        # The later run read the one item written and wrote the others itself: every item at its level.
        assert stored_priorities(sessions, competition_id) == dict(
            zip(second.levels.item_ids.tolist(), second.levels.priorities.tolist(), strict=True)
        )
    finally:
        engine.dispose()


def stored_priorities(sessions, competition_id: int) -> dict[int, float]:
    """Each label item's priority, by id, as committed."""
    with sessions() as db_session:
        return priorities(db_session, competition_id)


def test_after_a_rerun_the_policy_rests_four_times_as_long_unless_a_queue_ran_dry(fresh_database_url):
    competition_id = active_competition(fresh_database_url)  # refresh_interval 20
    engine = create_db_engine(fresh_database_url)
    sessions = create_sessionmaker(engine)

    def due(decided: int, ran_dry: bool) -> policy.Rerun | None:
        """refresh_if_due with `decided` questions counted since the last rerun."""
        with sessions() as db_session, db_session.begin():
            db_session.get_one(ActivePolicy, competition_id).decided_since_refresh = decided
            return policy.refresh_if_due(db_session, competition_id=competition_id, ran_dry=ran_dry).rerun

    try:
        done = due(20, ran_dry=False)
        assert done is not None
        # Resting already while its priorities are written: another server process's rerun is not due.
        first_rest = resting_until(fresh_database_url, competition_id)
        assert first_rest is not None and first_rest > done.refreshed_at
        took_10_s = replace(done, started=done.started - timedelta(seconds=10))
        before = utcnow()
        with sessions() as db_session, db_session.begin():
            policy.rest(db_session, competition_id, took_10_s)
        after = utcnow()
        until = resting_until(fresh_database_url, competition_id)
        assert until is not None
        start = took_10_s.started
        assert 5 * (before - start) <= until - start <= 5 * (after - start)  # rest = 4 × (now − start)
        paused = timedelta(seconds=8)  # its writer paused for 8 of those 10 s: only the 2 s it worked count
        before = utcnow()
        with sessions() as db_session, db_session.begin():
            policy.rest(db_session, competition_id, took_10_s, paused.total_seconds())
        after = utcnow()
        until = resting_until(fresh_database_url, competition_id)
        assert until is not None
        assert 5 * (before - start) - 4 * paused <= until - start <= 5 * (after - start) - 4 * paused
        reads_paused_5_s = replace(took_10_s, paused_s=5.0)  # and its reads 5 s, its writer 3 s: the same 8
        before = utcnow()
        with sessions() as db_session, db_session.begin():
            policy.rest(db_session, competition_id, reads_paused_5_s, 3.0)
        after = utcnow()
        until = resting_until(fresh_database_url, competition_id)
        assert until is not None
        assert 5 * (before - start) - 4 * paused <= until - start <= 5 * (after - start) - 4 * paused
        assert due(20, ran_dry=False) is None  # resting: the count stays for later
        assert due(1, ran_dry=True) is not None  # an annotator with nothing left does not wait
        after_the_dry_rerun = resting_until(fresh_database_url, competition_id)
        with sessions() as db_session, db_session.begin():
            policy.rest(db_session, competition_id, took_10_s)  # a later run holds the row: no rest
        assert resting_until(fresh_database_url, competition_id) == after_the_dry_rerun
        with sessions() as db_session, db_session.begin():
            db_session.get_one(ActivePolicy, competition_id).resting_until = utcnow() - timedelta(seconds=1)
        assert due(20, ran_dry=False) is not None
    finally:
        engine.dispose()


def test_a_server_process_keeps_its_count_while_the_policy_rests(fresh_database_url):
    competition_id = active_competition(fresh_database_url)  # 5 counted, refresh_interval 20
    engine = create_db_engine(fresh_database_url)
    rest_ends = utcnow() + timedelta(hours=1)
    with create_sessionmaker(engine)() as db_session, db_session.begin():
        db_session.get_one(ActivePolicy, competition_id).resting_until = rest_ends
    engine.dispose()
    runner = PolicyRunner(fresh_database_url)
    try:
        assert runner.count(competition_id, 20)  # nothing known here yet: handed over
        asyncio.run(runner.refresh_if_due(competition_id, ran_dry=False))
        assert counted(fresh_database_url, competition_id) == 25  # resting: counted there, no rerun
        assert runner.resting_until[competition_id] == rest_ends
        assert not runner.count(competition_id, 100)  # a full interval, kept here until the rest ends
        assert runner.pending[competition_id] == 100
    finally:
        runner.close()


def test_the_policy_commits_without_waiting_for_the_disk_where_the_requests_wait(fresh_database_url):
    competition_id = active_competition(fresh_database_url)  # 5 counted, refresh_interval 20
    before = policy_row_value(fresh_database_url, competition_id, ActivePolicy.refreshed_at)
    try:
        refresh_if_due_at(fresh_database_url, competition_id, counted=20, ran_dry=False)
        after = policy_row_value(fresh_database_url, competition_id, ActivePolicy.refreshed_at)
        assert after is not None and after != before  # reran and committed: another connection sees it
        if fresh_database_url.startswith("postgresql"):
            with policy_runner._sessions[fresh_database_url]() as db_session:
                assert db_session.scalar(text("SHOW synchronous_commit")) == "off"
            engine = create_db_engine(fresh_database_url)  # what the requests commit on
            with engine.connect() as connection:
                assert connection.scalar(text("SHOW synchronous_commit")) == "on"
            engine.dispose()
    finally:
        policy_runner._sessions.pop(fresh_database_url).kw["bind"].dispose()
