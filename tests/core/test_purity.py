"""app/core stays a pure numpy library: no database, web or other app packages, ever."""

import ast
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "app" / "core"
FORBIDDEN = ("sqlalchemy", "alembic", "fastapi", "starlette", "uvicorn", "jinja2", "httpx", "pydantic")


def imported_modules(source: Path) -> set[str]:
    tree = ast.parse(source.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_core_imports_only_core_and_numerical_libraries():
    modules = sorted(CORE.glob("*.py"))
    assert len(modules) >= 6
    for source in modules:
        for name in imported_modules(source):
            outside_core = name.startswith("app.") and not name.startswith("app.core.")
            assert not name.startswith(FORBIDDEN) and not outside_core, f"{source.name} imports {name}"
