"""The leaderboard as three flat tables (the CSV tables of the API and the release bundle's tables): one row
per compared classifier (ranked or not), A, B and n in long form, and one summary row."""

from typing import Literal

from app.leaderboard.schemas import ClassifierStanding, LeaderboardRead

LeaderboardTable = Literal["classifiers", "pairs", "summary"]
SUMMARY_COLUMNS = (
    "competition_id",
    "competition_name",
    "smoothing",
    "classifiers",
    "lambda_max",
    "consistency_index",
    "srcc",
    "krcc",
    "correlated_classifiers",
    "case_i",
    "case_ii",
    "case_iii",
    "labelled_pair_images",
    "bootstrap_resamples",
    "bootstrap_level",
    "bootstrap_seed",
)
PAIR_COLUMNS = (
    *("classifier_i_id", "classifier_i", "classifier_j_id", "classifier_j"),
    *("a_ij", "b_ij", "n_ij", "selected_ij", "below_threshold_ij"),
)


def classifier_rows(leaderboard: LeaderboardRead) -> list[dict]:
    """One row per compared classifier (registration order) with every standing field."""
    return [standing.model_dump(mode="json") for standing in leaderboard.classifiers]


def pair_rows(leaderboard: LeaderboardRead) -> list[dict]:
    """A, B, n, the images selected and those of them below T in long form: one row per (i, j) of the
    compared classifiers, diagonal included, in row-major order of classifier_ids (the last two empty in
    snapshots frozen before they were recorded)."""
    matrices = leaderboard.matrices
    selected, below = matrices.selected or None, matrices.below_threshold or None
    names = {standing.classifier_id: standing.name for standing in leaderboard.classifiers}
    return [
        dict(
            zip(
                PAIR_COLUMNS,
                (
                    id_i,
                    names[id_i],
                    id_j,
                    names[id_j],
                    matrices.accuracy[i][j],
                    matrices.dominance[i][j],
                    matrices.labelled[i][j],
                    None if selected is None else selected[i][j],
                    None if below is None else below[i][j],
                ),
                strict=True,
            )
        )
        for i, id_i in enumerate(matrices.classifier_ids)
        for j, id_j in enumerate(matrices.classifier_ids)
    ]


def summary_rows(leaderboard: LeaderboardRead) -> list[dict]:
    """One row: λmax, consistency index, SRCC, KRCC, case shares and how the numbers were made."""
    shares, bootstrap = leaderboard.case_shares, leaderboard.bootstrap
    values = (
        leaderboard.competition_id,
        leaderboard.competition_name,
        leaderboard.smoothing,
        len(leaderboard.classifiers),
        leaderboard.lambda_max,
        leaderboard.consistency_index,
        leaderboard.srcc,
        leaderboard.krcc,
        leaderboard.correlated_classifiers,
        shares.case_i,
        shares.case_ii,
        shares.case_iii,
        shares.images,
        bootstrap.n_resamples,
        bootstrap.level,
        bootstrap.seed,
    )
    return [dict(zip(SUMMARY_COLUMNS, values, strict=True))]


LEADERBOARD_TABLES = {
    "classifiers": (tuple(ClassifierStanding.model_fields), classifier_rows),
    "pairs": (PAIR_COLUMNS, pair_rows),
    "summary": (SUMMARY_COLUMNS, summary_rows),
}
