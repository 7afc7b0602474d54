"""The pure quality checks (app/labelling/quality_control/checks.py): runs and fast streaks, counted only
since the last flag of their kind."""

from app.labelling.quality_control import checks
from app.labelling.quality_control.checks import RecentVote


def votes(answers: list[bool], seconds: list[float | None], new: int | None = None) -> list[RecentVote]:
    """Votes newest first; the newest `new` of them came after the last flag (all when None)."""
    new = len(answers) if new is None else new
    return [
        RecentVote(answer, second, index < new, index < new)
        for index, (answer, second) in enumerate(zip(answers, seconds, strict=True))
    ]


def test_a_run_of_one_answer_is_flagged_once_it_is_long_enough():
    length = checks.RUN_LENGTH
    assert checks.long_run(votes([True] * (length - 1), [5.0] * (length - 1))) is None
    expected = f'{length} answers in a row were all "yes"'
    assert checks.long_run(votes([True] * length, [5.0] * length)) == expected
    broken = [False] + [True] * length
    assert checks.long_run(votes(broken, [5.0] * len(broken))) is None


def test_a_run_is_counted_again_only_after_its_last_flag():
    length = checks.RUN_LENGTH
    all_yes = [True] * (2 * length)
    assert checks.long_run(votes(all_yes, [5.0] * len(all_yes), new=length - 1)) is None
    assert checks.long_run(votes(all_yes, [5.0] * len(all_yes), new=length)) is not None


def test_a_fast_streak_against_the_annotators_own_median_is_flagged():
    streak, baseline = checks.FAST_STREAK, checks.FAST_BASELINE
    answers = [index % 2 == 0 for index in range(streak + baseline)]
    fast = [0.5] * streak + [4.0] * baseline
    assert checks.fast_streak(votes(answers, fast)) == (
        f"{streak} answers in a row took at most 0.5 s each; this annotator's median is 4.0 s"
    )
    one_slow = [0.5] * (streak - 1) + [2.0] + [4.0] * baseline
    assert checks.fast_streak(votes(answers, one_slow)) is None
    too_little_history = fast[: streak + baseline - 1]
    assert checks.fast_streak(votes(answers[:-1], too_little_history)) is None
    assert checks.fast_streak(votes(answers, fast, new=streak - 1)) is None


def test_untimed_answers_are_left_out_of_a_fast_streak():
    streak, baseline = checks.FAST_STREAK, checks.FAST_BASELINE
    answers = [index % 2 == 0 for index in range(streak + baseline + 1)]
    seconds: list[float | None] = [None] + [0.5] * streak + [4.0] * baseline
    assert checks.fast_streak(votes(answers, seconds)) is not None
