"""Loader processes that read and decode a worker's batches ahead of its model, shard after shard.

A batch reaches the main process as a LoadedBatch holding only what the main process needs: the JPEGs left
to the device, one after another in one flat buffer with their offsets, and the tensors Pillow decoded for
the other images, each geometry's in one tensor. A loader process writes both once, straight into shared
memory, and the main process maps them (no placeholder rows, no copy on the way).

A BatchFeed keeps a few batches in flight per process, shard after shard in the order they were queued:
the next shard's first batches are read and decoded while the current shard's last ones are classified.
A shard's reader is sent to each process once, not with every batch.
"""

import multiprocessing
import os
import pickle
import queue
import signal
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from PIL import Image

from workers.decoding import decode_image, device_decodable

ReadBytes = Callable[[int], bytes | memoryview]
"""The bytes of the image at an ordinal; a reader with a `many(ordinals)` method reads a batch in one go."""
Load = Callable[[ReadBytes, Sequence[int]], Any]
"""What a loader process makes of a batch of ordinals, given the shard's reader."""
Transform = Callable[[Image.Image | torch.Tensor], torch.Tensor]
"""timm's eval transform up to the uint8 CHW tensor, of a Pillow image or a CHW tensor."""

DEPTH = 2
"""Batches in flight per loader process (DataLoader's prefetch_factor)."""
POLL_S = 1.0
"""How often a waiting process checks that the other side is still there."""


@dataclass
class LoadedBatch:
    """One batch as a loader process ships it: JPEGs left to the device in one flat buffer, the rest decoded
    here, each geometry's rows in one tensor (zeros where Pillow could not decode the image)."""

    size: int
    ok: np.ndarray
    """Per row: decoded here, or left to the device (which may still fail)."""
    jpeg_rows: np.ndarray
    jpeg_offsets: np.ndarray
    """Where each JPEG starts in jpeg_bytes, and where the last ends (len(jpeg_rows) + 1 values)."""
    jpeg_bytes: torch.Tensor
    decoded_rows: np.ndarray
    decoded: list[torch.Tensor]
    """Per geometry, uint8 (len(decoded_rows), C, H, W)."""

    def jpegs(self) -> list[torch.Tensor]:
        """Each JPEG as a view of the flat buffer."""
        bounds = self.jpeg_offsets.tolist()
        return [self.jpeg_bytes[start:end] for start, end in zip(bounds[:-1], bounds[1:], strict=True)]

    def nbytes(self) -> int:
        """Bytes of the arrays and tensors the batch carries."""
        arrays = (self.ok, self.jpeg_rows, self.jpeg_offsets, self.decoded_rows)
        tensors = (self.jpeg_bytes, *self.decoded)
        return sum(array.nbytes for array in arrays) + sum(tensor.nbytes for tensor in tensors)


def read_many(read_bytes: ReadBytes, ordinals: Sequence[int]) -> list[bytes | memoryview]:
    """A batch's bytes, read together when the reader can."""
    many = getattr(read_bytes, "many", None)
    return many(ordinals) if many is not None else [read_bytes(ordinal) for ordinal in ordinals]


class BatchLoader:
    """What a loader process makes of a batch: the bytes of the JPEGs the device decodes, the decoded,
    resized and cropped tensors of the others (timm's transforms, one per geometry)."""

    def __init__(
        self,
        transforms: list[Transform],
        input_sizes: list[tuple[int, int, int]],
        jpegs_to_device: bool,
    ) -> None:
        self.transforms = transforms
        self.input_sizes = input_sizes
        self.jpegs_to_device = jpegs_to_device
        self.shared = False
        """Whether tensors are made in shared memory (set in a loader process, which ships them)."""

    def __call__(self, read_bytes: ReadBytes, ordinals: Sequence[int]) -> LoadedBatch:
        contents = read_many(read_bytes, ordinals)
        to_device = [self.jpegs_to_device and device_decodable(data) for data in contents]
        jpeg_rows = np.flatnonzero(to_device)
        decoded_rows = np.flatnonzero(np.logical_not(to_device))
        offsets = np.zeros(len(jpeg_rows) + 1, dtype=np.int64)
        np.cumsum([len(contents[row]) for row in jpeg_rows], out=offsets[1:])
        jpeg_bytes = self._empty((int(offsets[-1]),))
        flat = jpeg_bytes.numpy()
        for row, start, end in zip(jpeg_rows, offsets[:-1], offsets[1:], strict=True):
            flat[start:end] = np.frombuffer(contents[row], dtype=np.uint8)
        ok = np.ones(len(contents), dtype=bool)
        decoded = [self._empty((len(decoded_rows), *size)) for size in self.input_sizes]
        for index, row in enumerate(decoded_rows):
            image = decode_image(contents[row])
            ok[row] = image is not None
            for tensor, transform in zip(decoded, self.transforms, strict=True):
                tensor[index] = 0 if image is None else transform(image)
        return LoadedBatch(len(contents), ok, jpeg_rows, offsets, jpeg_bytes, decoded_rows, decoded)

    def _empty(self, shape: tuple[int, ...]) -> torch.Tensor:
        """An uninitialised uint8 tensor, in shared memory when it is to be shipped (as DataLoader's
        collate does in its workers)."""
        count = int(np.prod(shape))
        if not self.shared or count == 0:
            return torch.empty(shape, dtype=torch.uint8)
        return torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(count)).view(shape)


@dataclass(eq=False, repr=False)
class FeedShard:
    """A shard queued on a feed: its reader and its batches of ordinals, consumed with `BatchFeed.batches`."""

    feed: "BatchFeed"
    number: int
    read_bytes: ReadBytes
    ordinals: Sequence[int]
    batches: list[Sequence[int]]
    reader_blob: bytes | None = None
    """The pickled reader, made once for all processes."""


@dataclass(eq=False)
class _LoaderProcess:
    """A loader process, its task queue, the shard whose reader it has and the batches it holds."""

    process: multiprocessing.process.BaseProcess
    tasks: Any
    reader_of: int = -1
    in_flight: int = 0


@dataclass
class LoadFailure:
    """An error raised in a loader process, with its traceback there."""

    error: BaseException
    trace: str = ""

    def raise_here(self) -> None:
        """Raise the error in the main process, noting where it came from."""
        self.error.add_note(f"in a loader process:\n{self.trace}")
        raise self.error


@dataclass(eq=False, repr=False)
class BatchFeed:
    """`processes` loader processes (none: load in this process) running `load` on the queued shards'
    batches, `DEPTH` batches each in flight, handed back in order."""

    load: Load
    processes: int
    shards_queued: int = 0
    pending: deque = field(default_factory=deque)
    """(shard, batch index) not yet sent to a process, in order."""
    owner: dict = field(default_factory=dict)
    """(shard number, batch index) -> the process it was sent to, until its result is received."""
    received: dict = field(default_factory=dict)
    cancelled: set = field(default_factory=set)
    broken: bool = False
    """A loader process is gone: this feed can serve nothing more."""

    def __post_init__(self) -> None:
        context = multiprocessing.get_context("fork")  # as DataLoader's default: the loader is not pickled
        self.results = context.Queue()
        self.workers = []
        for _ in range(self.processes):
            tasks = context.Queue()
            process = context.Process(
                target=_serve, args=(self.load, tasks, self.results, os.getpid()), daemon=True
            )
            process.start()
            self.workers.append(_LoaderProcess(process, tasks))
        self._finalizer = weakref.finalize(self, _shut_down, list(self.workers), self.results)

    def submit(self, read_bytes: ReadBytes, ordinals: Sequence[int], batch_size: int) -> FeedShard:
        """Queue a shard's batches behind those already queued; its reading starts as processes free up."""
        batches = [ordinals[start : start + batch_size] for start in range(0, len(ordinals), batch_size)]
        shard = FeedShard(self, self.shards_queued, read_bytes, ordinals, batches)
        self.shards_queued += 1
        if self.workers:
            self.pending.extend((shard, index) for index in range(len(batches)))
            self._dispatch()
        return shard

    def batches(self, shard: FeedShard) -> Iterator[Any]:
        """The shard's loaded batches in order; a batch's error is raised when its turn comes."""
        for index, ordinals in enumerate(shard.batches):
            if not self.workers:
                yield self.load(shard.read_bytes, ordinals)
                continue
            self._dispatch()
            result = self._result((shard.number, index))
            if isinstance(result, LoadFailure):
                result.raise_here()
            yield result

    def cancel(self, shard: FeedShard) -> None:
        """Drop a shard's batches: those not sent are not, those in flight are discarded on arrival."""
        self.cancelled.add(shard.number)
        self.pending = deque(item for item in self.pending if item[0] is not shard)
        self.received = {key: value for key, value in self.received.items() if key[0] != shard.number}

    def close(self) -> None:
        """Stop the loader processes."""
        self._finalizer()

    def _dispatch(self) -> None:
        """Send pending batches, in order, to the least busy processes with room for one more."""
        while self.pending and not self.broken:
            worker = min(self.workers, key=lambda candidate: candidate.in_flight)
            if worker.in_flight >= DEPTH:
                return
            shard, index = self.pending.popleft()
            if worker.reader_of != shard.number:
                shard.reader_blob = shard.reader_blob or pickle.dumps(shard.read_bytes)
                worker.tasks.put(("reader", shard.number, shard.reader_blob))
                worker.reader_of = shard.number
            worker.tasks.put(("batch", (shard.number, index), shard.batches[index]))
            worker.in_flight += 1
            self.owner[(shard.number, index)] = worker

    def _result(self, key: tuple[int, int]) -> Any:
        """The result of a batch sent to a process, receiving others (kept, or dropped if cancelled) on the
        way; RuntimeError if a process is gone."""
        while key not in self.received:
            try:
                got, result = self.results.get(timeout=POLL_S)
            except queue.Empty:
                self._check_alive()
                continue
            self.owner.pop(got).in_flight -= 1
            if got[0] not in self.cancelled:
                self.received[got] = result
            self._dispatch()
        return self.received.pop(key)

    def _check_alive(self) -> None:
        """RuntimeError (and the feed marked broken) if a loader process has exited."""
        for worker in self.workers:
            if not worker.process.is_alive():
                self.broken = True
                raise RuntimeError(
                    f"loader process {worker.process.pid} exited (code {worker.process.exitcode})"
                )


def _serve(load: Load, tasks: Any, results: Any, parent: int) -> None:
    """A loader process: run `load` on each batch sent, with the latest reader sent; exit when told, or
    when the main process is gone."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the main process's to handle
    torch.set_num_threads(1)
    if isinstance(load, BatchLoader):
        load.shared = True
    read_bytes: Any = None  # a batch comes after its shard's reader
    while True:
        try:
            task = tasks.get(timeout=POLL_S)
        except queue.Empty:
            if os.getppid() != parent:
                return
            continue
        if task is None:
            return
        kind, key, payload = task
        if kind == "reader":
            read_bytes = pickle.loads(payload)
            continue
        try:
            result = load(read_bytes, payload)
        except Exception as error:
            result = _failure(error)
        results.put((key, result))


def _failure(error: Exception) -> LoadFailure:
    """The error as it can be sent back: itself if it pickles, else a RuntimeError with its text."""
    trace = traceback.format_exc()
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:
        return LoadFailure(RuntimeError(f"{type(error).__name__}: {error}"), trace)
    return LoadFailure(error, trace)


def _shut_down(workers: list[_LoaderProcess], results: Any) -> None:
    """Tell each loader process to exit, wait a moment, end those that do not."""
    for worker in workers:
        if worker.process.is_alive():
            worker.tasks.put(None)
    for worker in workers:
        worker.process.join(timeout=5)
        if worker.process.is_alive():
            worker.process.terminate()
            worker.process.join()
        worker.tasks.cancel_join_thread()
        worker.tasks.close()
    results.cancel_join_thread()
    results.close()
