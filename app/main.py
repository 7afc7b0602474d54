"""The FastAPI application factory: `uvicorn --factory app.main:create_app`."""

import asyncio
import atexit
import gc
from contextlib import asynccontextmanager
from functools import cache
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, HTMLResponse
from fastapi.staticfiles import StaticFiles
from sqlalchemy import text
from starlette.middleware.sessions import SessionMiddleware

from app.admin.pages import router as admin_pages_router
from app.classifiers.router import router as classifiers_router
from app.competitions.router import router as competitions_router
from app.db.engine import create_db_engine, create_sessionmaker
from app.db.session import SessionDep
from app.images.router import router as images_router
from app.jobs.activity import job_gauges
from app.jobs.router import router as jobs_router
from app.labelling.active_sampling.policy_runner import PolicyRunner
from app.labelling.admin import admin_router as labelling_admin
from app.labelling.annotating.pages import router as labelling_pages_router
from app.labelling.annotating.router import router as labelling_router
from app.labelling.metrics import labelling_gauges
from app.leaderboard.pages import router as leaderboard_pages_router
from app.leaderboard.public_reads import PublicReads
from app.leaderboard.router import router as leaderboard_router
from app.settings import Settings
from app.site.openid_pages import OpenIDClients
from app.site.openid_pages import router as openid_pages_router
from app.site.pages import router as site_pages_router
from app.studies.pages import router as studies_pages_router
from app.studies.router import router as studies_router
from app.users.auth import OptionalUser, may_send_large_bodies, signed_in_user
from app.users.rate_limit import LoginLimits
from app.users.router import router as users_router
from app.web.body_guard import BodyGuard, BodyLimits
from app.web.error_pages import install_error_pages
from app.web.errors import install_error_handlers
from app.web.metrics import RequestMetrics, metrics_router
from app.web.security_headers import SecurityHeaders
from app.web.templating import render

PASSWORD_CHECKS_AT_ONCE = 2
"""Sign-in password checks one process runs at once: Argon2 takes 64 MiB and ~50–200 ms of a core each."""

STATIC_DIR = Path(__file__).resolve().parent.parent / "static"

API_DESCRIPTION = """
MAD Arena ranks image classifiers by the **MAximum Discrepancy competition** (Wang et al., ICLR 2020):
for every pair of classifiers it selects the unlabelled images where their predictions differ most,
asks annotators two yes/no questions per image, and aggregates pairwise accuracies into a Perron rank.

Authentication: REST clients send `Authorization: Bearer <token>` (make one with `mad users token add NAME`);
browser pages use a session cookie, and state-changing cookie requests need the `X-CSRF-Token` header.
Errors come as `{"detail": "<what went wrong>", "code": "<kind>"}`.
"""

API_SECTIONS = (
    ("users", "Accounts, API tokens, invitations, work records for pay."),
    ("competitions", "Competitions: create and change them; their label set and members."),
    ("images", "The unlabelled corpus: upload, list, exclude; files, thumbnails."),
    ("labelling", "Annotators' work (next, answers, flags, skip, undo); gold, quality, adjudication."),
    ("classifiers", "Registering classifiers: timm weights, pretrained tags, predictions."),
    ("jobs", "Prediction and selection jobs, claimed and finished by workers; progress."),
    ("leaderboard", "The MAD ranking, its history, frozen boards, analyses, quality, exports."),
    ("studies", "Paid crowd studies (Prolific): links, participants, completion codes, bonuses."),
    ("operations", "Metrics for Prometheus."),
    ("health", "Liveness and the database check."),
)
"""The documentation's order of the API's sections (routes are matched in another: labelling first)."""


@cache
def _freeze_start_up_objects() -> None:
    """Take the objects made at start-up (~200,000: models, schemas, routes, which live as long as the
    process) out of the cycle collector's sight, once per process: its full collections scanned them all,
    stopping the process for ~50 ms each time. Garbage is collected first, so that none is kept. They are
    given back to the collector at exit, so that the interpreter's last collection frees them: extensions
    such as Triton's (imported by torch) otherwise report every object of theirs still alive as leaked."""
    gc.collect()
    gc.freeze()
    atexit.register(gc.unfreeze)


def _add_documentation_pages(app: FastAPI) -> None:
    """/docs (Swagger UI) and /redoc (ReDoc) from the vendored copies in static/vendor, and the favicon:
    no page asks another host for anything, so they work offline."""

    @app.get("/docs", include_in_schema=False, response_class=HTMLResponse)
    def swagger_ui(request: Request, user: OptionalUser):
        return render(request, "docs.html", user=user, openapi_url=app.openapi_url)

    @app.get("/redoc", include_in_schema=False, response_class=HTMLResponse)
    def redoc(request: Request, user: OptionalUser):
        return render(request, "redoc.html", user=user, openapi_url=app.openapi_url)

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> FileResponse:
        return FileResponse(STATIC_DIR / "favicon.svg", media_type="image/svg+xml")


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the application: database engine, image store, sessions, routers, static files."""
    settings = settings or Settings()
    engine = create_db_engine(settings.sqlalchemy_url, pool_size=settings.db_pool_size)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        _freeze_start_up_objects()
        yield
        app.state.policy_runner.close()
        engine.dispose()

    app = FastAPI(
        title="MAD Arena",
        version="0.1.0",
        description=API_DESCRIPTION,
        lifespan=lifespan,
        openapi_tags=[{"name": name, "description": text} for name, text in API_SECTIONS],
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessionmaker = create_sessionmaker(engine)
    app.state.database_gate = asyncio.Semaphore(
        1 if engine.dialect.name == "sqlite" else settings.db_pool_size
    )
    app.state.public_reads = PublicReads()
    app.state.policy_runner = PolicyRunner(settings.sqlalchemy_url)
    app.state.password_gate = asyncio.Semaphore(PASSWORD_CHECKS_AT_ONCE)
    app.state.openid_clients = OpenIDClients(settings.oidc_providers)
    app.state.login_limits = LoginLimits(
        settings.login_max_failures, settings.login_max_address_failures, settings.login_window_s
    )
    app.add_middleware(
        BodyGuard,
        limits=BodyLimits(settings.max_upload_bytes, settings.max_json_bytes, settings.max_translation_bytes),
        large_body_sender=may_send_large_bodies,
    )
    app.add_middleware(
        SessionMiddleware,
        secret_key=settings.secret_key,
        session_cookie="mad_session",
        max_age=settings.session_max_age_s,
        same_site="lax",
        https_only=settings.env == "production",
    )
    app.add_middleware(SecurityHeaders)
    app.add_middleware(RequestMetrics)
    install_error_handlers(app)
    install_error_pages(app, signed_in_user)
    app.include_router(labelling_router)  # first: matched in order, and its routes take every answer
    app.include_router(labelling_admin.router)
    app.include_router(users_router)
    app.include_router(labelling_admin.work_records_router)
    app.include_router(competitions_router)
    app.include_router(images_router)
    app.include_router(labelling_pages_router)
    app.include_router(classifiers_router)
    app.include_router(jobs_router)
    app.include_router(metrics_router(labelling_gauges, job_gauges))
    app.include_router(leaderboard_router)
    app.include_router(leaderboard_pages_router)
    app.include_router(studies_router)
    app.include_router(studies_pages_router)
    app.include_router(admin_pages_router)
    app.include_router(site_pages_router)
    app.include_router(openid_pages_router)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    _add_documentation_pages(app)

    @app.get("/healthz", tags=["health"], summary="Liveness and database check")
    def healthz(db_session: SessionDep) -> dict[str, str]:
        """200 with {"status": "ok"} when the service can reach its database."""
        db_session.execute(text("SELECT 1"))
        return {"status": "ok"}

    return app
