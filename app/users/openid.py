"""Accounts that sign in through an OpenID Connect provider (the flow itself: app/site/openid_pages.py).

An identity is the provider's issuer and subject, never an e-mail address: the subject is the provider's
stable id of the person, while the address may change there (and is then updated here). A new identity
makes an account only when the admin lets it: through an invitation, which its first sign-in uses up, or
because the provider says it has verified an address in one of the provider's allowed domains.
"""

import re
import unicodedata
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db.base import utcnow
from app.errors import Conflict, Forbidden, MadError
from app.i18n import N_
from app.settings import OpenIDProvider
from app.users.invitations import claim_invitation
from app.users.models import OpenIDIdentity, Role, User
from app.users.service import MAX_USERNAME_LENGTH, add_user_under_free_name

USERNAME_CHARACTERS = re.compile(r"[^A-Za-z0-9_.@-]+")


class SignInFailed(MadError):
    """The provider's answer cannot sign anyone in: a replayed or expired sign-in, a refused code, an ID
    token that fails its checks (400)."""

    status_code = 400
    code = "sign_in_failed"


@dataclass(frozen=True)
class ProviderIdentity:
    """Who a provider says signed in, from its checked ID token (issuer, subject) and its user info."""

    issuer: str
    subject: str
    email: str | None
    email_verified: bool
    preferred_username: str | None


def sign_in_identity(
    *,
    db_session: Session,
    identity: ProviderIdentity,
    provider: OpenIDProvider,
    invitation_token: str | None,
    signed_in: User | None,
) -> User:
    """The account this identity signs in to: the one it is linked to (its e-mail updated), else the
    signed-in account it is now linked to, else a new account the invitation or an allowed domain admits.

    A deactivated account is refused (403), and so is a person whom neither admits; an identity linked to
    another account than the signed-in one is 409.
    """
    linked = db_session.scalar(
        select(OpenIDIdentity).where(
            OpenIDIdentity.issuer == identity.issuer, OpenIDIdentity.subject == identity.subject
        )
    )
    if linked is not None:
        user = db_session.get_one(User, linked.user_id)
        if signed_in is not None and signed_in.id != user.id:
            raise Conflict(
                N_("this {provider} account signs in to another account here: sign out first"),
                provider=provider.display_name,
            )
        if not user.is_active:
            raise Forbidden(N_("this account is deactivated: ask an admin to reactivate it"))
        linked.email = identity.email
        linked.last_sign_in_at = utcnow()
        db_session.flush()
        return user
    if signed_in is not None:
        user = signed_in
    elif invitation_token is not None:
        invitation = claim_invitation(db_session=db_session, token=invitation_token)
        user = _new_account(db_session, identity, invitation.role)
        invitation.user_id = user.id
    elif may_join_by_domain(identity, provider):
        user = _new_account(db_session, identity, Role(provider.role))
    else:
        raise _why_not_admitted(identity, provider)
    _link(db_session, user, identity, provider)
    return user


def may_join_by_domain(identity: ProviderIdentity, provider: OpenIDProvider) -> bool:
    """Whether the provider vouches for an address in one of its allowed domains (email_verified)."""
    if not identity.email_verified or identity.email is None or "@" not in identity.email:
        return False
    return identity.email.rsplit("@", 1)[1].lower() in provider.allowed_domains


def _why_not_admitted(identity: ProviderIdentity, provider: OpenIDProvider) -> Forbidden:
    """The refusal of a person neither an invitation nor an allowed domain admits, and what to do."""
    if identity.email is None:
        why = N_(
            "{provider} gave no e-mail address for your account: ask an admin for an invitation link and "
            "sign in through it"
        )
    elif not identity.email_verified:
        why = N_(
            "{provider} has not verified {email}: ask an admin for an invitation link and sign in through it"
        )
    else:
        why = N_(
            "{email} may not join through {provider} by itself: ask an admin for an invitation link and sign "
            "in through it"
        )
    return Forbidden(why, provider=provider.display_name, email=identity.email)


def _link(db_session: Session, user: User, identity: ProviderIdentity, provider: OpenIDProvider) -> None:
    """Link the identity to the account; an account has at most one identity per provider (409)."""
    taken = db_session.scalar(
        select(OpenIDIdentity.id).where(
            OpenIDIdentity.user_id == user.id, OpenIDIdentity.issuer == identity.issuer
        )
    )
    if taken is not None:
        raise Conflict(
            N_("your account is already linked to another {provider} account"), provider=provider.display_name
        )
    db_session.add(
        OpenIDIdentity(
            user_id=user.id, issuer=identity.issuer, subject=identity.subject, email=identity.email
        )
    )
    db_session.flush()


def _new_account(db_session: Session, identity: ProviderIdentity, role: Role) -> User:
    """A new account without a password, named after the identity (users_service.add_user_under_free_name:
    a free, unreserved username)."""
    return add_user_under_free_name(db_session=db_session, wanted=_wanted_username(identity), role=role)


def _wanted_username(identity: ProviderIdentity) -> str:
    """The identity's preferred username, else its e-mail's local part, in Unicode's NFKC form (so that
    `ｌｏｃａｌ-ｗｏｒｋｅｒ` reads as `local-worker`), characters a username cannot have as '-', cut to leave
    room for a suffix."""
    wanted = identity.preferred_username or (identity.email or "").split("@")[0]
    readable = USERNAME_CHARACTERS.sub("-", unicodedata.normalize("NFKC", wanted))
    return readable.strip("-")[: MAX_USERNAME_LENGTH - 4] or "user"


def identities_of(*, db_session: Session, user: User) -> list[OpenIDIdentity]:
    """The account's identities, oldest first."""
    return list(
        db_session.scalars(
            select(OpenIDIdentity).where(OpenIDIdentity.user_id == user.id).order_by(OpenIDIdentity.id)
        )
    )
