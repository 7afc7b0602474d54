"""The dataset card of a release: README.md with a YAML header in the Hugging Face datasets format
(https://huggingface.co/docs/hub/datasets-cards), then provenance, the protocol and each table."""

from pathlib import Path

import pyarrow.compute as pc
import pyarrow.parquet as pq
import yaml

from app.competitions.models import Competition
from app.core.threshold_rule import ThresholdRule

SIZE_CATEGORIES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"))
TABLE_DESCRIPTIONS = {
    "images": "every image of the corpus by ordinal, with provenance: where it was read (source_uri), its "
    "source page, license and author, and whether it was excluded and why",
    "subsets": "each classifier pair's images in selection order: selected, reserve (replacements) and "
    "discarded, with both predictions, their distance and the decided outcomes (outcome_a, outcome_b)",
    "questions": "each (image, class) question with its outcome, decision time and counted votes",
    "votes": "every answer, with its annotator pseudonymised and whether it counts towards the majority",
    "adjudications": "each admin verdict on a split decision, a discarded image or an image flagged as not a "
    "natural photo: confirmed or overturned, the panel's outcome and the one that stands, and why",
    "predictions": "each classifier's top-1 label, its probability and the softmax entropy per image",
    "leaderboard": "the standings: Perron score and rank with bootstrap intervals, the other rankings, "
    "Table 1 of the paper",
    "leaderboard_pairs": "A (pairwise accuracy), B (dominance) and n (labelled images) in long form",
    "leaderboard_summary": "λmax, consistency index, SRCC, KRCC, case shares and the smoothing α",
    "snapshots": "the leaderboards frozen during the competition, each as JSON",
}
PROVENANCE_LICENSES_SHOWN = 10


def size_category(n: int) -> str:
    """The Hugging Face size category of n examples (here: images)."""
    return next((name for bound, name in SIZE_CATEGORIES if n < bound), "n>1M")


def card_header(competition: Competition, rows: dict[str, int], license_id: str) -> dict:
    """The YAML metadata: license, size, task, pretty name, and one config per Parquet table."""
    return {
        "license": license_id,
        "pretty_name": f"MAD competition: {competition.name}",
        "size_categories": [size_category(rows["images"])],
        "task_categories": ["image-classification"],
        "tags": ["model-evaluation", "maximum-discrepancy"],
        "configs": [{"config_name": name, "data_files": f"{name}.parquet"} for name in rows],
    }


def provenance_lines(images_file: Path) -> list[str]:
    """How many images carry a license, a source page and an author, and the most common licenses."""
    table = pq.read_table(images_file, columns=["license", "source_url", "author"])
    total = table.num_rows
    lines = [f"- {total} images; recorded per image in `images.parquet`."]
    for column, what in (("license", "a license"), ("source_url", "a source page"), ("author", "an author")):
        lines.append(f"- {total - table.column(column).null_count} with {what}.")
    licenses = pc.value_counts(table.column("license").drop_null()).to_pylist()
    licenses.sort(key=lambda entry: (-entry["counts"], entry["values"]))
    lines += [f"  - {entry['values']}: {entry['counts']}" for entry in licenses[:PROVENANCE_LICENSES_SHOWN]]
    return lines


def protocol_lines(competition: Competition, alpha: float | None) -> list[str]:
    """The MAD settings the labels were made under (paper Sec. 2–3)."""
    return [
        f"- Taxonomy: {competition.taxonomy}, {len(competition.class_keys)} classes.",
        f"- Confidence threshold T = {competition.confidence_threshold}: "
        + (
            "both top-1 probabilities ≥ T."
            if competition.threshold_rule == ThresholdRule.absolute
            else "each top-1 probability ≥ the T-quantile of its classifier's own top-1 probabilities."
        ),
        f"- k = {competition.k} images selected per classifier pair, at most {competition.max_per_label} per "
        "predicted label; the next ones kept in reserve.",
        f"- Panel of {competition.panel_size}: a question is decided once a majority of the panel agrees.",
        f"- Gold rate {competition.gold_rate}: the chance that an image handed out is a gold question.",
        f"- Smoothing α = {competition.smoothing}: a_ij = (correct_ij + α) / (n_ij + 2α).",
        "- Agreement: Krippendorff's α (nominal) over questions with two or more counted votes, gold left "
        + (f"out, = {alpha:.3f}." if alpha is not None else "out: undefined (too few such questions)."),
    ]


def dataset_card(
    *, competition: Competition, bundle: Path, rows: dict[str, int], license_id: str, alpha: float | None
) -> str:
    """The README.md of a release bundle whose tables are in `bundle`."""
    header = yaml.safe_dump(card_header(competition, rows, license_id), sort_keys=False, allow_unicode=True)
    tables = [
        f"- `{name}.parquet` ({count} rows): {TABLE_DESCRIPTIONS[name]}." for name, count in rows.items()
    ]
    sections = [
        f"---\n{header}---",
        f"# MAD competition: {competition.name}",
        competition.description
        or "Labels from a MAximum Discrepancy (MAD) competition (Wang et al., ICLR 2020) between "
        "image classifiers.",
        "## Provenance\n\n" + "\n".join(provenance_lines(bundle / "images.parquet")),
        "## Protocol\n\n" + "\n".join(protocol_lines(competition, alpha)),
        "## Tables\n\n" + "\n".join(tables),
        "## Annotators\n\nAnnotators are pseudonymised: `annotator` is the first 16 hex digits of "
        'HMAC-SHA256(the service\'s secret key, "competition id:account id"), the same in every release of '
        "this competition and unlinkable to accounts or other competitions without the key.",
        "## Rebuilding the leaderboard\n\nA pair's labels are its `selected` rows of `subsets.parquet` whose "
        "`outcome_a` and `outcome_b` are both known; with α from `leaderboard_summary.parquet` and the "
        "classifiers in the order of `leaderboard.parquet`, they give A, B and the Perron ranking of the "
        "classifiers with labelled images among themselves. A classifier without any has empty (null) ranks "
        "and scores, and a_ij, b_ij are empty where a pair has no labelled image.",
    ]
    return "\n\n".join(sections) + "\n"
