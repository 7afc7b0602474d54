"""A blob as an HTTP response, from either backend (the one part of app.storage that needs Starlette).

A local blob is sent as a file (sendfile where the server can); an object-store blob is streamed from the
store through the service rather than redirected to a presigned URL, so a browser or worker that can reach
only the service (the store on a private network, a page's same-origin image policy, no internet) still
gets it, and the service's cache headers hold whatever the store's URL.
"""

from fastapi.responses import FileResponse, StreamingResponse

from app.errors import NotFound
from app.storage.blobs import BlobNotFound, BlobStore


def blob_response(
    blobs: BlobStore, key: str, *, media_type: str, headers: dict[str, str], filename: str | None = None
) -> FileResponse | StreamingResponse:
    """The blob under key; NotFound when the store has lost it."""
    path = blobs.local_path(key)
    if path is not None:
        if not path.is_file():
            raise NotFound(f"the stored file {key} is missing")
        return FileResponse(path, media_type=media_type, headers=headers, filename=filename)
    chunks = blobs.iter_chunks(key)
    try:
        first = next(chunks, b"")  # a missing blob fails here, before the response starts
    except BlobNotFound:
        raise NotFound(f"the stored file {key} is missing") from None
    disposition = {"Content-Disposition": f'attachment; filename="{filename}"'} if filename else {}

    def body():
        yield first
        yield from chunks

    return StreamingResponse(body(), media_type=media_type, headers=headers | disposition)
