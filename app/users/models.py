"""Accounts: admins, annotators and workers, their API tokens, invitations and OpenID identities."""

import unicodedata
from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, validates

from app.db.base import Base, str_enum, utcnow
from app.users.enums import Role  # its home is app/users/enums.py; imported from here as well


def username_key(username: str) -> str:
    """What makes two usernames one: the name NFKC-normalised, then case-folded (Unicode's compatibility
    caseless matching, UAX #15 and the Unicode Standard §3.13): `Admin`, `ADMIN` and `Ａdmin` are `admin`."""
    return unicodedata.normalize("NFKC", username).casefold()


class User(Base):
    """A person or a worker process that signs in."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    username_key: Mapped[str] = mapped_column(String(255), unique=True, index=True)
    """username_key(username), set with the username: its unique index keeps two accounts from names that
    differ only in case or Unicode form, even when both are made at once. Case folding can lengthen a name
    (ß is ss), hence its room."""
    role: Mapped[Role] = mapped_column(str_enum(Role))
    password_hash: Mapped[str | None] = mapped_column(String(255))
    is_active: Mapped[bool] = mapped_column(default=True)
    votes_excluded: Mapped[bool] = mapped_column(default=False)
    session_generation: Mapped[int] = mapped_column(default=0)
    """Sign-in cookies carry the generation they were issued in; raising it ends every session of the user
    (sign-out, deactivation, a new password)."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    locale: Mapped[str | None] = mapped_column(String(16))
    """The language the person chose for the pages and questions (app.i18n.locales()); None: their
    browser's Accept-Language decides."""
    member_competitions_only: Mapped[bool] = mapped_column(default=False)
    """The account labels in, and is shown, only the competitions it is a member of, open ones too: a crowd
    study's participant (app/studies), whom the study's link admits into its competition alone."""

    @validates("username")
    def _set_username_key(self, _field: str, username: str) -> str:
        """Keep username_key with the username."""
        self.username_key = username_key(username)
        return username


class ApiToken(Base):
    """A bearer token for the REST API; only its SHA-256 is stored."""

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None]


class Invitation(Base):
    """A one-time link with which a person sets their own username and password before it expires; only
    the SHA-256 of its token is stored. used_at and user_id say when it was used and by which account."""

    __tablename__ = "invitations"

    id: Mapped[int] = mapped_column(primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    role: Mapped[Role] = mapped_column(str_enum(Role))
    note: Mapped[str] = mapped_column(String(200), default="")
    created_by: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))


class OpenIDIdentity(Base):
    """An account at an OpenID provider that signs in to a local account: the provider's issuer and subject
    (its stable, never reassigned id of the person), never the e-mail address, which the person may change
    there (kept here as last seen)."""

    __tablename__ = "openid_identities"
    __table_args__ = (UniqueConstraint("issuer", "subject"), UniqueConstraint("user_id", "issuer"))

    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    issuer: Mapped[str] = mapped_column(String(255))
    subject: Mapped[str] = mapped_column(String(255))
    email: Mapped[str | None] = mapped_column(String(320))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_sign_in_at: Mapped[datetime] = mapped_column(default=utcnow)


class LoginFailure(Base):
    """A failed sign-in: from which address, for which username, when. Kept for the rate limit's window
    only, in the database so that every server process (and a restarted one) counts the same failures."""

    __tablename__ = "login_failures"
    __table_args__ = (Index("ix_login_failures_address_failed_at", "address", "failed_at"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    address: Mapped[str] = mapped_column(String(64))
    username: Mapped[str] = mapped_column(String(64))
    failed_at: Mapped[datetime] = mapped_column(index=True)
