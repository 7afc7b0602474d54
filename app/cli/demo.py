"""`mad demo`: the offline end-to-end competition behind `make demo`."""

import typer

from app.cli.common import console, load_settings


def demo(
    simulate: bool = typer.Option(
        False, "--simulate", help="Simulated annotators label everything; print the leaderboard and SRCC."
    ),
    active: bool = typer.Option(
        False,
        "--active",
        help="With --simulate: then label a twin competition under active sampling the same way and print "
        "its votes used and SRCC beside the uniform run's.",
    ),
    images: int = typer.Option(None, min=50, help="Use only the first N digits (default: all 1,797)."),
    training_steps: int = typer.Option(60, min=1, help="Mini-batches each classifier trains for."),
    host: str = typer.Option("127.0.0.1", help="Where the server listens (without --simulate)."),
    port: int = typer.Option(8000, help="Port of the server (without --simulate)."),
) -> None:
    """A MAD competition on the UCI handwritten digits, offline, in MAD_DATA_DIR (make demo: ./demo-data).

    Writes the digits as PNGs and imports them, trains five timm classifiers briefly on small disjoint
    slices, registers them with a custom digit taxonomy, runs a worker for predictions and selections, then
    serves http://HOST:PORT with an admin and an annotator account (printed) and a worker beside it for the
    classifiers an admin adds; Ctrl-C stops both. The competition's panel is one annotator, so one person's
    answers move the leaderboard. Running it again reuses everything already there.
    """
    console.print("[bold]•[/] Loading PyTorch and timm …")  # it takes a while on a busy machine: say so first
    from app.demo.run import DemoOptions, run_demo  # torch and timm load only when the demo runs

    run_demo(
        load_settings(),
        DemoOptions(
            simulate=simulate,
            active=active,
            images=images,
            training_steps=training_steps,
            host=host,
            port=port,
        ),
    )
