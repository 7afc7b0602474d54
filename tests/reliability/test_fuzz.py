"""Fuzzing: schemathesis generates requests from the service's own OpenAPI schema; no input may give a 5xx.

Every operation gets positive (schema-valid) and negative (schema-violating) cases, on SQLite and on
Postgres, against the built competition of world.py: half of the path parameters name real rows
(competitions, classifiers, images, users, jobs, snapshots), most requests carry the admin's token so that
authenticated handlers run, the rest an annotator's, a worker's or none. The pages, which are not in the
schema, get the same treatment with hypothesis-made path segments and query strings.

MAD_FUZZ_EXAMPLES sets the cases per operation and mode (default 12, a couple of minutes on both
databases); MAD_FUZZ_SEED picks another deterministic run (default 0; "random" for a fresh one).
The number of cases tried is printed in the "fuzzing" section of pytest's summary, and written as JSON
to the file MAD_FUZZ_REPORT names, when set.
"""

import json
import os
import re
from urllib.parse import quote

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from sqlalchemy import update

from app.db.engine import create_db_engine
from app.users.models import User
from tests.support.routes import endpoints

EXAMPLES = int(os.environ.get("MAD_FUZZ_EXAMPLES", "12"))
SEED = os.environ.get("MAD_FUZZ_SEED", "0")
ROLES = ("admin", "admin", "admin", "annotator", "worker", "anonymous")


def _fuzz_settings(examples: int):
    """Hypothesis settings: no shrinking of passing runs, no example database, no deadline."""
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        suppress_health_check=list(HealthCheck),
        derandomize=SEED != "random",
    )


def _seeded(test):
    """Apply MAD_FUZZ_SEED (unless 'random')."""
    return test if SEED == "random" else seed(int(SEED))(test)


def real_values(world) -> dict[str, list]:
    """Values of each path parameter name that address rows of the world."""
    users = [user_id for role, user_id in world.user_ids.items() if role != "admin"]
    return {
        "competition_id": [world.competition_id],
        "classifier_id": world.classifier_ids,
        "a_id": world.classifier_ids,
        "b_id": world.classifier_ids,
        "user_id": users,
        "job_id": world.job_ids,
        "sha256": world.hashes,
        "slug": [world.snapshot_slug],
    }


def _fill_with_real_rows(case, data, values: dict[str, list]) -> None:
    """Replace each path parameter, half of the time, by one naming a real row."""
    for name in list(case.path_parameters or {}):
        if name in values and data.draw(st.booleans(), label=f"real {name}"):
            case.path_parameters[name] = data.draw(st.sampled_from(values[name]), label=name)


def _server_error(status: int, method: str, url: str, detail: str) -> str:
    return f"{method} {url} answered {status}: {detail[:2000]}"


def _keep_admin_active(database_url: str, admin_id: int) -> None:
    """A fuzzed PATCH /users may pause the admin; resume it so later cases still reach the handlers."""
    engine = create_db_engine(database_url)
    try:
        with engine.begin() as connection:
            connection.execute(update(User).where(User.id == admin_id).values(is_active=True))
    finally:
        engine.dispose()


def test_no_generated_request_gets_a_server_error(world_app, world, world_settings, backend, request):
    schema = schemathesis.openapi.from_asgi("/openapi.json", world_app)
    values = real_values(world)
    tried = 0
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 40
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @_seeded
            @_fuzz_settings(EXAMPLES)
            @given(case=operation.as_strategy(generation_mode=mode), data=st.data())
            def run(case, data):
                nonlocal tried
                _fill_with_real_rows(case, data, values)
                role = data.draw(st.sampled_from(ROLES), label="role")
                response = case.call(headers=world.headers(role))
                tried += 1
                assert response.status_code < 500, _server_error(
                    response.status_code, case.method, case.formatted_path, response.text
                )
                if case.method == "PATCH":
                    _keep_admin_active(world_settings.sqlalchemy_url, world.user_ids["admin"])

            try:
                run()
            except Unsatisfiable:
                assert mode == GenerationMode.NEGATIVE, operation.label  # some operations cannot be negated
            except Exception as error:  # every operation is fuzzed; the failures are reported together
                failures.append(f"{operation.label} ({mode.value}): {_last_line(error)}")
    request.node.user_properties.append(("fuzz_cases", tried))
    print(f"fuzzed {tried} cases on {backend}")
    assert not failures, "\n".join(failures)
    assert tried >= len(operations) * EXAMPLES


def _last_line(error: Exception) -> str:
    """The gist of a failure: its message and the reproducing request schemathesis noted."""
    notes = "".join(getattr(error, "__notes__", []))
    return f"{type(error).__name__}: {str(error)[:600]} {notes[-800:]}"


PATH_SEGMENTS = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["0", "1", "2", "-1", "9" * 30, "1e3", "%00", "..", "%2e%2e", "null", " ", "ü"]),
    st.text(min_size=1, max_size=40),
)
QUERIES = st.dictionaries(
    st.sampled_from(["next", "format", "offset", "limit", "fields", "x", "competition_id"]),
    st.one_of(st.text(max_size=30), st.integers().map(str)),
    max_size=3,
)


def page_routes(app) -> list[str]:
    """The GET routes outside the schema (HTML pages)."""
    return sorted({e.path_template for e in endpoints(app) if not e.in_schema and e.method == "GET"})


def test_no_page_gets_a_server_error(world_app, world, backend, request):
    from fastapi.testclient import TestClient

    values = real_values(world)
    routes = page_routes(world_app)
    assert "/competitions/{competition_id}/leaderboard" in routes and "/login" in routes
    tried = 0
    with TestClient(world_app) as client:  # an unhandled exception is raised here, with its traceback
        for template in routes:

            @_seeded
            @_fuzz_settings(EXAMPLES * 2)
            @given(data=st.data(), query=QUERIES, template=st.just(template))
            def run(data, query, template):
                nonlocal tried

                def segment(match: re.Match) -> str:
                    name = match.group(1)
                    if name in values and data.draw(st.booleans(), label=f"real {name}"):
                        return str(data.draw(st.sampled_from(values[name]), label=name))
                    return quote(data.draw(PATH_SEGMENTS, label=name), safe="%")

                path = re.sub(r"{(\w+)}", segment, template)
                role = data.draw(st.sampled_from(ROLES), label="role")
                response = client.get(path, params=query, headers=world.headers(role), follow_redirects=False)
                tried += 1
                assert response.status_code < 500, _server_error(
                    response.status_code, "GET", path, response.text
                )

            run()
        login_forms = st.fixed_dictionaries(
            {},
            optional={
                "username": st.text(max_size=80),
                "password": st.text(max_size=80),
                "next": st.text(max_size=80),
                "csrf_token": st.text(max_size=50),
            },
        )

        @_seeded
        @_fuzz_settings(EXAMPLES * 4)
        @given(form=login_forms)
        def sign_in(form):
            nonlocal tried
            response = client.post("/login", data=form, follow_redirects=False)
            tried += 1
            assert response.status_code < 500, _server_error(
                response.status_code, "POST", "/login", response.text
            )

        sign_in()
    request.node.user_properties.append(("fuzz_cases", tried))
    print(f"fuzzed {tried} page requests on {backend}")


@pytest.mark.parametrize("value", [str(2**63), str(-(2**63) - 1), "9" * 40])
def test_ids_beyond_64_bits_are_not_found_not_a_crash(world_app, world, value):
    from fastapi.testclient import TestClient

    with TestClient(world_app, raise_server_exceptions=False) as client:
        for path in (
            f"/api/v1/competitions/{value}",
            f"/api/v1/classifiers/{value}",
            f"/api/v1/competitions/{world.competition_id}/pairs/{value}/{world.classifier_ids[0]}",
            f"/competitions/{value}/leaderboard",
        ):
            response = client.get(path, headers=world.headers("admin"))
            assert response.status_code in (404, 422), (path, response.status_code, response.text)


EXTREME_NUMBERS = st.sampled_from(
    [float("nan"), float("inf"), float("-inf"), 2**63, -(2**63) - 1, 2**70, 10**30, 1e308, -1e308, 5e-324]
)


def _with_extreme_numbers(value, data):
    """The JSON value with some of its numbers (half, drawn) replaced by NaN, ±Infinity or huge integers."""
    if isinstance(value, dict):
        return {key: _with_extreme_numbers(item, data) for key, item in value.items()}
    if isinstance(value, list):
        return [_with_extreme_numbers(item, data) for item in value]
    if isinstance(value, int | float) and not isinstance(value, bool) and data.draw(st.booleans()):
        return data.draw(EXTREME_NUMBERS)
    return value


def test_nan_infinity_and_huge_integers_in_bodies_get_no_server_error(
    world_app, world, world_settings, request
):
    """Schema-valid JSON bodies with numbers swapped for NaN, ±Infinity (which Python's JSON reads) and
    integers beyond 64 bits: every operation with a JSON body answers them below 500."""
    from fastapi.testclient import TestClient

    schema = schemathesis.openapi.from_asgi("/openapi.json", world_app)
    values = real_values(world)
    operations = [result.ok() for result in schema.get_all_operations()]
    with_json = [
        op for op in operations if "application/json" in str(op.definition.raw.get("requestBody", {}))
    ]
    assert len(with_json) >= 10
    tried = 0
    failures: list[str] = []
    with TestClient(world_app, raise_server_exceptions=False) as client:
        for operation in with_json:

            @_seeded
            @_fuzz_settings(EXAMPLES)
            @given(case=operation.as_strategy(generation_mode=GenerationMode.POSITIVE), data=st.data())
            def run(case, data):
                nonlocal tried
                _fill_with_real_rows(case, data, values)
                role = data.draw(st.sampled_from(ROLES), label="role")
                body = json.dumps(_with_extreme_numbers(case.body, data))
                response = client.request(
                    case.method,
                    case.formatted_path,
                    params=case.query,
                    content=body,
                    headers={**world.headers(role), "Content-Type": "application/json"},
                )
                tried += 1
                assert response.status_code < 500, _server_error(
                    response.status_code, case.method, case.formatted_path, f"{body[:300]} -> {response.text}"
                )
                if case.method == "PATCH":
                    _keep_admin_active(world_settings.sqlalchemy_url, world.user_ids["admin"])

            try:
                run()
            except Exception as error:
                failures.append(f"{operation.label}: {_last_line(error)}")
    request.node.user_properties.append(("fuzz_cases", tried))
    assert not failures, "\n".join(failures)
