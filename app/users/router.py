"""Accounts API: who am I and my password, and (admins) create users, deactivate them, set their passwords,
issue, list and revoke tokens and invite people. The annotators' work records are served beside them from
app/labelling/admin/admin_router.py."""

from fastapi import APIRouter, Request, status

from app.db.session import SessionDep
from app.labelling.quality_control.annotators import deactivate, set_votes_excluded
from app.users import invitations, service
from app.users.auth import SESSION_GENERATION, AdminUser, CurrentUser
from app.users.models import ApiToken, Invitation
from app.users.schemas import (
    InvitationCreate,
    InvitationCreated,
    InvitationRead,
    PasswordChange,
    PasswordSet,
    TokenCreate,
    TokenCreated,
    TokenRead,
    UserCreate,
    UserRead,
    UserUpdate,
)
from app.web.errors import error_responses

router = APIRouter(prefix="/api/v1", tags=["users"])


@router.get("/me", summary="The signed-in account", responses=error_responses(401))
def read_me(user: CurrentUser) -> UserRead:
    """The account behind the token or session cookie."""
    return UserRead.model_validate(user)


@router.put("/me/password", summary="Change my password", responses=error_responses(401, 403, 422))
def change_my_password(
    body: PasswordChange, request: Request, db_session: SessionDep, user: CurrentUser
) -> UserRead:
    """Replace the caller's password; 422 when the current password is wrong or the new one is shorter
    than 8 characters. The account's other sessions end (the browser that changed it stays signed in), and
    its API tokens are revoked unless keep_tokens, the one this request came with included."""
    service.change_own_password(
        db_session=db_session,
        user=user,
        current_password=body.current_password,
        new_password=body.new_password,
        keep_tokens=body.keep_tokens,
    )
    if request.session.get("user_id") == user.id:
        request.session[SESSION_GENERATION] = user.session_generation
    return UserRead.model_validate(user)


@router.get("/users", summary="List accounts (admin)", responses=error_responses(401, 403))
def list_users(db_session: SessionDep, _admin: AdminUser) -> list[UserRead]:
    """Every account, oldest first."""
    return [UserRead.model_validate(user) for user in service.list_users(db_session=db_session)]


@router.post(
    "/users",
    status_code=status.HTTP_201_CREATED,
    summary="Create an account (admin)",
    responses=error_responses(401, 403, 409, 422),
)
def create_user(body: UserCreate, db_session: SessionDep, _admin: AdminUser) -> UserRead:
    """Add an admin, annotator or worker account; 409 if the username is taken."""
    user = service.create_user(
        db_session=db_session, username=body.username, role=body.role, password=body.password
    )
    return UserRead.model_validate(user)


@router.patch(
    "/users/{user_id}",
    summary="Deactivate, reactivate or exclude an account's votes (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def update_user(user_id: int, body: UserUpdate, db_session: SessionDep, _admin: AdminUser) -> UserRead:
    """Set is_active (a deactivated account cannot sign in or label, its running labelling leases end at
    once and its API tokens are revoked unless keep_tokens: kept, they work again once it is reactivated)
    and votes_excluded (its votes and flags stop counting, or count again, and the
    questions it answered are decided afresh; an image its flags helped discard stays discarded, its pairs
    having moved on to reserve images). The account's labelling requests in flight finish first: none of its
    answers lands after."""
    user = service.get_user(db_session=db_session, user_id=user_id)
    if body.is_active is False:
        deactivate(db_session=db_session, user=user, keep_tokens=body.keep_tokens)
    elif body.is_active:
        service.set_active(db_session=db_session, user=user, is_active=True)
    if body.votes_excluded is not None:
        set_votes_excluded(db_session=db_session, user=user, votes_excluded=body.votes_excluded)
    return UserRead.model_validate(user)


@router.put(
    "/users/{user_id}/password",
    summary="Set an account's password (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def set_password(user_id: int, body: PasswordSet, db_session: SessionDep, _admin: AdminUser) -> UserRead:
    """Give a person's account a new password (8+ characters), e.g. when its owner forgot theirs or it
    leaked; its sessions end and its API tokens are revoked unless keep_tokens. 422 for a worker account
    (workers use tokens)."""
    user = service.get_user(db_session=db_session, user_id=user_id)
    service.set_password(
        db_session=db_session, user=user, password=body.password, keep_tokens=body.keep_tokens
    )
    return UserRead.model_validate(user)


@router.post(
    "/users/{user_id}/tokens",
    status_code=status.HTTP_201_CREATED,
    summary="Issue an API token (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def create_token(user_id: int, body: TokenCreate, db_session: SessionDep, _admin: AdminUser) -> TokenCreated:
    """A new bearer token for the account; the response is the only time it is shown."""
    user = service.get_user(db_session=db_session, user_id=user_id)
    token = service.create_api_token(db_session=db_session, user=user, name=body.name)
    return TokenCreated(user_id=user.id, name=body.name, token=token)


@router.get(
    "/users/{user_id}/tokens",
    summary="List an account's API tokens (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def list_tokens(user_id: int, db_session: SessionDep, _admin: AdminUser) -> list[TokenRead]:
    """The account's tokens, oldest first: their names, when made and last used (never the tokens)."""
    user = service.get_user(db_session=db_session, user_id=user_id)
    return [
        _token_read(token, user.username)
        for token, _ in service.list_api_tokens(db_session=db_session, user=user)
    ]


@router.delete(
    "/users/{user_id}/tokens/{token_id}",
    summary="Revoke one API token (admin)",
    responses=error_responses(401, 403, 404, 422),
)
def revoke_token(user_id: int, token_id: int, db_session: SessionDep, _admin: AdminUser) -> TokenRead:
    """The token works no more (its other tokens do); the answer is the token revoked. 404 when the account
    has no such token."""
    user = service.get_user(db_session=db_session, user_id=user_id)
    token = service.revoke_api_token(db_session=db_session, token_id=token_id, user=user)
    return _token_read(token, user.username)


def _token_read(token: ApiToken, username: str) -> TokenRead:
    """The API view of a token."""
    return TokenRead(
        id=token.id,
        user_id=token.user_id,
        username=username,
        name=token.name,
        created_at=token.created_at,
        last_used_at=token.last_used_at,
    )


@router.post(
    "/invitations",
    status_code=status.HTTP_201_CREATED,
    summary="Invite a person (admin)",
    responses=error_responses(401, 403, 422),
)
def create_invitation(
    body: InvitationCreate, request: Request, db_session: SessionDep, admin: AdminUser
) -> InvitationCreated:
    """A one-time link, valid for valid_hours, on which the person sets their own username and password and
    is signed in with the role given (annotator or admin; 422 for worker). The response is the only time
    the link is shown: only a hash of its token is stored."""
    invitation, token = invitations.create_invitation(
        db_session=db_session, role=body.role, note=body.note, valid_hours=body.valid_hours, created_by=admin
    )
    url = str(request.base_url).rstrip("/") + invitations.INVITATION_PATH.format(token=token)
    return InvitationCreated(**_invitation_read(invitation, None).model_dump(), url=url)


@router.get("/invitations", summary="List invitations (admin)", responses=error_responses(401, 403))
def list_invitations(db_session: SessionDep, _admin: AdminUser) -> list[InvitationRead]:
    """Every invitation, newest first: open, used (with the account made) or expired."""
    return [
        _invitation_read(invitation, username)
        for invitation, username in invitations.list_invitations(db_session=db_session)
    ]


def _invitation_read(invitation: Invitation, username: str | None) -> InvitationRead:
    """The API view of an invitation, with its status now."""
    return InvitationRead(
        id=invitation.id,
        role=invitation.role,
        note=invitation.note,
        created_at=invitation.created_at,
        expires_at=invitation.expires_at,
        used_at=invitation.used_at,
        username=username,
        status=invitations.invitation_status(invitation),
    )
