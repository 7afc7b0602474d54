"""How a worker's DataLoader processes get a shard's image bytes, a batch at a time, never one request per
image through the API:

- StoreReader reads the blobs where the service keeps them (a local directory, or object storage with
  this machine's own credentials), in parallel from object storage;
- ShardArchiveReader asks the service for one streamed tar of a batch's images
  (GET /api/v1/jobs/{id}/images.tar, fenced by the job's lease), for a worker that cannot reach the store.

Both are picklable: each DataLoader process opens its own store or HTTP client on first use.
`choose_reader` picks the store when the claim's storage URL can be read from here, else the archives.
"""

import io
import tarfile
from collections.abc import Sequence

import httpx

from app.jobs.schemas import ImageRef
from app.storage import BlobStore, open_blob_store
from app.storage.keys import image_key
from workers.client import _raise_for_status

ARCHIVE_TIMEOUT = httpx.Timeout(300.0, connect=10.0)


class StoreReader:
    """Image bytes by ordinal straight from the service's blob store."""

    def __init__(self, storage_url: str, key_by_ordinal: dict[int, str]) -> None:
        self.storage_url = storage_url
        self.key_by_ordinal = key_by_ordinal
        self._blobs: BlobStore | None = None

    def __getstate__(self) -> dict:
        """Pickle without the open store."""
        return {**self.__dict__, "_blobs": None}

    def _store(self) -> BlobStore:
        """The store, opened once per process."""
        if self._blobs is None:
            self._blobs = open_blob_store(self.storage_url)
        return self._blobs

    def __call__(self, ordinal: int) -> bytes:
        """The original bytes of the image at this ordinal."""
        return self._store().get(self.key_by_ordinal[ordinal])

    def many(self, ordinals: Sequence[int]) -> list[bytes]:
        """The bytes of several images, fetched together (concurrently from object storage)."""
        return self._store().get_many([self.key_by_ordinal[ordinal] for ordinal in ordinals])

    def readable(self) -> bool:
        """Whether this machine can read the store: its first image is there."""
        try:
            return self._store().exists(next(iter(self.key_by_ordinal.values())))
        except (OSError, ValueError, StopIteration):
            return False


class ShardArchiveReader:
    """Image bytes by ordinal from the service, one tar archive per batch of consecutive ordinals."""

    def __init__(self, base_url: str, token: str, job_id: int, lease_token: str) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.job_id = job_id
        self.lease_token = lease_token
        self._http: httpx.Client | None = None

    def __getstate__(self) -> dict:
        """Pickle without the open client."""
        return {**self.__dict__, "_http": None}

    def _client(self) -> httpx.Client:
        """The HTTP client, opened once per process."""
        if self._http is None:
            self._http = httpx.Client(
                base_url=self.base_url,
                headers={"Authorization": f"Bearer {self.token}"},
                timeout=ARCHIVE_TIMEOUT,
            )
        return self._http

    def __call__(self, ordinal: int) -> bytes:
        """The original bytes of the image at this ordinal."""
        return self.many([ordinal])[0]

    def many(self, ordinals: Sequence[int]) -> list[bytes]:
        """The bytes of consecutive ordinals, from one archive: tarfile reads its headers, and each image is
        a slice of the body (no copy through tarfile's file objects)."""
        start, end = ordinals[0], ordinals[-1] + 1
        if list(ordinals) != list(range(start, end)):
            raise ValueError("an archive holds consecutive ordinals")
        params = {"lease_token": self.lease_token, "start": start, "end": end}
        body = _raise_for_status(self._client().get(f"/api/v1/jobs/{self.job_id}/images.tar", params=params))
        content = body.content
        with tarfile.open(fileobj=io.BytesIO(content), mode="r:") as archive:
            members = [member for member in archive.getmembers() if member.isfile()]
        if [member.name.split(".", 1)[0] for member in members] != [str(ordinal) for ordinal in ordinals]:
            raise ValueError(f"the archive of ordinals {start}..{end} does not hold them in order")
        return [content[member.offset_data : member.offset_data + member.size] for member in members]


def choose_reader(
    storage_url: str, images: list[ImageRef], base_url: str, token: str, job_id: int, lease_token: str
) -> StoreReader | ShardArchiveReader:
    """The store itself when this machine can read it (a worker beside the service, or one with the
    object store's credentials), else the service's shard archives."""
    keys = {image.ordinal: image_key(image.sha256, image.format) for image in images}
    store = StoreReader(storage_url, keys)
    return store if store.readable() else ShardArchiveReader(base_url, token, job_id, lease_token)
