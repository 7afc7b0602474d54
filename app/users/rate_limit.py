"""Slowing down password guessing: failed sign-ins are kept in the database, so that every server process
(`mad serve --workers 4`) and a restarted one count the same failures. They are counted per address and
username, and per address across usernames (spraying one password over many names); rows older than the
window are deleted as new failures come in."""

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.users.models import LoginFailure

MAX_TEXT = 64
"""Addresses and usernames are stored up to this many characters (a username is at most 64)."""


@dataclass(frozen=True)
class LoginLimits:
    """At most `per_username` failures per (address, username) and `per_address` per address, within
    `window_s` seconds."""

    per_username: int
    per_address: int
    window_s: int


def retry_after(
    *, db_session: Session, limits: LoginLimits, address: str, username: str, now: datetime
) -> int:
    """Seconds until this address may try this username again; 0 when it may try now."""
    since = now - timedelta(seconds=limits.window_s)
    recent = select(LoginFailure.failed_at).where(
        LoginFailure.address == address[:MAX_TEXT], LoginFailure.failed_at > since
    )
    waits = [
        _wait(db_session, recent.where(LoginFailure.username == username[:MAX_TEXT]), limits.per_username),
        _wait(db_session, recent, limits.per_address),
    ]
    blocked = [failed_at for failed_at in waits if failed_at is not None]
    if not blocked:
        return 0
    return max(1, round((max(blocked) + timedelta(seconds=limits.window_s) - now).total_seconds()))


def _wait(db_session: Session, recent, limit: int) -> datetime | None:
    """When the limit-th most recent failure happened, if there are that many in the window (the block
    lasts until it leaves the window); else None."""
    times = db_session.scalars(recent.order_by(LoginFailure.failed_at.desc()).limit(limit)).all()
    return times[-1] if len(times) >= limit else None


def record_failure(
    *, db_session: Session, limits: LoginLimits, address: str, username: str, now: datetime
) -> None:
    """Count one failed sign-in, and forget every failure that has left the window."""
    db_session.execute(
        delete(LoginFailure).where(LoginFailure.failed_at <= now - timedelta(seconds=limits.window_s))
    )
    db_session.add(LoginFailure(address=address[:MAX_TEXT], username=username[:MAX_TEXT], failed_at=now))


def forget(*, db_session: Session, address: str, username: str) -> None:
    """Clear this address's failures for this username after a successful sign-in."""
    db_session.execute(
        delete(LoginFailure).where(
            LoginFailure.address == address[:MAX_TEXT], LoginFailure.username == username[:MAX_TEXT]
        )
    )
