"""Accounts and API tokens: create, sign in, set passwords, deactivate; ending an account's sessions and
tokens.

Usernames are one without regard to case and Unicode form (User.username_key, unique in the database), and
the names the service uses itself (RESERVED_USERNAMES) cannot be taken.
"""

import os
import re
import socket
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import cast

from sqlalchemy import CursorResult, bindparam, delete, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.errors import Conflict, InvalidInput, NotFound
from app.i18n import known_locale
from app.security import hash_api_token, hash_password, new_api_token, verify_password
from app.users.models import ApiToken, Role, User, username_key
from app.users.schemas import USERNAME_PATTERN

MIN_PASSWORD_LENGTH = 8
MAX_USERNAME_LENGTH = 64
TOKEN_USE_RESOLUTION = timedelta(minutes=1)
LOCAL_WORKER = "local-worker"
LOCAL_WORKER_TOKEN_NAME = "embedded"
FREE_NAME_ATTEMPTS = 5
RESERVED_USERNAMES = frozenset({LOCAL_WORKER})
"""Names the service gives its own accounts: `mad worker` and `mad demo` run as LOCAL_WORKER on the server's
machine (local_worker_token)."""


def check_username(username: str) -> None:
    """InvalidInput unless the username is 1 to 64 of the characters USERNAME_PATTERN allows and not one the
    service keeps for itself."""
    if not re.fullmatch(USERNAME_PATTERN, username):
        raise InvalidInput("a username is 1 to 64 letters, digits or _ . @ -")
    if username_key(username) in RESERVED_USERNAMES:
        raise InvalidInput(
            f"the username {username!r} is reserved for the service's own worker: choose another"
        )


def create_user(*, db_session: Session, username: str, role: Role, password: str | None) -> User:
    """Add an account under a free, unreserved username; people need a password of 8+ characters, workers
    sign in with tokens only."""
    check_username(username)
    return _add_user(db_session, username, role, password)


def _add_user(db_session: Session, username: str, role: Role, password: str | None) -> User:
    """Add the account, or Conflict when its name is taken, also by an account made at the same time: the
    unique username_key breaks the insert, in a savepoint so that the caller's transaction goes on."""
    taken = db_session.scalar(select(User.username).where(User.username_key == username_key(username)))
    if taken is not None:
        raise Conflict(_taken(username, taken))
    if role != Role.worker and (password is None or len(password) < MIN_PASSWORD_LENGTH):
        raise InvalidInput(f"a password of at least {MIN_PASSWORD_LENGTH} characters is required")
    user = User(username=username, role=role, password_hash=hash_password(password) if password else None)
    try:
        with db_session.begin_nested():
            db_session.add(user)
    except IntegrityError:
        raise Conflict(_taken(username, None)) from None
    return user


def add_user_under_free_name(*, db_session: Session, wanted: str, role: Role) -> User:
    """A new account without a password named `wanted`, or else the first of `wanted-2`, `wanted-3`, … that
    no account has in any case or Unicode form and that is not reserved; a name taken by an account made at
    the same moment (its insert broken by the unique username_key, in a savepoint) is passed over as well."""
    for _ in range(FREE_NAME_ATTEMPTS):
        username = _free_name(db_session, wanted)
        check_username(username)
        user = User(username=username, role=role, password_hash=None)
        try:
            with db_session.begin_nested():
                db_session.add(user)
        except IntegrityError:
            continue  # the other account is committed now: the next look sees its name
        return user
    raise Conflict(f"no free username like {wanted!r} was found: try again")


def _free_name(db_session: Session, wanted: str) -> str:
    """`wanted`, or `wanted-N` with the smallest N > 1 whose username_key is neither an account's nor
    reserved."""
    alike = User.username_key.startswith(username_key(wanted), autoescape=True)
    taken = RESERVED_USERNAMES | set(db_session.scalars(select(User.username_key).where(alike)))
    candidate, number = wanted, 1
    while username_key(candidate) in taken:
        number += 1
        candidate = f"{wanted}-{number}"
    return candidate


def _taken(username: str, by: str | None) -> str:
    """Why a username cannot be had: an account has it (`by`, None for one made at the same moment), or a
    name that differs from it only in case or Unicode form."""
    if by is None:
        why = "an account was made with it just now"
    elif by == username:
        why = "an account has it"
    else:
        why = f"{by!r} has it, and names that differ only in case or Unicode form are one"
    return f"the username {username!r} is taken ({why}): choose another"


def get_user(*, db_session: Session, user_id: int) -> User:
    """The user with this id, or NotFound."""
    user = db_session.get(User, user_id)
    if user is None:
        raise NotFound(f"no user with id {user_id}")
    return user


def get_user_by_name(*, db_session: Session, username: str) -> User:
    """The user with this username (in any case or Unicode form), or NotFound."""
    user = db_session.scalar(select(User).where(User.username_key == username_key(username)))
    if user is None:
        raise NotFound(f"no user named {username!r}")
    return user


def list_users(*, db_session: Session) -> list[User]:
    """Every account, oldest first."""
    return list(db_session.scalars(select(User).order_by(User.id)))


@dataclass(frozen=True)
class SignInAccount:
    """What signing in needs of an active account, read before the password is checked (outside the
    database gate): its id, role, password hash and the generation its session cookie will carry."""

    id: int
    role: Role
    password_hash: str | None
    session_generation: int


def sign_in_account(*, db_session: Session, username: str) -> SignInAccount | None:
    """The active account of this username (in any case or Unicode form), else None."""
    if len(username) > MAX_USERNAME_LENGTH:
        return None
    user = db_session.scalar(select(User).where(User.username_key == username_key(username), User.is_active))
    if user is None:
        return None
    return SignInAccount(user.id, user.role, user.password_hash, user.session_generation)


def password_matches(account: SignInAccount | None, password: str) -> bool:
    """Whether the password is the account's; no account costs the same Argon2 work (verify_password)."""
    return verify_password(account.password_hash if account else None, password)


def session_user(*, db_session: Session, user_id: int, session_generation: int | None) -> User | None:
    """The user of a session cookie, while the account is active and the cookie's generation is current."""
    user = db_session.get(User, user_id)
    if user is None or not user.is_active or user.session_generation != session_generation:
        return None
    return user


def end_sessions(*, db_session: Session, user: User) -> None:
    """End every browser session of the user, on every server process: their cookies' generation is no
    longer the current one."""
    db_session.execute(
        update(User).where(User.id == user.id).values(session_generation=User.session_generation + 1)
    )
    db_session.refresh(user, ["session_generation"])


def set_locale(*, db_session: Session, user: User, locale: str) -> None:
    """Set the language the person's pages and questions come in (one of app.i18n.locales())."""
    user.locale = known_locale(locale)


def create_api_token(*, db_session: Session, user: User, name: str) -> str:
    """Issue a new bearer token for a user; the plain token is returned once and never stored."""
    token = new_api_token()
    db_session.add(ApiToken(user_id=user.id, name=name, token_hash=hash_api_token(token)))
    db_session.flush()
    return token


_USER_OF_TOKEN = (
    select(User, ApiToken.id.label("token_id"), ApiToken.last_used_at)
    .join(ApiToken, ApiToken.user_id == User.id)
    .where(ApiToken.token_hash == bindparam("token_hash"), User.is_active)
)
"""The active owner of a token with the token's id and last use, in one query (every API request runs it)."""


def user_for_token(*, db_session: Session, token: str) -> User | None:
    """The active user owning this bearer token, else None; records when the token was last used."""
    row = db_session.execute(_USER_OF_TOKEN, {"token_hash": hash_api_token(token)}).first()
    if row is None:
        return None
    record_token_use(db_session=db_session, token_id=row.token_id, last_used_at=row.last_used_at)
    return row.User


_RECORD_TOKEN_USE = (
    update(ApiToken.__table__)
    .where(ApiToken.id == bindparam("token_id"))
    .values(last_used_at=bindparam("now"))
)


def record_token_use(*, db_session: Session, token_id: int, last_used_at: datetime | None) -> None:
    """Note that a token was used now, at most once a minute (so a token's last use costs no write on most
    requests)."""
    now = utcnow()
    if last_used_at is None or now - last_used_at > TOKEN_USE_RESOLUTION:
        db_session.execute(_RECORD_TOKEN_USE, {"token_id": token_id, "now": now})


def local_worker_token(*, db_session: Session) -> str:
    """A new token of this machine's worker account (made on first use), named after this process.

    Local workers running side by side each keep their own token. Tokens of the account unused for a day
    are revoked: their workers have ended, as a running one uses its token at least once a minute. A
    person's account under the worker's name is never given the token (Conflict).
    """
    user = db_session.scalar(select(User).where(User.username_key == username_key(LOCAL_WORKER)))
    if user is None:
        user = _add_user(db_session, LOCAL_WORKER, Role.worker, None)
    elif user.role != Role.worker:  # a person's, made before OpenID sign-ins checked reserved names
        raise Conflict(
            f"the account {user.username!r} is a person's, not this machine's worker: run `mad worker --url "
            "URL --token TOKEN` with a worker's token (`mad users add NAME --role worker --token`)"
        )
    db_session.execute(
        delete(ApiToken).where(
            ApiToken.user_id == user.id,
            func.coalesce(ApiToken.last_used_at, ApiToken.created_at) < utcnow() - timedelta(days=1),
        )
    )
    name = f"{LOCAL_WORKER_TOKEN_NAME} {socket.gethostname()[:64]}:{os.getpid()}"
    return create_api_token(db_session=db_session, user=user, name=name)


def set_password(*, db_session: Session, user: User, password: str, keep_tokens: bool = False) -> User:
    """Give a person's account a new password of 8+ characters (workers sign in with tokens only); every
    session of the account ends, and its API tokens too unless keep_tokens (a password changed because it
    leaked must not leave a token made with it working)."""
    if user.role == Role.worker:
        raise InvalidInput(f"{user.username} is a worker account: workers use API tokens, not passwords")
    if len(password) < MIN_PASSWORD_LENGTH:
        raise InvalidInput(f"a password of at least {MIN_PASSWORD_LENGTH} characters is required")
    user.password_hash = hash_password(password)
    end_sessions(db_session=db_session, user=user)
    if not keep_tokens:
        revoke_api_tokens(db_session=db_session, user=user)
    db_session.flush()
    return user


def change_own_password(
    *, db_session: Session, user: User, current_password: str, new_password: str, keep_tokens: bool = False
) -> User:
    """Replace the caller's password after checking the current one (so a borrowed session cannot)."""
    if not verify_password(user.password_hash, current_password):
        raise InvalidInput("the current password is wrong")
    return set_password(db_session=db_session, user=user, password=new_password, keep_tokens=keep_tokens)


def set_active(*, db_session: Session, user: User, is_active: bool, keep_tokens: bool = False) -> User:
    """Deactivate (False) or reactivate (True) an account; a deactivated one cannot sign in, and its
    sessions end and its API tokens are revoked unless keep_tokens (kept, they work again once it is
    reactivated; reactivating brings no session back). An annotator is deactivated by
    app.labelling.quality_control.annotators.deactivate, which also waits for their answers in flight and ends
    their leases."""
    user.is_active = is_active
    if not is_active:
        end_sessions(db_session=db_session, user=user)
        if not keep_tokens:
            revoke_api_tokens(db_session=db_session, user=user)
    db_session.flush()
    return user


def list_api_tokens(*, db_session: Session, user: User | None = None) -> list[tuple[ApiToken, str]]:
    """API tokens with their accounts' usernames, of one account or of all, oldest first (their names,
    when made and last used: only a token's hash is stored)."""
    query = select(ApiToken, User.username).join(User, User.id == ApiToken.user_id).order_by(ApiToken.id)
    if user is not None:
        query = query.where(ApiToken.user_id == user.id)
    return [(token, username) for token, username in db_session.execute(query)]


def revoke_api_token(*, db_session: Session, token_id: int, user: User | None = None) -> ApiToken:
    """Revoke one token (of this account, when given): it works no more. NotFound for no such token."""
    query = select(ApiToken).where(ApiToken.id == token_id)
    if user is not None:
        query = query.where(ApiToken.user_id == user.id)
    token = db_session.scalar(query)
    if token is None:
        owner = f" of {user.username}" if user is not None else ""
        raise NotFound(f"no API token{owner} with id {token_id}")
    db_session.delete(token)
    db_session.flush()
    return token


def revoke_api_tokens(*, db_session: Session, user: User) -> int:
    """Revoke every token of the account; how many there were."""
    deleted = cast(CursorResult, db_session.execute(delete(ApiToken).where(ApiToken.user_id == user.id)))
    return deleted.rowcount
