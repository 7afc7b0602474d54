"""Who may label in a competition: everyone with the annotator role in an open one, only its members in a
members-only one, admins in all."""

from typing import cast

from sqlalchemy import CursorResult, delete, exists, or_, select
from sqlalchemy.orm import Session

from app.competitions.models import Competition, CompetitionMember
from app.competitions.schemas import MemberRead
from app.db.base import utcnow
from app.errors import InvalidInput, NotFound
from app.users.models import Role, User

MEMBERS_ONLY = "this competition is open to its members only: ask an admin to add you"
"""Why a labelling request of a non-member is refused (403)."""


def list_members(*, db_session: Session, competition: Competition) -> list[MemberRead]:
    """The competition's members, by username."""
    rows = db_session.execute(
        select(User.id, User.username, CompetitionMember.added_at)
        .join(CompetitionMember, CompetitionMember.user_id == User.id)
        .where(CompetitionMember.competition_id == competition.id)
        .order_by(User.username)
    )
    return [MemberRead(user_id=id_, username=name, added_at=added_at) for id_, name, added_at in rows]


def add_member(*, db_session: Session, competition: Competition, user: User) -> MemberRead:
    """Let an annotator label in the competition (adding a member twice changes nothing)."""
    if user.role != Role.annotator:
        raise InvalidInput(f"{user.username} is an {user.role.value}: only annotators are members")
    member = db_session.get(CompetitionMember, (competition.id, user.id))
    if member is None:
        member = CompetitionMember(competition_id=competition.id, user_id=user.id, added_at=utcnow())
        db_session.add(member)
        db_session.flush()
    return MemberRead(user_id=user.id, username=user.username, added_at=member.added_at)


def remove_member(*, db_session: Session, competition: Competition, user_id: int) -> None:
    """Take an annotator out of the competition's members, or NotFound when they are not one."""
    removed = cast(
        CursorResult,
        db_session.execute(
            delete(CompetitionMember).where(
                CompetitionMember.competition_id == competition.id, CompetitionMember.user_id == user_id
            )
        ),
    )
    if removed.rowcount == 0:
        raise NotFound(f"user {user_id} is not a member of {competition.name}")


def may_label(*, db_session: Session, competition: Competition, user: User) -> bool:
    """Whether the user may label in the competition: an admin, an open competition, or a member."""
    if user.role == Role.admin or not competition.members_only:
        return True
    return db_session.get(CompetitionMember, (competition.id, user.id)) is not None


def competitions_of(*, db_session: Session, user: User) -> list[Competition]:
    """The competitions the user may label in, oldest first: every one for an admin, the open ones and
    those they are a member of for an annotator."""
    query = select(Competition).order_by(Competition.id)
    if user.role != Role.admin:
        membership = exists().where(
            CompetitionMember.competition_id == Competition.id, CompetitionMember.user_id == user.id
        )
        query = query.where(or_(~Competition.members_only, membership))
    return list(db_session.scalars(query))
