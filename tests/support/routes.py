"""Every route of the app, including those of included routers, with the dependencies it calls."""

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from fastapi.routing import APIRoute, iter_route_contexts

SAMPLE_PATH_VALUES = {"sha256": "0" * 64}


@dataclass(frozen=True)
class Endpoint:
    """One method of one API route and every dependency callable it resolves."""

    method: str
    path_template: str
    dependency_calls: frozenset[Callable]
    in_schema: bool

    @property
    def sample_path(self) -> str:
        """The path with each parameter filled with a plausible value (1, or a hash)."""
        return re.sub(r"{(\w+)}", lambda m: SAMPLE_PATH_VALUES.get(m.group(1), "1"), self.path_template)


def _dependency_calls(dependant) -> Iterator[Callable]:
    for dependency in dependant.dependencies:
        yield dependency.call
        yield from _dependency_calls(dependency)


def endpoints(app) -> list[Endpoint]:
    """Every (method, path) served by an APIRoute of the app."""
    found = []
    for context in iter_route_contexts(app.routes):
        if not isinstance(context.original_route, APIRoute):
            continue
        calls = frozenset(_dependency_calls(context.dependant))
        in_schema = context.include_in_schema
        found += [Endpoint(method, context.path, calls, in_schema) for method in sorted(context.methods)]
    return found
