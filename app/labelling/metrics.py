"""The labelling's Prometheus metrics (served by app/web/metrics.py): votes recorded, counted per process by
the labelling API (votes per minute: `rate(mad_votes_recorded_total[1m]) * 60`), failed reruns of the active
policy per competition, counted by the server process that asked for them (app.labelling.active_sampling.
policy_runner; alert on `increase(mad_policy_rerun_failures_total[15m]) > 0`), and open questions per
competition, read from the database at scrape time."""

from prometheus_client import Counter
from prometheus_client.core import GaugeMetricFamily
from sqlalchemy.orm import Session

from app.labelling.results import open_question_counts

VOTES = Counter("mad_votes_recorded", "Votes recorded (answers stored through the labelling API)")
POLICY_RERUN_FAILURES = Counter(
    "mad_policy_rerun_failures",
    "Reruns of the active policy that failed (labelling goes on with the last good priorities)",
    ["competition"],
)


def labelling_gauges(db_session: Session) -> list[GaugeMetricFamily]:
    """Questions without an outcome, per competition."""
    questions = GaugeMetricFamily(
        "mad_open_questions", "Questions without an outcome", labels=["competition"]
    )
    for competition_id, count in sorted(open_question_counts(db_session=db_session).items()):
        questions.add_metric([str(competition_id)], count)
    return [questions]
