"""Invitations: one-time links, expiring, with which a person makes their own account (username and
password, or an OpenID provider's account: app/users/openid.py); only the SHA-256 of a link's token is
stored."""

import secrets
from datetime import timedelta
from typing import cast

from sqlalchemy import CursorResult, select, update
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.errors import InvalidInput, NotFound
from app.security import hash_api_token
from app.users.models import Invitation, Role, User
from app.users.service import MIN_PASSWORD_LENGTH, check_username, create_user

INVITATION_PATH = "/invitations/{token}"
MAX_VALID_HOURS = 30 * 24
MAX_NOTE_LENGTH = 200
INVITABLE_ROLES = (Role.annotator, Role.admin)
GONE = "this invitation link has expired or was already used: ask for a new one"


def create_invitation(
    *, db_session: Session, role: Role, note: str, valid_hours: int, created_by: User | None
) -> tuple[Invitation, str]:
    """A new invitation for a person (annotator or admin) valid for valid_hours, and its token: the token
    is returned once and only its SHA-256 is kept."""
    if role not in INVITABLE_ROLES:
        raise InvalidInput("invitations are for annotators and admins: workers use API tokens")
    if len(note) > MAX_NOTE_LENGTH:
        raise InvalidInput(f"a note is at most {MAX_NOTE_LENGTH} characters")
    if not 1 <= valid_hours <= MAX_VALID_HOURS:
        raise InvalidInput(f"an invitation is valid for 1 to {MAX_VALID_HOURS} hours")
    token = secrets.token_urlsafe(32)
    now = utcnow()
    invitation = Invitation(
        token_hash=hash_api_token(token),
        role=role,
        note=note,
        created_by=created_by.id if created_by else None,
        created_at=now,
        expires_at=now + timedelta(hours=valid_hours),
    )
    db_session.add(invitation)
    db_session.flush()
    return invitation, token


def list_invitations(*, db_session: Session) -> list[tuple[Invitation, str | None]]:
    """Every invitation, newest first, with the username of the account made with it (None while unused)."""
    rows = db_session.execute(
        select(Invitation, User.username)
        .outerjoin(User, User.id == Invitation.user_id)
        .order_by(Invitation.id.desc())
    )
    return [(invitation, username) for invitation, username in rows]


def invitation_status(invitation: Invitation) -> str:
    """'used', 'expired' or 'open'."""
    if invitation.used_at is not None:
        return "used"
    return "expired" if invitation.expires_at <= utcnow() else "open"


def open_invitation(*, db_session: Session, token: str) -> Invitation:
    """The unused, unexpired invitation of this token, or NotFound."""
    invitation = db_session.scalar(
        select(Invitation).where(
            Invitation.token_hash == hash_api_token(token),
            Invitation.used_at.is_(None),
            Invitation.expires_at > utcnow(),
        )
    )
    if invitation is None:
        raise NotFound(GONE)
    return invitation


def accept_invitation(*, db_session: Session, token: str, username: str, password: str) -> User:
    """Make the invited person's account with their username and password and use the invitation up.

    Claim (claim_invitation: two uses of one link at once make one account) and account are one savepoint:
    when the username turns out taken (by an account made at the same moment with another link,
    create_user's Conflict) the link stays unused for another try.
    """
    check_username(username)
    if len(password) < MIN_PASSWORD_LENGTH:
        raise InvalidInput(f"a password of at least {MIN_PASSWORD_LENGTH} characters is required")
    with db_session.begin_nested():
        invitation = claim_invitation(db_session=db_session, token=token)
        user = create_user(db_session=db_session, username=username, role=invitation.role, password=password)
        invitation.user_id = user.id
        db_session.flush()
    return user


def claim_invitation(*, db_session: Session, token: str) -> Invitation:
    """The open invitation of this token, used up now (its user_id is the caller's to set), or NotFound.

    The invitation is claimed by one conditional UPDATE (unused and unexpired), so two uses of one link at
    once claim it once: the second waits for the first's row lock and then finds it used.
    """
    invitation = open_invitation(db_session=db_session, token=token)
    now = utcnow()
    claimed = cast(
        CursorResult,
        db_session.execute(
            update(Invitation)
            .where(Invitation.id == invitation.id, Invitation.used_at.is_(None), Invitation.expires_at > now)
            .values(used_at=now)
        ),
    )
    if claimed.rowcount != 1:
        raise NotFound(GONE)
    return invitation
