"""Shared fixtures: every database test runs on SQLite and on the real Postgres.

Each test session migrates one fresh database per backend with Alembic (the only way the schema is
made). `db_session` binds a test to a transaction that is rolled back at the end; `fresh_database_url`
gives a test its own committed database (for CLI, worker and concurrency tests).
"""

import json
import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import psycopg
import pytest
from argon2 import PasswordHasher, profiles
from fastapi.testclient import TestClient
from sqlalchemy import Engine, make_url
from sqlalchemy.orm import Session, sessionmaker

from app import security
from app.db.engine import create_db_engine
from app.db.session import database_steps, get_session
from app.labelling.active_sampling import policy
from app.labelling.annotating.router import policy_runner
from app.main import create_app
from app.migrate import upgrade
from app.settings import Settings
from app.users import service as users_service
from app.users.models import Role, User

POSTGRES_URL = os.environ.get("MAD_TEST_POSTGRES_URL", "postgresql+psycopg://root@127.0.0.1:5432/postgres")
BACKENDS = ("sqlite", "postgres")
TEST_SECRET_KEY = "test-secret-key-" + "x" * 32
TEST_PASSWORD = "correct horse battery"

security._password_hasher = PasswordHasher.from_parameters(profiles.CHEAPEST)
"""In this test process, Argon2id at argon2-cffi's cheapest parameters (its documented choice for tests):
at the service's (security.PASSWORD_PARAMETERS, 0.25 s of two cores a hash) the accounts and sign-ins of the
suite took minutes. Servers the tests start as subprocesses hash as the service does;
tests/foundation/test_auth.py checks those parameters."""

if "PYTEST_XDIST_WORKER" in os.environ:
    # pytest-xdist's workers start with COLUMNS=80 and LINES=24 in their environment, which the CLI's rich
    # consoles would keep as their width from import on; without them they read COLUMNS when they print, as in
    # a single pytest process, so the CLI tests' own COLUMNS applies.
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


def _postgres_admin() -> psycopg.Connection:
    """An autocommit connection to the Postgres server, or a failure that says how to start it."""
    url = make_url(POSTGRES_URL)
    try:
        return psycopg.connect(
            host=url.host, port=url.port or 5432, user=url.username, dbname=url.database, autocommit=True
        )
    except psycopg.OperationalError as error:
        pytest.fail(
            f"Postgres is not reachable at {url.render_as_string()} ({error}). Start it with "
            "`pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` "
            "or point MAD_TEST_POSTGRES_URL at a server where this user may create databases."
        )


def _postgres_database_url(name: str) -> str:
    """The URL of database `name` on the test server."""
    return make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)


class DatabaseFactory:
    """Makes migrated databases for one backend: a template migrated once, then cheap copies."""

    def __init__(self, backend: str, workdir: Path):
        self.backend = backend
        self.workdir = workdir
        self.created: list[str] = []
        self.template = self._new_name()
        if backend == "sqlite":
            self.template_path = workdir / f"{self.template}.sqlite3"
            upgrade(f"sqlite:///{self.template_path}")
        else:
            with _postgres_admin() as admin:
                admin.execute(f'CREATE DATABASE "{self.template}"')
            self.created.append(self.template)
            upgrade(_postgres_database_url(self.template))

    def _new_name(self) -> str:
        """A database name unique to this test run."""
        return f"mad_test_{uuid.uuid4().hex[:12]}"

    def empty_url(self) -> str:
        """A new, empty (unmigrated) database."""
        name = self._new_name()
        if self.backend == "sqlite":
            return f"sqlite:///{self.workdir / name}.sqlite3"
        with _postgres_admin() as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        return _postgres_database_url(name)

    def migrated_url(self) -> str:
        """A new database at the latest migration, copied from the template."""
        name = self._new_name()
        if self.backend == "sqlite":
            path = self.workdir / f"{name}.sqlite3"
            shutil.copyfile(self.template_path, path)
            return f"sqlite:///{path}"
        with _postgres_admin() as admin:
            admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        self.created.append(name)
        return _postgres_database_url(name)

    def drop_all(self) -> None:
        """Remove every Postgres database this factory made (SQLite files go with the tmp dir)."""
        if not self.created:
            return
        with _postgres_admin() as admin:
            for name in reversed(self.created):
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture(scope="session", params=BACKENDS)
def database_factory(request, tmp_path_factory) -> Iterator[DatabaseFactory]:
    """One backend's database factory; tests using it run once per backend."""
    factory = DatabaseFactory(request.param, tmp_path_factory.mktemp(request.param))
    yield factory
    factory.drop_all()


@pytest.fixture(scope="session")
def backend(database_factory: DatabaseFactory) -> str:
    """'sqlite' or 'postgres'."""
    return database_factory.backend


@pytest.fixture(scope="session")
def database_url(database_factory: DatabaseFactory) -> str:
    """The shared migrated database of this backend (tests on it roll back)."""
    return database_factory.migrated_url()


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[Engine]:
    """An engine on the shared database."""
    engine = create_db_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def db_session(engine: Engine) -> Iterator[Session]:
    """A session inside a transaction rolled back after the test.

    Its commits release savepoints, so fixtures commit their setup and a failed request's rollback
    undoes only that request's work, as with a real database.
    """
    with engine.connect() as connection:
        transaction = connection.begin()
        session = Session(bind=connection, join_transaction_mode="create_savepoint", expire_on_commit=False)
        try:
            yield session
        finally:
            session.close()
            transaction.rollback()


@pytest.fixture
def fresh_database_url(database_factory: DatabaseFactory) -> str:
    """A database of its own for a test that must commit for real."""
    return database_factory.migrated_url()


def settings_for(tmp_path: Path, database_url: str, **overrides) -> Settings:
    """Settings for a test: this database, a temporary data dir, the test secret, and these overrides."""
    return Settings(
        env="test",
        data_dir=tmp_path / "data",
        database_url=database_url,
        secret_key=TEST_SECRET_KEY,
        **overrides,
    )


@pytest.fixture
def settings(tmp_path: Path, database_url: str) -> Settings:
    """Test settings: the shared database, a temporary data dir."""
    return settings_for(tmp_path, database_url)


@pytest.fixture
def app(settings: Settings, db_session: Session):
    """The application with its request sessions, and every session it opens itself (the error pages'
    signed-in user), bound to the test's rolled-back transaction: each commits a savepoint of it."""
    application = create_app(settings)
    application.state.sessionmaker = sessionmaker(
        bind=db_session.bind, join_transaction_mode="create_savepoint", expire_on_commit=False
    )

    def session_in_test_transaction() -> Iterator[Session]:
        try:
            yield db_session
            db_session.commit()
        except BaseException:
            db_session.rollback()
            raise

    application.dependency_overrides[get_session] = session_in_test_transaction
    application.dependency_overrides[database_steps] = lambda: StepsInTestTransaction(db_session)
    application.dependency_overrides[policy_runner] = lambda: PolicyRunnerInTestTransaction(db_session)
    return application


class StepsInTestTransaction:
    """DatabaseSteps on the test's rolled-back transaction: each step commits (a savepoint) or rolls back."""

    def __init__(self, db_session: Session):
        self.db_session = db_session

    async def run(self, work):
        try:
            result = work(self.db_session)
            self.db_session.commit()
            return result
        except BaseException:
            self.db_session.rollback()
            raise


class PolicyRunnerInTestTransaction:
    """The PolicyRunner on the test's rolled-back transaction, which the policy's own process cannot see
    (tests/labelling/test_active.py runs that process through a live server)."""

    def __init__(self, db_session: Session):
        self.steps = StepsInTestTransaction(db_session)
        self.pending: dict[int, int] = {}

    def start(self) -> None:
        """Nothing to start: the policy reruns in the test's thread."""

    def count(self, competition_id: int, decided: int) -> bool:
        """Every count handed over at once (a batch of one)."""
        self.pending[competition_id] = self.pending.get(competition_id, 0) + decided
        return True

    async def refresh_if_due(self, competition_id: int, ran_dry: bool) -> None:
        """The rerun and its priorities in one step (the policy's process commits those in batches)."""
        counted = self.pending.pop(competition_id, 0)
        await self.steps.run(
            partial(self._refresh_if_due, competition_id=competition_id, counted=counted, ran_dry=ran_dry)
        )

    @staticmethod
    def _refresh_if_due(db_session: Session, **arguments) -> None:
        due = policy.refresh_if_due(db_session, **arguments)
        if due.rerun is not None:
            policy.write_levels(db_session, due.rerun.levels)


@pytest.fixture
def client(app) -> Iterator[TestClient]:
    """An anonymous HTTP client."""
    with TestClient(app) as test_client:
        yield test_client


def make_user(db_session: Session, username: str, role: Role) -> User:
    """An account with the test password."""
    password = None if role == Role.worker else TEST_PASSWORD
    user = users_service.create_user(db_session=db_session, username=username, role=role, password=password)
    db_session.commit()
    return user


def bearer(db_session: Session, user: User) -> dict[str, str]:
    """Authorization headers carrying a new token of this user."""
    token = users_service.create_api_token(db_session=db_session, user=user, name="test")
    db_session.commit()
    return {"Authorization": f"Bearer {token}"}


@pytest.fixture
def admin(db_session: Session) -> User:
    """An admin account."""
    return make_user(db_session, "admin", Role.admin)


@pytest.fixture
def annotator(db_session: Session) -> User:
    """An annotator account."""
    return make_user(db_session, "annotator", Role.annotator)


@pytest.fixture
def admin_headers(db_session: Session, admin: User) -> dict[str, str]:
    """Bearer headers of the admin."""
    return bearer(db_session, admin)


@pytest.fixture
def annotator_headers(db_session: Session, annotator: User) -> dict[str, str]:
    """Bearer headers of the annotator."""
    return bearer(db_session, annotator)


@pytest.fixture
def competition(db_session: Session):
    """An ImageNet-1k competition with the paper's parameters."""
    from app.competitions.schemas import CompetitionCreate
    from app.competitions.service import create_competition

    competition = create_competition(db_session=db_session, spec=CompetitionCreate(name="test-competition"))
    db_session.commit()
    return competition


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """One S3-protocol server (moto's, as s3fs's own tests use) on a free 127.0.0.1 port for the session."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture
def s3_storage_url(s3_endpoint: str, monkeypatch) -> str:
    """s3://<a new bucket>/mad on the session's S3 server, fake credentials in this test's environment."""
    import s3fs

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    bucket = f"mad-{uuid.uuid4().hex[:12]}"
    s3fs.S3FileSystem(skip_instance_cache=True).mkdir(bucket)
    return f"s3://{bucket}/mad"


FUZZ_CASES: dict[str, int] = {}
"""Cases fuzzed per test id: the user property fuzz_cases of tests/reliability/test_fuzz.py's reports."""


def pytest_runtest_logreport(report) -> None:
    """Keep the fuzz tests' case counts; under pytest-xdist their reports reach the main process too."""
    for name, value in report.user_properties if report.when == "call" else ():
        if name == "fuzz_cases":
            FUZZ_CASES[report.nodeid] = value


def pytest_terminal_summary(terminalreporter, config) -> None:
    """Print how many cases each fuzz test tried; also write them as JSON to $MAD_FUZZ_REPORT when set (by
    the main process only, not by pytest-xdist's workers)."""
    if not FUZZ_CASES or hasattr(config, "workerinput"):
        return
    terminalreporter.section("fuzzing")
    for test_id, count in FUZZ_CASES.items():
        terminalreporter.write_line(f"{count} cases: {test_id}")
    report = os.environ.get("MAD_FUZZ_REPORT")
    if report:
        counts = {"cases": FUZZ_CASES, "total": sum(FUZZ_CASES.values())}
        Path(report).write_text(json.dumps(counts, indent=2) + "\n")
        terminalreporter.write_line(f"written to {report}")


TEST_WORKERS = 3
"""Processes `make test` runs the suite in (pytest-xdist's `-n auto`): measured on 2 cores, where the tests
wait on browsers, servers, subprocesses and databases much of their time (README, "Development")."""


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, which plain `pytest` runs need not load
def pytest_xdist_auto_num_workers(config) -> int:
    """TEST_WORKERS (or $PYTEST_XDIST_AUTO_NUM_WORKERS) when the run covers a directory; none for files or
    named tests, which `--dist loadfile` would hand to one worker anyway after starting them all."""
    covers_a_directory = any(
        (config.invocation_params.dir / arg.split("::")[0]).is_dir() for arg in config.args
    )
    return int(os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", TEST_WORKERS)) if covers_a_directory else 0


SLOWEST_FILES = (
    "tests/jobs/test_local_workers.py",
    "tests/reliability/test_fuzz.py",
    "tests/jobs/test_worker_pipeline.py",
    "tests/jobs/test_worker_faults.py",
    "tests/reliability/test_faults.py",
    "tests/web/test_site.py",
    "tests/labelling/test_active.py",
    "tests/reliability/test_scale.py",
    "tests/labelling/test_concurrency.py",
    "tests/demo/test_demo.py",
    "tests/migrations/test_upgrades.py",
    "tests/reliability/test_leaks.py",
    "tests/labelling/test_policy_runner.py",
    "tests/jobs/test_data_path.py",
)
"""The files that took longest in the suite (seconds of its wall time per file, from `--junitxml`; README,
"Development"), slowest first."""


def pytest_collection_modifyitems(items) -> None:
    """Run SLOWEST_FILES first, each file's tests in their order, then the rest as collected: with whole
    files per process (`--dist loadfile`), a slow file handed out last kept its process busy minutes after
    the others had finished. The same order in every process, as pytest-xdist requires."""
    first = {path: rank for rank, path in enumerate(SLOWEST_FILES)}
    items.sort(key=lambda item: first.get(item.nodeid.split("::")[0], len(first)))
