"""Snapshots: an admin freezes the current leaderboard; its stored numbers never change afterwards."""

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.competitions.models import Competition
from app.competitions.service import lock_competition
from app.errors import NotFound
from app.leaderboard.models import LeaderboardSnapshot
from app.leaderboard.schemas import LeaderboardRead, SnapshotRead, SnapshotWithLeaderboard
from app.leaderboard.standings import compute_leaderboard
from app.users.models import User


def freeze_leaderboard(
    *, db_session: Session, competition: Competition, note: str, user: User
) -> LeaderboardSnapshot:
    """Store the leaderboard as it is now under the slug <competition>-<n>, n counting its snapshots."""
    lock_competition(db_session=db_session, competition_id=competition.id)
    taken = db_session.execute(
        select(func.count())
        .select_from(LeaderboardSnapshot)
        .where(LeaderboardSnapshot.competition_id == competition.id)
    ).scalar_one()
    snapshot = LeaderboardSnapshot(
        competition_id=competition.id,
        slug=f"{competition.name}-{taken + 1}",
        note=note,
        created_by=user.username,
        leaderboard=compute_leaderboard(db_session=db_session, competition=competition).model_dump(
            mode="json"
        ),
    )
    db_session.add(snapshot)
    db_session.flush()
    return snapshot


def list_snapshots(*, db_session: Session, competition_id: int) -> list[LeaderboardSnapshot]:
    """A competition's snapshots, newest first."""
    return list(
        db_session.scalars(
            select(LeaderboardSnapshot)
            .where(LeaderboardSnapshot.competition_id == competition_id)
            .order_by(LeaderboardSnapshot.id.desc())
        )
    )


def get_snapshot(*, db_session: Session, slug: str) -> LeaderboardSnapshot:
    """The snapshot with this slug, or NotFound."""
    snapshot = db_session.scalar(select(LeaderboardSnapshot).where(LeaderboardSnapshot.slug == slug))
    if snapshot is None:
        raise NotFound(f"no leaderboard snapshot {slug!r}")
    return snapshot


def snapshot_read(snapshot: LeaderboardSnapshot) -> SnapshotRead:
    """The API view of a snapshot, with its permalinks."""
    return SnapshotRead(
        slug=snapshot.slug,
        competition_id=snapshot.competition_id,
        note=snapshot.note,
        created_at=snapshot.created_at,
        created_by=snapshot.created_by,
        url=f"/leaderboards/{snapshot.slug}",
        api_url=f"/api/v1/leaderboards/{snapshot.slug}",
    )


def snapshot_with_leaderboard(snapshot: LeaderboardSnapshot) -> SnapshotWithLeaderboard:
    """A snapshot with its stored leaderboard."""
    return SnapshotWithLeaderboard(
        **snapshot_read(snapshot).model_dump(),
        leaderboard=LeaderboardRead.model_validate(snapshot.leaderboard),
    )
