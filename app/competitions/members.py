"""Who may label in a competition, and who may see it: everyone with the annotator role labels in an open
one, only its members in a members-only one, admins in all; anyone sees an open competition, only its
members and admins see anything of a members-only one (docs/architecture.md)."""

from typing import cast

from sqlalchemy import CursorResult, delete, exists, or_, select
from sqlalchemy.orm import Session

from app.competitions.models import Competition, CompetitionMember
from app.competitions.schemas import MemberRead
from app.db.base import utcnow
from app.errors import Forbidden, InvalidInput, NotAuthenticated, NotFound
from app.users.models import Role, User

MEMBERS_ONLY = "this competition is open to its members only: ask an admin to add you"
"""Why a labelling request of a non-member, or any request about the competition, is refused (403)."""


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
    """Whether the user may label in the competition: an admin, an open competition (unless the account
    labels only where it is a member), or a member."""
    if user.role == Role.admin or not (competition.members_only or user.member_competitions_only):
        return True
    return db_session.get(CompetitionMember, (competition.id, user.id)) is not None


def may_see(*, db_session: Session, competition: Competition, user: User | None) -> bool:
    """Whether the caller (None: anonymous) may see the competition: an open one, or as admin or member."""
    if not competition.members_only:
        return True
    return user is not None and may_label(db_session=db_session, competition=competition, user=user)


def check_visible(*, db_session: Session, competition: Competition, user: User | None) -> Competition:
    """The competition when the caller may see it; else 401 for an anonymous caller, 403 for another."""
    if may_see(db_session=db_session, competition=competition, user=user):
        return competition
    if user is None:
        raise NotAuthenticated(f"competition {competition.id} is open to its members only: sign in")
    raise Forbidden(MEMBERS_ONLY)


def competitions_of(*, db_session: Session, user: User | None) -> list[Competition]:
    """The competitions the caller may label in and see, oldest first: every one for an admin, the open
    ones and those they are a member of for anyone else (the open ones for an anonymous caller; only those
    they are a member of for an account that labels only there)."""
    query = select(Competition).order_by(Competition.id)
    if user is None:
        query = query.where(~Competition.members_only)
    elif user.role != Role.admin:
        membership = exists().where(
            CompetitionMember.competition_id == Competition.id, CompetitionMember.user_id == user.id
        )
        query = query.where(
            membership if user.member_competitions_only else or_(~Competition.members_only, membership)
        )
    return list(db_session.scalars(query))
