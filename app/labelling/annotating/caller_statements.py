"""The hot statement that identifies the caller of a labelling request, with the competition's labelling
settings and the caller's membership and pause, in one query (app.labelling.annotating.caller; built once at
import, as app.labelling.statements are)."""

from sqlalchemy import and_, bindparam, literal_column, null, select

from app.competitions.models import Competition, CompetitionMember
from app.db.statements import HotStatement
from app.labelling.models import QualityFlag, QualityFlagKind
from app.users.models import ApiToken, User

_users = User.__table__
_api_tokens = ApiToken.__table__
_competitions = Competition.__table__
_members = CompetitionMember.__table__
_quality_flags = QualityFlag.__table__

_PAUSED = (
    select(_quality_flags.c.detail)
    .where(
        _quality_flags.c.competition_id == bindparam("competition_id"),
        _quality_flags.c.user_id == _users.c.id,
        _quality_flags.c.kind == literal_column(f"'{QualityFlagKind.gold.value}'"),
        _quality_flags.c.decision.is_(None),
    )
    .limit(1)
    .scalar_subquery()
)
"""Why the annotator is paused in the competition (an open gold flag's detail), or NULL."""
_CALLER_COLUMNS = (
    _users.c.id,
    _users.c.role,
    _users.c.votes_excluded,
    _users.c.locale,
    _competitions.c.id.label("competition_id"),
    _competitions.c.created_at,
    _competitions.c.translations_version,
    _competitions.c.panel_size,
    _competitions.c.gold_rate,
    _competitions.c.gold_threshold,
    _competitions.c.gold_min_answers,
    _competitions.c.sampling,
    _competitions.c.annotator_reliability,
    _competitions.c.settled,
    _PAUSED.label("paused"),
    _competitions.c.members_only,
    _members.c.user_id.label("member_id"),
)
_WITH_COMPETITION = (_competitions, _competitions.c.id == bindparam("competition_id"))
_WITH_MEMBERSHIP = (
    _members,
    and_(_members.c.competition_id == _competitions.c.id, _members.c.user_id == _users.c.id),
)
"""The caller's membership row in the competition, if any (a members-only competition needs one)."""
_BY_TOKEN = (
    select(*_CALLER_COLUMNS, _api_tokens.c.id.label("token_id"), _api_tokens.c.last_used_at)
    .select_from(
        _users.join(_api_tokens, _api_tokens.c.user_id == _users.c.id)
        .outerjoin(*_WITH_COMPETITION)
        .outerjoin(*_WITH_MEMBERSHIP)
    )
    .where(_api_tokens.c.token_hash == bindparam("token_hash"), _users.c.is_active)
)
_BY_ID = (
    select(*_CALLER_COLUMNS, null().label("token_id"), null().label("last_used_at"))
    .select_from(_users.outerjoin(*_WITH_COMPETITION).outerjoin(*_WITH_MEMBERSHIP))
    .where(
        _users.c.id == bindparam("user_id"),
        _users.c.is_active,
        _users.c.session_generation == bindparam("session_generation"),
    )
)
CALLER_BY_TOKEN = HotStatement(_BY_TOKEN)
"""The active account owning an API token, with the competition's labelling settings and whether the account
is one of its members."""
CALLER_BY_ID = HotStatement(_BY_ID)
"""The active account with this id whose sessions of this generation are not ended, with the competition's
labelling settings."""
LOCKED_CALLER_BY_TOKEN = HotStatement(_BY_TOKEN.with_for_update(read=True, of=_users))
"""CALLER_BY_TOKEN, the account's row locked FOR SHARE until the transaction ends: a labelling request
that writes holds it so, and pausing an annotator or excluding their votes updates it, so the two never
overlap (the lock costs no statement and no round trip; no two labelling requests wait for each other
on it)."""
LOCKED_CALLER_BY_ID = HotStatement(_BY_ID.with_for_update(read=True, of=_users))
"""CALLER_BY_ID, the account's row locked FOR SHARE (see LOCKED_CALLER_BY_TOKEN)."""
