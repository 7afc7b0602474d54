"""Signing in through OpenID Connect providers with Authlib's Starlette client: the authorization-code flow
with PKCE (S256), `state` and `nonce`, kept in the signed session cookie between the two requests; the ID
token's signature checked against the provider's JWKS, its claims (iss, aud, exp, iat, nonce) against the
provider's discovery document and this client. Which account it signs in to: app/users/openid.py.

Every failure of the flow answers the site's error page (never a traceback): the provider down, a sign-in
started elsewhere or already finished (state), a refused or expired code, an ID token that fails a check.
"""

from typing import Annotated, Any

import httpx2
from authlib.integrations.base_client.errors import MismatchingStateError, OAuthError
from authlib.integrations.starlette_client import OAuth, StarletteOAuth2App
from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from joserfc.errors import JoseError
from sqlalchemy.orm import Session

from app.db.session import DatabaseStepsDep
from app.errors import MadError, NotFound, ServiceUnavailable
from app.i18n import N_
from app.settings import OpenIDProvider
from app.users import openid
from app.users import service as users_service
from app.users.auth import SESSION_GENERATION, check_csrf, landing_page, safe_next, start_session
from app.users.openid import ProviderIdentity, SignInFailed
from app.users.service import SignInAccount
from app.web.error_pages import error_in_language, error_message
from app.web.templating import render, translate

SCOPE = "openid email profile"
PROVIDER_TIMEOUT_S = 10
PROFILE_CLAIMS = ("email", "email_verified", "preferred_username")
FLOW = "openid_flow"
SIGN_IN_FAILED = N_("Sign-in did not work")
"""The session's key for the sign-in under way: the provider's name, the page to go to after it, the
invitation it uses and whether it links the signed-in account (Authlib keeps its state, nonce and PKCE
verifier beside it)."""
START_AGAIN = N_("this sign-in was already finished, or was started in another browser or tab: start again")
SIGN_IN_TO_LINK = N_("your session has ended: sign in again, then link the account from your account page")

router = APIRouter(include_in_schema=False)


class OpenIDClients:
    """Authlib's client of each configured provider, by name; each keeps its provider's discovery document
    and keys once fetched (a key it does not know makes it fetch the keys again)."""

    def __init__(self, providers: list[OpenIDProvider]):
        registry = OAuth()
        self.providers = {provider.name: provider for provider in providers}
        self.clients: dict[str, StarletteOAuth2App] = {
            provider.name: registry.register(
                provider.name,
                client_id=provider.client_id,
                client_secret=provider.client_secret.get_secret_value(),
                server_metadata_url=provider.issuer.rstrip("/") + "/.well-known/openid-configuration",
                client_kwargs={
                    "scope": SCOPE,
                    "code_challenge_method": "S256",
                    "timeout": PROVIDER_TIMEOUT_S,
                },
            )
            for provider in providers
        }

    def get(self, name: str) -> tuple[OpenIDProvider, StarletteOAuth2App]:
        """The provider of this name and its client, or NotFound."""
        if name not in self.providers:
            raise NotFound(f"there is no sign-in provider named {name!r} here")
        return self.providers[name], self.clients[name]


@router.post("/login/sso/{name}", dependencies=[Depends(check_csrf)])
async def start_sign_in(
    request: Request,
    name: str,
    next: Annotated[str, Form(max_length=500)] = "/",
    invitation: Annotated[str | None, Form(max_length=200)] = None,
    link: Annotated[bool, Form()] = False,
):
    """Send the browser to the provider's sign-in page, with a new state, nonce and PKCE challenge; the
    invitation (from an invitation page) is used by the first sign-in of a new account, and `link` (from the
    account page) links the provider's account to the signed-in one."""
    provider, client = request.app.state.openid_clients.get(name)
    await _discovery(provider, client)
    request.session[FLOW] = {
        "provider": name,
        "next": safe_next(next),
        "invitation": invitation,
        "link": link,
    }
    return await client.authorize_redirect(request, str(request.url_for("openid_callback", name=name)))


@router.get("/login/sso/{name}/callback", response_class=HTMLResponse, name="openid_callback")
async def finish_sign_in(request: Request, name: str, steps: DatabaseStepsDep):
    """Where the provider sends the browser back: exchange the code, check the ID token, sign in to the
    linked account (or link or make one) and go on to the page the sign-in started from."""
    provider, client = request.app.state.openid_clients.get(name)
    flow = request.session.pop(FLOW, None)
    try:
        if flow is None or flow["provider"] != name:
            raise SignInFailed(START_AGAIN)
        linking = (
            (request.session.get("user_id"), request.session.get(SESSION_GENERATION))
            if flow["link"]
            else None
        )
        identity = await _identity(request, provider, client)
        account = await steps.run(
            lambda db_session: _account(db_session, identity, provider, flow["invitation"], linking)
        )
    except MadError as error:
        return render(
            request,
            "error.html",
            status_code=error.status_code,
            code=error.status_code,
            title=translate(request, SIGN_IN_FAILED),
            message=error_message(request, error_in_language(request, error, None), error.status_code, None),
            back=None,
            sign_in="/login",
        )
    start_session(request, account.id, account.session_generation)
    return RedirectResponse(landing_page(flow["next"], account.role), status_code=303)


async def _discovery(provider: OpenIDProvider, client: StarletteOAuth2App) -> dict[str, Any]:
    """The provider's discovery document, whose issuer must be the configured one (OpenID Connect
    Discovery 1.0, section 4.3); 503 when the provider does not answer."""
    try:
        metadata = await client.load_server_metadata()
    except (httpx2.HTTPError, ValueError) as error:
        raise _unreachable(provider, error) from error
    if metadata.get("issuer") != provider.issuer:
        raise ServiceUnavailable(
            f"{provider.display_name} names its issuer {metadata.get('issuer')!r}, not {provider.issuer!r}: "
            "an admin must set its issuer in MAD_OIDC_PROVIDERS to the one it names"
        )
    return metadata


async def _identity(
    request: Request, provider: OpenIDProvider, client: StarletteOAuth2App
) -> ProviderIdentity:
    """Who the provider signed in: its code exchanged (with the PKCE verifier) for tokens, the ID token
    checked, its profile claims completed from the user info endpoint (whose subject must be the same)."""
    metadata = await _discovery(provider, client)
    if request.query_params.get("iss", provider.issuer) != provider.issuer:  # RFC 9207: a mixed-up provider
        raise SignInFailed(
            N_("the answer came from {issuer}, not {provider}"),
            issuer=repr(request.query_params["iss"]),
            provider=provider.display_name,
        )
    try:
        token = await client.authorize_access_token(request, claims_options=_id_token_checks(provider))
        if "userinfo" not in token:
            raise SignInFailed(N_("{provider} sent no ID token"), provider=provider.display_name)
        claims = dict(token["userinfo"])
        if "userinfo_endpoint" in metadata:
            info = await client.userinfo(token=token)
            if info.get("sub") != claims["sub"]:
                raise SignInFailed(
                    N_("{provider}'s user info is about another account"), provider=provider.display_name
                )
            claims.update((name, info[name]) for name in PROFILE_CLAIMS if name in info)
    except MismatchingStateError as error:
        raise SignInFailed(START_AGAIN) from error
    except OAuthError as error:
        raise SignInFailed(
            N_("{provider} refused the sign-in ({error}): start again"),
            provider=provider.display_name,
            error=error,
        ) from error
    except JoseError as error:
        raise SignInFailed(
            N_("{provider}'s ID token failed its check ({error}); nobody was signed in"),
            provider=provider.display_name,
            error=error,
        ) from error
    except httpx2.HTTPError as error:
        raise _unreachable(provider, error) from error
    return ProviderIdentity(
        issuer=claims["iss"],
        subject=claims["sub"],
        email=claims.get("email"),
        email_verified=claims.get("email_verified") in (True, "true"),
        preferred_username=claims.get("preferred_username"),
    )


def _id_token_checks(provider: OpenIDProvider) -> dict[str, dict[str, Any]]:
    """The ID token claims Authlib must check besides the nonce and azp: the issuer is the configured one,
    the audience holds this client (Authlib alone checks aud only through azp), exp and iat are there."""
    return {
        "iss": {"essential": True, "value": provider.issuer},
        "aud": {"essential": True, "value": provider.client_id},
        "exp": {"essential": True},
        "iat": {"essential": True},
    }


def _unreachable(provider: OpenIDProvider, error: Exception) -> ServiceUnavailable:
    """Why a provider's answer is missing."""
    return ServiceUnavailable(
        N_("{provider} did not answer ({error}): try again in a while"),
        provider=provider.display_name,
        error=type(error).__name__,
    )


def _account(
    db_session: Session,
    identity: ProviderIdentity,
    provider: OpenIDProvider,
    invitation: str | None,
    linking: tuple[int | None, int | None] | None,
) -> SignInAccount:
    """The account the identity signs in to (openid.sign_in_identity), as the session needs it; when
    `linking` (the session's user id and generation), the identity is linked to that signed-in account."""
    signed_in = None
    if linking is not None:
        user_id, generation = linking
        if user_id is not None:
            signed_in = users_service.session_user(
                db_session=db_session, user_id=user_id, session_generation=generation
            )
        if signed_in is None:
            raise SignInFailed(SIGN_IN_TO_LINK)
    user = openid.sign_in_identity(
        db_session=db_session,
        identity=identity,
        provider=provider,
        invitation_token=invitation,
        signed_in=signed_in,
    )
    return SignInAccount(user.id, user.role, user.password_hash, user.session_generation)
