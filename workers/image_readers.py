"""How a worker's DataLoader processes get a shard's image bytes, a batch at a time, never one request per
image through the API:

- StoreReader reads the blobs where the service keeps them (a local directory, or object storage with
  this machine's own credentials), in parallel from object storage;
- ShardArchiveReader asks the service for one streamed tar of a batch's images
  (GET /api/v1/jobs/{id}/images.tar, fenced by the job's lease), for a worker that cannot reach the store;
  each DataLoader process fetches its own batches, so a loader with N processes has N archives in flight.

Both are picklable: each DataLoader process opens its own store or connections.
`choose_reader` picks the store when the claim's storage URL can be read from here, else the archives.
"""

import http.client
import tarfile
import urllib.parse
from collections.abc import Sequence

import numpy as np

from app.jobs.schemas import ImageRef
from app.storage import BlobStore, open_blob_store
from app.storage.keys import image_key
from workers.client import ServiceError, raise_for_error

ARCHIVE_TIMEOUT_S = 300.0
BLOCK = tarfile.BLOCKSIZE


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

    def __call__(self, ordinal: int) -> memoryview:
        """The original bytes of the image at this ordinal."""
        return self.many([ordinal])[0]

    def many(self, ordinals: Sequence[int]) -> list[memoryview]:
        """The bytes of consecutive ordinals: views of one archive, read into one buffer."""
        start, end = ordinals[0], ordinals[-1] + 1
        if list(ordinals) != list(range(start, end)):
            raise ValueError("an archive holds consecutive ordinals")
        query = urllib.parse.urlencode({"start": start, "end": end})
        url = f"{self.base_url}/api/v1/jobs/{self.job_id}/images.tar?{query}"
        body = read_body(url, {"Authorization": f"Bearer {self.token}", "X-Lease-Token": self.lease_token})
        return archive_members(body, [str(ordinal) for ordinal in ordinals])


def read_body(url: str, headers: dict[str, str]) -> memoryview | bytes:
    """The body of a GET with these headers (the credentials: in headers, they stay out of access logs) on
    a connection of its own, read straight into a buffer of its
    Content-Length (http.client: no copy between the socket and the buffer, unlike httpx's parser; and no
    proxy from the environment). LeaseLost, ServiceError or ServiceUnavailable when it is refused."""
    parts = urllib.parse.urlsplit(url)
    connect = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = connect(parts.netloc, timeout=ARCHIVE_TIMEOUT_S)
    try:
        connection.request("GET", f"{parts.path}?{parts.query}", headers=headers)
        response = connection.getresponse()
        if response.status != 200:
            raise_for_error(response.status, f"GET {parts.path}", response.read())
        length = response.getheader("Content-Length")
        if length is None:  # re-chunked on the way (a proxy)
            return response.read()
        body = np.empty(int(length), dtype=np.uint8).data  # not zeroed: filled whole or refused
        if (read := response.readinto(body)) != len(body):  # the service gave up (say, a blob is gone)
            raise ServiceError(f"GET {parts.path}: the body ended after {read:,} of {len(body):,} bytes")
        return body
    finally:
        connection.close()


def archive_members(body: memoryview | bytes, names: list[str]) -> list[memoryview]:
    """The contents of an archive's members, which must be regular files named `<name>.<ext>` in this order
    (ustar: a 512-byte header whose size is octal at 124..136, the bytes, zero padding to 512)."""
    view, offset, contents = memoryview(body), 0, []
    for name in names:
        header = bytes(view[offset : offset + BLOCK])
        if len(header) < BLOCK or header[257:262] != b"ustar" or header[156:157] not in (b"0", b"\0"):
            raise ValueError(f"the archive has no file member for {name} where expected")
        member = header[:100].rstrip(b"\0").decode("ascii", errors="replace")
        if member.split(".", 1)[0] != name:
            raise ValueError(f"the archive holds {member!r} where {name}.* belongs")
        size = int(header[124:136].rstrip(b"\0 ") or b"0", 8)
        contents.append(view[offset + BLOCK : offset + BLOCK + size])
        if len(contents[-1]) != size:
            raise ValueError(f"the archive ends inside {member!r}")
        offset += BLOCK + size + -size % BLOCK
    if len(view) < offset + 2 * BLOCK or any(view[offset:]):
        raise ValueError("the archive does not end after its last member")
    return contents


def choose_reader(
    storage_url: str, images: list[ImageRef], base_url: str, token: str, job_id: int, lease_token: str
) -> StoreReader | ShardArchiveReader:
    """The store itself when this machine can read it (a worker beside the service, or one with the
    object store's credentials), else the service's shard archives."""
    keys = {image.ordinal: image_key(image.sha256, image.format) for image in images}
    store = StoreReader(storage_url, keys)
    return store if store.readable() else ShardArchiveReader(base_url, token, job_id, lease_token)
