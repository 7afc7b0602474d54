"""The domain packages are layers that only look down; the web edges (routers, pages, auth), the CLI and
the demo orchestrate across them (docs/architecture.md)."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"
DOMAINS = ("users", "competitions", "images", "classifiers", "labelling", "jobs", "leaderboard", "release")
"""Lowest first: a domain's modules import only domains before it."""
FOUNDATIONS = ("app.core", "app.db.base", "app.db.engine", "app.db.statements", "app.errors", "app.settings")
FOUNDATIONS += ("app.security", "app.storage", "app.csv_cells", "app.i18n")
MAX_MUTUAL_PAIRS = 6
"""Pairs of packages importing each other (through their web edges): 14 before issue 27, 5 after it."""
WEB_EDGES = ("router.py", "admin_router.py", "pages.py", "auth.py", "dependencies.py", "public_reads.py")
"""Modules that answer HTTP requests, in a domain or in one of its sub-packages: they may call any domain, and
only they may use FastAPI."""
LABELLING_JOBS = ("quality_control", "active_sampling", "annotating", "admin")
"""The sub-packages of app/labelling, lowest first: each imports only the root and the jobs before it."""
EDGE_PACKAGES = ("app.admin", "app.site")
"""Pages that orchestrate across the domains: only the application (app.main) imports them."""
WEB = ("fastapi", "starlette", "app.db.session", "app.web", "app.main")


def imported_modules(source: Path) -> set[str]:
    """Every absolute module a file imports, at the top or inside a function."""
    names = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def within(name: str, package: str) -> bool:
    """Whether a module name is the package or inside it."""
    return name == package or name.startswith(package + ".")


def domain_modules() -> list[tuple[str, Path]]:
    """(domain, file) for every module of the domain packages, sub-packages included, but the web edges."""
    return [
        (domain, source)
        for domain in DOMAINS
        for source in sorted((APP / domain).rglob("*.py"))
        if source.name not in WEB_EDGES
    ]


@pytest.mark.parametrize(("domain", "source"), domain_modules(), ids=lambda value: str(value))
def test_domain_modules_import_only_lower_layers_and_no_web(domain, source):
    allowed = (f"app.{domain}", *FOUNDATIONS, *(f"app.{lower}" for lower in DOMAINS[: DOMAINS.index(domain)]))
    module = source.relative_to(APP)
    for name in imported_modules(source):
        assert not any(within(name, web) for web in WEB), f"{module} imports {name}"
        if within(name, "app") and name != "app":
            assert any(within(name, package) for package in allowed), f"{module} imports {name}"


def test_the_web_edges_of_sub_packages_are_recognised():
    modules = {str(source.relative_to(APP)) for _, source in domain_modules()}
    assert "labelling/annotating/queue.py" in modules
    edges = ("annotating/router.py", "annotating/pages.py", "admin/admin_router.py")
    edges = tuple(f"labelling/{edge}" for edge in edges)
    assert modules.isdisjoint(edges) and all((APP / edge).is_file() for edge in edges)


@pytest.mark.parametrize(
    "source", sorted((APP / "labelling").rglob("*.py")), ids=lambda source: str(source.relative_to(APP))
)
def test_the_labelling_jobs_import_only_the_shared_root_and_the_jobs_before_them(source):
    """app/labelling keeps what several jobs share at its root and each job in a sub-package
    (docs/architecture.md): the root imports no job, except the API bodies (schemas.py), which present what
    the jobs return to both routers; a job imports the root and only the jobs before it."""
    parts = source.relative_to(APP / "labelling").parts
    job = parts[0] if len(parts) > 1 else None
    allowed = LABELLING_JOBS[: LABELLING_JOBS.index(job) + 1] if job else ()
    if source.name == "schemas.py" and job is None:
        allowed = LABELLING_JOBS[:-1]
    for name in imported_modules(source):
        other = name.split(".")[2] if within(name, "app.labelling") and name != "app.labelling" else None
        if other in LABELLING_JOBS:
            assert other in allowed, f"{source.relative_to(APP)} imports {name}"


def test_the_core_modules_import_each_other_without_cycles():
    graph = {
        source.stem: {
            name.removeprefix("app.core.").split(".")[0]
            for name in imported_modules(source)
            if name.startswith("app.core.")
        }
        for source in (APP / "core").glob("*.py")
    }
    graph = {module: {other for other in imports if other in graph} for module, imports in graph.items()}
    done: set[str] = set()

    def visit(module: str, trail: tuple[str, ...]) -> None:
        assert module not in trail, f"import cycle: {' -> '.join((*trail, module))}"
        if module in done:
            return
        for other in graph[module]:
            visit(other, (*trail, module))
        done.add(module)

    for module in graph:
        visit(module, ())


def test_models_and_the_database_base_need_no_web_framework():
    for source in [APP / "models.py", *APP.glob("db/*.py"), *APP.glob("*/models.py")]:
        if source.name == "session.py":
            continue
        for name in imported_modules(source):
            assert not any(within(name, web) for web in WEB), f"{source.relative_to(APP)} imports {name}"


def loaded_packages(module: str) -> set[str]:
    """The top-level packages a fresh interpreter has loaded after importing `module`."""
    code = f"import sys, {module}; print(' '.join(sorted({{name.split('.')[0] for name in sys.modules}})))"
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    return set(run.stdout.split())


def test_a_worker_loads_neither_the_web_framework_nor_the_database():
    assert loaded_packages("workers.worker") & {"fastapi", "starlette", "uvicorn", "sqlalchemy"} == set()


def test_the_command_line_loads_no_web_framework_until_it_serves():
    assert loaded_packages("app.cli.main") & {"fastapi", "starlette", "uvicorn"} == set()


def test_the_blob_stores_need_no_domain_and_no_web_framework():
    for source in (APP / "storage").glob("*.py"):
        if source.name == "responses.py":  # a blob as an HTTP response: for the web edges only
            continue
        for name in imported_modules(source):
            assert not any(within(name, web) for web in WEB), f"storage/{source.name} imports {name}"
            domains = [f"app.{domain}" for domain in DOMAINS]
            assert not any(within(name, domain) for domain in domains), (
                f"storage/{source.name} imports {name}"
            )


@pytest.mark.parametrize("source", sorted((APP / "web").glob("*.py")), ids=lambda source: source.name)
def test_the_web_plumbing_imports_no_domain(source):
    """app/web is shared HTTP plumbing (errors, dependencies, templating, guards, metrics): the domains use
    it, so it may use only the foundations (a domain's behaviour reaches it as an argument, from app.main)."""
    allowed = ("app.web", "app.db.session", *FOUNDATIONS)
    for name in imported_modules(source):
        if within(name, "app") and name != "app":
            assert any(within(name, package) for package in allowed), f"web/{source.name} imports {name}"


def test_only_the_application_imports_the_edge_packages():
    for source in APP.rglob("*.py"):
        if source == APP / "main.py" or any(source.is_relative_to(APP / edge[4:]) for edge in EDGE_PACKAGES):
            continue
        for name in imported_modules(source):
            assert not any(within(name, edge) for edge in EDGE_PACKAGES), (
                f"{source.relative_to(APP)} imports {name}"
            )


def package_imports() -> dict[str, dict[str, set[str]]]:
    """For each package of app (its subpackages, and each top-level module as a package of its own): the
    other packages it imports, each with the files that import it."""
    packages = {source.stem for source in APP.glob("*.py")} | {
        path.name for path in APP.iterdir() if path.is_dir()
    }
    graph: dict[str, dict[str, set[str]]] = {}
    for source in APP.rglob("*.py"):
        package = source.relative_to(APP).parts[0].removesuffix(".py")
        for name in imported_modules(source):
            other = name.split(".")[1] if within(name, "app") and name != "app" else None
            if other in packages and other != package:
                graph.setdefault(package, {}).setdefault(other, set()).add(str(source.relative_to(APP)))
    return graph


def test_few_packages_import_each_other():
    graph = package_imports()
    pairs = sorted(
        f"{a} <-> {b} ({sorted(graph[a][b])[0]}, {sorted(graph[b][a])[0]})"
        for a in graph
        for b in graph[a]
        if a < b and a in graph.get(b, {})
    )
    assert len(pairs) <= MAX_MUTUAL_PAIRS, "packages importing each other:\n" + "\n".join(pairs)


@pytest.mark.parametrize("package", ["web", "admin", "site"])
def test_no_import_loop_passes_through_the_web_plumbing_or_the_edge_packages(package):
    graph = package_imports()
    trail = {package: ""}
    todo = [package]
    while todo:  # every package reachable from `package`, with the path that reaches it
        current = todo.pop()
        for other, files in graph.get(current, {}).items():
            if other == package:
                raise AssertionError(
                    f"import loop: {package}{trail[current]} -> {package} ({sorted(files)[0]})"
                )
            if other not in trail:
                trail[other] = f"{trail[current]} -> {other}"
                todo.append(other)
