"""`mad taxonomy`: class taxonomies and their WordNet-weighted distance matrices (paper Eq. 3)."""

from pathlib import Path

import typer
from rich.console import Console

taxonomy_app = typer.Typer(
    help="Class taxonomies (ImageNet-1k, ImageNet-A, custom files) and their MAD distance matrices.",
    no_args_is_help=True,
)


@taxonomy_app.command()
def matrix(
    taxonomy: str = typer.Argument(..., help="imagenet-1k, imagenet-a, or a YAML/JSON taxonomy file."),
    out: Path = typer.Option(..., "--out", "-o", help="File to write the C×C float64 matrix to (.npy)."),
) -> None:
    """Write d(a, b) for every pair of classes as float64 .npy, rows and columns in model output order."""
    import numpy as np

    from app.core.taxonomy import TaxonomyError
    from app.core.taxonomy_sources import load_taxonomy

    try:
        chosen = load_taxonomy(taxonomy)
    except TaxonomyError as error:
        Console(stderr=True).print(f"[bold red]Error:[/] {error}", highlight=False)
        raise typer.Exit(1) from error
    distances = chosen.distance_matrix()
    try:
        with out.open("wb") as stream:
            np.save(stream, distances)
    except OSError as error:
        Console(stderr=True).print(f"[bold red]Error:[/] cannot write {out}: {error.strerror}")
        raise typer.Exit(1) from error
    size = len(chosen.classes)
    Console().print(f"wrote the {size}×{size} float64 distance matrix of {chosen.key} to {out}")
