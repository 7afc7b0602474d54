"""Who may see an image and where it was read. Images are stored once by SHA-256 and may belong to several
competitions: a caller may see an image that belongs to at least one competition they may see
(competitions.members.may_see), and it is public when one of them is open to all."""

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.competitions.members import may_see
from app.competitions.models import Competition
from app.errors import NotFound
from app.images.models import CompetitionImage, Image
from app.users.models import Role, User


def visible_image(*, db_session: Session, sha256: str, user: User | None) -> tuple[Image, bool]:
    """The image with this hash and whether it is public; NotFound when there is none or when the caller
    may see none of its competitions (the same answer, so a hash tells nothing of a closed corpus)."""
    image = db_session.scalar(select(Image).where(Image.sha256 == sha256))
    if image is None:
        raise NotFound(f"no image with hash {sha256}")
    competitions = list(
        db_session.scalars(
            select(Competition)
            .join(CompetitionImage, CompetitionImage.competition_id == Competition.id)
            .where(CompetitionImage.image_id == image.id)
        )
    )
    if any(not competition.members_only for competition in competitions):
        return image, True
    if user is not None and (
        user.role == Role.admin
        or any(may_see(db_session=db_session, competition=c, user=user) for c in competitions)
    ):
        return image, False
    raise NotFound(f"no image with hash {sha256}")


def shown_source_uri(source_uri: str | None, *, admin: bool) -> str | None:
    """Where an image was read, as a caller may see it: all of it for an admin, only an http(s) URL (kept
    without credentials at import) for anyone else, never a server's path, archive member or bucket key."""
    if admin or source_uri is None or source_uri.startswith(("http://", "https://")):
        return source_uri
    return None
