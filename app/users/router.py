"""Accounts API: who am I, and (admins) create users, pause them, issue tokens."""

from fastapi import APIRouter, status

from app.db import SessionDep
from app.labelling.service import set_votes_excluded
from app.users import service
from app.users.auth import AdminUser, CurrentUser
from app.users.schemas import TokenCreate, TokenCreated, UserCreate, UserRead, UserUpdate

router = APIRouter(prefix="/api/v1", tags=["users"])


@router.get("/me", summary="The signed-in account")
def read_me(user: CurrentUser) -> UserRead:
    """The account behind the token or session cookie."""
    return UserRead.model_validate(user)


@router.get("/users", summary="List accounts (admin)")
def list_users(db_session: SessionDep, _admin: AdminUser) -> list[UserRead]:
    """Every account, oldest first."""
    return [UserRead.model_validate(user) for user in service.list_users(db_session=db_session)]


@router.post("/users", status_code=status.HTTP_201_CREATED, summary="Create an account (admin)")
def create_user(body: UserCreate, db_session: SessionDep, _admin: AdminUser) -> UserRead:
    """Add an admin, annotator or worker account; 409 if the username is taken."""
    user = service.create_user(
        db_session=db_session, username=body.username, role=body.role, password=body.password
    )
    return UserRead.model_validate(user)


@router.patch("/users/{user_id}", summary="Pause, resume or exclude an account's votes (admin)")
def update_user(user_id: int, body: UserUpdate, db_session: SessionDep, _admin: AdminUser) -> UserRead:
    """Set is_active (a paused account cannot sign in or label; its running labelling leases end at once)
    and votes_excluded (its votes and flags stop counting, or count again, and the questions it answered are
    decided afresh; an image its flags helped discard stays discarded, its pairs having moved on to reserve
    images)."""
    user = service.get_user(db_session=db_session, user_id=user_id)
    if body.is_active is not None:
        service.set_active(db_session=db_session, user=user, is_active=body.is_active)
    if body.votes_excluded is not None:
        set_votes_excluded(db_session=db_session, user=user, votes_excluded=body.votes_excluded)
    return UserRead.model_validate(user)


@router.post(
    "/users/{user_id}/tokens", status_code=status.HTTP_201_CREATED, summary="Issue an API token (admin)"
)
def create_token(user_id: int, body: TokenCreate, db_session: SessionDep, _admin: AdminUser) -> TokenCreated:
    """A new bearer token for the account; the response is the only time it is shown."""
    user = service.get_user(db_session=db_session, user_id=user_id)
    token = service.create_api_token(db_session=db_session, user=user, name=body.name)
    return TokenCreated(user_id=user.id, name=body.name, token=token)
