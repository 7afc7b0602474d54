"""The OpenAPI declares the 4xx answers of every operation (`responses=`), each with its error body: those
its caller's dependency gives (401, 403), its path (404) and its parameters (422), at least."""

import pytest
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts

from app.labelling.annotating.router import labelling_request
from app.main import create_app
from app.settings import Settings
from app.users.auth import current_user, optional_user, require_admin, require_worker
from app.web.errors import ErrorRead, FieldErrorsRead
from tests.conftest import TEST_SECRET_KEY

ROLE_CHECKS = (require_admin, require_worker, labelling_request)
"""Dependencies refusing callers without the right role (403) or credentials (401)."""
IDENTIFIERS = (current_user, optional_user)
"""Dependencies refusing a bad token (401)."""


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("openapi")
    return create_app(Settings(env="test", data_dir=data_dir, secret_key=TEST_SECRET_KEY))


def calls(dependant: Dependant) -> set:
    """Every dependency function a route's dependant calls, however deep."""
    found = {dependant.call}
    for sub in dependant.dependencies:
        found |= calls(sub)
    return found


def operations(app) -> list:
    """The route contexts (included routers' routes with their full path and dependant) of the OpenAPI."""
    return [
        context
        for context in iter_route_contexts(app.routes)
        if isinstance(context.original_route, APIRoute) and context.include_in_schema
    ]


def test_every_operation_declares_the_errors_of_its_caller_path_and_parameters(app):
    contexts = operations(app)
    assert len(contexts) >= 40
    for context in contexts:
        responses = context.original_route.responses
        declared = {status for status in responses if isinstance(status, int) and 400 <= status < 500}
        needed = set()
        dependencies = calls(context.dependant)
        if dependencies & set(ROLE_CHECKS):
            needed |= {401, 403}
        elif dependencies & set(IDENTIFIERS):
            needed.add(401)
        if context.dependant.path_params or "{" in context.path:
            needed |= {404, 422}
        if context.dependant.query_params or context.dependant.body_params:
            needed.add(422)
        name = f"{sorted(context.methods)} {context.path}"
        assert needed <= declared, f"{name} declares {sorted(declared)}, not {sorted(needed - declared)}"
        for status in declared:
            model = responses[status]["model"]
            assert model == (ErrorRead | FieldErrorsRead if status == 422 else ErrorRead), (name, status)


def test_the_declared_errors_are_in_the_openapi_with_their_bodies(app):
    schema = app.openapi()
    assert {"ErrorRead", "FieldErrorsRead"} <= set(schema["components"]["schemas"])
    answers = schema["paths"]["/api/v1/competitions/{competition_id}/labelling/gold"]["post"]["responses"]
    assert set(answers) == {"201", "401", "403", "404", "422"}
    assert answers["404"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorRead"
    }
