"""What active sampling settled and what it cost, for the leaderboard (issue 24;
app.labelling.active_sampling.policy)."""

from sqlalchemy.orm import Session

from app.classifiers.service import list_classifiers
from app.competitions.models import Competition
from app.i18n import N_
from app.labelling.active_sampling.cost import FULL_DESIGN, active_cost
from app.labelling.active_sampling.policy import last_decision
from app.labelling.active_sampling.reliability import early_decision_basis
from app.labelling.schemas import EarlyDecisionsRead
from app.labelling.types import actively_sampled
from app.leaderboard.schemas import ActiveSamplingRead, InformativePair

ACTIVE_PROVISIONAL_RULE = N_(
    "Under active sampling a classifier is provisional while its {level} bootstrap rank interval spans more "
    "than {ranks} ranks, or until the policy's stop rule settles the ranking (full MAD, every selected image "
    "labelled, expected to reverse at most half a pair of neighbours and none with a chance above 25%); the "
    "stop rule replaces the paper's minimum of labelled images per pair."
)


def active_provisional_rule(level: float, spread: int) -> str:
    """The provisional rule under active sampling: the rank interval, and the policy's stop rule."""
    return ACTIVE_PROVISIONAL_RULE.format(level=f"{level:.0%}", ranks=spread + 1)


def active_sampling(db_session: Session, competition: Competition) -> ActiveSamplingRead | None:
    """The policy's last decision with the votes used now and the full design's; None under uniform
    sampling."""
    if not actively_sampled(competition):
        return None
    decision = last_decision(db_session, competition.id)
    cost = active_cost(db_session, competition.id, competition.panel_size)
    names = {c.id: c.name for c in list_classifiers(db_session=db_session, competition_id=competition.id)}
    pairs = [] if decision is None else decision.informative_pairs
    return ActiveSamplingRead(
        settled=competition.settled,
        status="settled" if competition.settled else "provisional",
        votes_used=cost.votes_used,
        full_design_votes=cost.full_design_votes,
        share_of_full_design=cost.votes_used / cost.full_design_votes if cost.full_design_votes else None,
        full_design=FULL_DESIGN,
        informative_pairs=[
            InformativePair(
                classifier_a_id=a, classifier_a=names[a], classifier_b_id=b, classifier_b=names[b]
            )
            for a, b in pairs
            if a in names and b in names
        ],
        expected_swaps=None if decision is None else decision.expected_swaps,
        early_decisions=EarlyDecisionsRead.of(
            early_decision_basis(db_session, competition.id, competition.panel_size)
        ),
        refreshed_at=None if decision is None else decision.refreshed_at,
    )
