"""The `mad` command line: database, server, accounts, competitions, images, classifiers, workers, crowd
studies."""

import inspect

import typer

from app.cli.classifiers import classifiers_app
from app.cli.common import fail, load_settings
from app.cli.competitions import competitions_app
from app.cli.db import db_app
from app.cli.demo import demo
from app.cli.images import images_app
from app.cli.release import release
from app.cli.simulate import simulate
from app.cli.studies import studies_app
from app.cli.taxonomy import taxonomy_app
from app.cli.users import users_app
from app.cli.worker import jobs, worker

app = typer.Typer(
    help="MAD Arena: rank image classifiers by the MAximum Discrepancy competition.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(db_app, name="db")
app.add_typer(users_app, name="users")
app.add_typer(competitions_app, name="competitions")
app.add_typer(images_app, name="images")
app.add_typer(classifiers_app, name="classifiers")
app.add_typer(taxonomy_app, name="taxonomy")
app.add_typer(studies_app, name="studies")
app.command()(worker)
app.command()(jobs)
app.command()(simulate)
app.command()(demo)
app.command()(release)


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to listen on (0.0.0.0 for every interface)."),
    port: int = typer.Option(8000, help="TCP port."),
    workers: int = typer.Option(1, min=1, help="Server processes."),
) -> None:
    """Serve the web pages and the REST API (OpenAPI at /docs) with uvicorn."""
    from app.db.engine import create_db_engine
    from app.migrate import DatabaseNotReady, check_current
    from app.serving import serve as serve_app

    settings = load_settings()
    engine = create_db_engine(settings.sqlalchemy_url)
    try:
        check_current(engine)
    except DatabaseNotReady as error:
        fail(str(error))
    finally:
        engine.dispose()
    serve_app(settings, host=host, port=port, workers=workers)


def unwrapped(text: str) -> str:
    """A docstring's paragraphs, each on one line: the help wraps them to the terminal's width (Typer keeps
    the source's line breaks after the first paragraph, which broke sentences mid-way)."""
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in inspect.cleandoc(text).split("\n\n"))


def unwrap_help(group: typer.Typer) -> None:
    """Give every command of the group, and of its subgroups, its docstring unwrapped as its help."""
    for command in group.registered_commands:
        command.help = unwrapped(command.help or inspect.getdoc(command.callback) or "")
    for subgroup in group.registered_groups:
        if subgroup.typer_instance is not None:
            unwrap_help(subgroup.typer_instance)


unwrap_help(app)
