"""Response bodies for images and import reports."""

from pydantic import BaseModel, ConfigDict, Field

from app.images.service import ImportReport


class ImageRead(BaseModel):
    """An image of a competition with its ordinal and the URLs it is served at."""

    model_config = ConfigDict(from_attributes=True)

    ordinal: int
    sha256: str
    format: str
    width: int
    height: int
    bytes: int
    original_name: str
    source_uri: str | None = Field(
        description="Where the import read the file: a path, archive member, s3:// key or URL for admins; "
        "only a URL (without credentials or signatures) for anyone else."
    )
    source_url: str | None = Field(description="The page it came from, from an import manifest.")
    license: str | None
    author: str | None
    excluded: bool
    url: str
    thumbnail_url: str


class ImageExclusion(BaseModel):
    """Why an admin keeps an image out of the competition."""

    reason: str = Field(min_length=1, max_length=255, examples=["not a natural photo"])


class ImportedFile(BaseModel):
    """A file name and what happened to it."""

    name: str
    detail: str


class ImportReportRead(BaseModel):
    """Per-file outcome of an import: added (with hash), duplicates (stored once), rejected (with reason),
    skipped (imported by an earlier run) and near-duplicates (pHashes within 4 of 64 bits)."""

    added: list[ImportedFile]
    duplicates: list[ImportedFile]
    rejected: list[ImportedFile]
    skipped: list[ImportedFile]
    near_duplicates: list[ImportedFile]

    @classmethod
    def from_report(cls, report: ImportReport) -> "ImportReportRead":
        """Convert the service's report."""
        return cls(
            added=[ImportedFile(name=name, detail=sha256) for name, sha256 in report.added],
            duplicates=[ImportedFile(name=name, detail=detail) for name, detail in report.duplicates],
            rejected=[ImportedFile(name=name, detail=reason) for name, reason in report.rejected],
            skipped=[ImportedFile(name=name, detail=detail) for name, detail in report.skipped],
            near_duplicates=[
                ImportedFile(name=name, detail=detail) for name, detail in report.near_duplicates
            ],
        )
