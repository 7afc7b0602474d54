"""More concurrent requests than database connections: each waits its turn and none fails.

A request holds its connection between thread hops (dependencies, endpoint, commit). Without the request
gate, requests waiting for a connection inside threads can take every thread and leave the connection
holders none to commit in, until the pool's 30 s timeout fails them.
"""

from concurrent.futures import ThreadPoolExecutor

import httpx

from app.db.engine import create_db_engine, create_sessionmaker
from app.main import create_app
from app.serving import serve_in_thread
from app.users import service as users_service
from app.users.models import Role
from tests.conftest import settings_for

POOL_SIZE = 2
CONCURRENT_REQUESTS = 120  # beyond the 40 threads Starlette runs endpoints and dependencies in


def annotator_token(database_url: str) -> str:
    """An annotator's API token on this database."""
    return token_of_new_user(database_url, "ann", Role.annotator)


def admin_token(database_url: str) -> str:
    """An admin's API token on this database."""
    return token_of_new_user(database_url, "boss", Role.admin)


def token_of_new_user(database_url: str, username: str, role: Role) -> str:
    """The API token of a new account with this role."""
    engine = create_db_engine(database_url)
    try:
        with create_sessionmaker(engine)() as session:
            user = users_service.create_user(
                db_session=session, username=username, role=role, password="long enough"
            )
            token = users_service.create_api_token(db_session=session, user=user, name="test")
            session.commit()
            return token
    finally:
        engine.dispose()


def app_with_small_pool(tmp_path, database_url: str):
    """The application on this database with a pool of POOL_SIZE connections."""
    return create_app(settings_for(tmp_path, database_url, db_pool_size=POOL_SIZE))


def test_more_concurrent_requests_than_connections_all_succeed(tmp_path, fresh_database_url):
    headers = {"Authorization": f"Bearer {annotator_token(fresh_database_url)}"}
    app = app_with_small_pool(tmp_path, fresh_database_url)
    with serve_in_thread(app) as url, httpx.Client(base_url=url, headers=headers, timeout=120) as client:
        with ThreadPoolExecutor(CONCURRENT_REQUESTS) as pool:
            statuses = list(
                pool.map(lambda _: client.get("/api/v1/me").status_code, range(CONCURRENT_REQUESTS))
            )
    app.state.engine.dispose()
    assert statuses == [200] * CONCURRENT_REQUESTS


def test_streamed_exports_beside_other_requests_all_succeed(tmp_path, fresh_database_url):
    """Exports read the database while they stream, with sessions of their own, so each chunk passes the
    gate too: the stream must only start once the export request's own session has left it (a gate of one
    on SQLite would otherwise wait for itself), and every export and request beside them must succeed."""
    headers = {"Authorization": f"Bearer {admin_token(fresh_database_url)}"}
    app = app_with_small_pool(tmp_path, fresh_database_url)
    with serve_in_thread(app) as url, httpx.Client(base_url=url, headers=headers, timeout=120) as client:
        competition_id = client.post("/api/v1/competitions", json={"name": "exported", "k": 4}).json()["id"]
        paths = [f"/api/v1/competitions/{competition_id}/exports/votes", "/api/v1/me"]
        with ThreadPoolExecutor(CONCURRENT_REQUESTS) as pool:
            responses = list(pool.map(lambda i: client.get(paths[i % 2]), range(CONCURRENT_REQUESTS)))
    app.state.engine.dispose()
    assert [response.status_code for response in responses] == [200] * CONCURRENT_REQUESTS
    assert all(response.text.startswith('"vote_id"') for response in responses[::2])
