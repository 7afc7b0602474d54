"""Request and response bodies for accounts and tokens."""

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.users.models import Role

USERNAME_PATTERN = r"^[A-Za-z0-9_.@-]{1,64}$"


class UserCreate(BaseModel):
    """A new account: people need a password, workers use tokens."""

    username: str = Field(pattern=USERNAME_PATTERN, examples=["alice"])
    role: Role
    password: str | None = Field(default=None, min_length=8, max_length=200)


KEEP_TOKENS = "Keep the account's API tokens working; by default they are revoked."


class UserUpdate(BaseModel):
    """Pause or resume an account, or exclude its votes from every outcome."""

    is_active: bool | None = None
    votes_excluded: bool | None = None
    keep_tokens: bool = Field(default=False, description=f"With is_active false: {KEEP_TOKENS}")


class PasswordSet(BaseModel):
    """A new password for an account, set by an admin (tell it to its owner)."""

    password: str = Field(min_length=8, max_length=200)
    keep_tokens: bool = Field(default=False, description=KEEP_TOKENS)


class PasswordChange(BaseModel):
    """The caller's own new password, with the current one."""

    current_password: str = Field(max_length=200)
    new_password: str = Field(min_length=8, max_length=200)
    keep_tokens: bool = Field(default=False, description=KEEP_TOKENS)


class UserRead(BaseModel):
    """An account as the API shows it (never its secrets)."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    username: str
    role: Role
    is_active: bool
    votes_excluded: bool
    created_at: datetime


class TokenCreate(BaseModel):
    """A label for a new API token, to tell tokens apart."""

    name: str = Field(default="api", min_length=1, max_length=100)


class TokenCreated(BaseModel):
    """A new API token: shown once, store it now."""

    user_id: int
    name: str
    token: str


class TokenRead(BaseModel):
    """An API token as listed: whose, its name, when made and last used (to the minute); never the token,
    of which only a hash is stored."""

    id: int
    user_id: int
    username: str
    name: str
    created_at: datetime
    last_used_at: datetime | None


class InvitationCreate(BaseModel):
    """An invitation for one person: the role their account gets, a note (whom it is for) and how long the
    link stays valid."""

    role: Role = Role.annotator
    note: str = Field(default="", max_length=200, examples=["alice@example.org"])
    valid_hours: int = Field(default=72, ge=1, le=30 * 24, description="Hours until the link expires.")


class InvitationRead(BaseModel):
    """An invitation as the API lists it (never its token): open, used (by which account) or expired."""

    id: int
    role: Role
    note: str
    created_at: datetime
    expires_at: datetime
    used_at: datetime | None
    username: str | None = Field(description="The account made with it, once used.")
    status: str = Field(examples=["open", "used", "expired"])


class InvitationCreated(InvitationRead):
    """A new invitation with its link: shown once, send it to the person now."""

    url: str
