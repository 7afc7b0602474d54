"""The vote rules of paper Sec. 3.1, as pure functions of vote and flag counts."""

UNDO_LIMIT = 10
"""Only the ten most recent answers stay editable."""


def majority(panel_size: int) -> int:
    """Concordant votes that decide a question: a strict majority of the panel (3 of 5, paper Sec. 3.1)."""
    return panel_size // 2 + 1


def outcome(yes_votes: int, no_votes: int, panel_size: int) -> bool | None:
    """True or False once one answer has a strict majority of the panel and more votes than the other."""
    needed = majority(panel_size)
    if yes_votes >= needed and yes_votes > no_votes:
        return True
    if no_votes >= needed and no_votes > yes_votes:
        return False
    return None


def votes_still_needed(yes_votes: int, no_votes: int, panel_size: int) -> int:
    """The fewest further votes that could decide an open question (at least 1; ties need a tie-break)."""
    return max(1, majority(panel_size) - max(yes_votes, no_votes))


def too_difficult(flags: int, panel_size: int) -> bool:
    """More than 60% of the panel find the image too difficult: "more than three of five" (paper Sec. 3.1)."""
    return flags * 5 > panel_size * 3
