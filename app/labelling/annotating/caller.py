"""The caller of a labelling request and the competition's labelling settings, read in one query."""

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session

from app.competitions.models import Sampling
from app.i18n import choose_locale
from app.labelling.annotating.caller_statements import (
    CALLER_BY_ID,
    CALLER_BY_TOKEN,
    LOCKED_CALLER_BY_ID,
    LOCKED_CALLER_BY_TOKEN,
)
from app.labelling.types import Labeller, LabellingSettings
from app.security import hash_api_token
from app.users.models import Role


@dataclass(frozen=True)
class LabellingCaller:
    """An annotator's request resolved in one query: who calls, the competition (None when there is no
    such competition), whether they may label in it (an admin, or the competition is open to all
    annotators, or they are one of its members), the token they called with (id and last use) if any, and
    why they are paused in the competition (app.labelling.quality_control.quality), if they are."""

    labeller: Labeller
    competition: LabellingSettings | None
    may_label: bool
    token_id: int | None
    token_last_used_at: datetime | None
    paused: str | None


def labelling_caller(
    *,
    db_session: Session,
    token: str | None,
    user_id: int | None,
    session_generation: int | None,
    competition_id: int,
    writes: bool,
    languages: tuple[str | None, str] = (None, ""),
) -> LabellingCaller | None:
    """The active account owning this API token (or else with this id, its sessions of this generation not
    ended), the competition's labelling settings and the account's membership, in one query; None when no
    active account matches. The account's language is its setting, else the first of `languages` (the one
    chosen in the browser session, then the Accept-Language header) that the pages come in.

    For a request that writes (answers, flags, leases), the account's row is locked FOR SHARE until the
    transaction ends, so that its votes_excluded and is_active hold for the whole request: pausing the
    annotator or excluding their votes (app.labelling.quality_control.annotators) waits for it, and it for
    them.
    """
    if token is not None:
        statement = LOCKED_CALLER_BY_TOKEN if writes else CALLER_BY_TOKEN
        rows = statement.rows(
            db_session, {"token_hash": hash_api_token(token), "competition_id": competition_id}
        )
    else:
        statement = LOCKED_CALLER_BY_ID if writes else CALLER_BY_ID
        rows = statement.rows(
            db_session,
            {"user_id": user_id, "session_generation": session_generation, "competition_id": competition_id},
        )
    if not rows:
        return None
    (row,) = rows
    competition = (
        None
        if row.competition_id is None
        else LabellingSettings(
            row.competition_id,
            row.created_at,
            row.panel_size,
            row.gold_rate,
            row.gold_threshold,
            row.gold_min_answers,
            row.translations_version,
            Sampling(row.sampling),
            row.annotator_reliability,
            row.settled,
        )
    )
    role = Role(row.role)
    may_label = role == Role.admin or not row.members_only or row.member_id is not None
    labeller = Labeller(row.id, role, row.votes_excluded, choose_locale(row.locale, *languages))
    return LabellingCaller(labeller, competition, may_label, row.token_id, row.last_used_at, row.paused)
