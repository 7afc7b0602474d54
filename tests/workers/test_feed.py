"""Loader processes: what a batch carries to the main process, and how shards follow each other."""

import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import timm
import torch

from tests.workers.conftest import FailingReader
from workers.decoding import decode_image, device_decodable
from workers.feed import BatchFeed, BatchLoader
from workers.inference import uint8_transform

WAIT_S = 30


@pytest.fixture(scope="module")
def loader(models) -> BatchLoader:
    """The loader of an engine on a CUDA device for two geometries: JPEGs left as bytes."""
    configs = [timm.data.resolve_model_data_config(model) for model in (models[0], models[2])]
    sizes = [tuple(config["input_size"]) for config in configs]
    return BatchLoader([uint8_transform(config) for config in configs], sizes, jpegs_to_device=True)


def test_a_batch_carries_the_jpegs_bytes_and_the_others_decoded_tensors_only(loader, images, read_bytes):
    ordinals = list(range(len(images.paths)))
    contents = [read_bytes(ordinal) for ordinal in ordinals]
    feed = BatchFeed(loader, processes=1)
    (batch,) = feed.batches(feed.submit(read_bytes, ordinals, batch_size=len(ordinals)))
    feed.close()

    jpegs = [row for row, data in enumerate(contents) if device_decodable(data)]
    others = [row for row in ordinals if row not in jpegs]
    assert batch.jpeg_rows.tolist() == jpegs and batch.decoded_rows.tolist() == others
    assert [jpeg.numpy().tobytes() for jpeg in batch.jpegs()] == [contents[row] for row in jpegs]
    assert batch.jpeg_bytes.is_shared() and all(tensor.is_shared() for tensor in batch.decoded)
    for tensor, transform in zip(batch.decoded, loader.transforms, strict=True):
        assert tensor.shape[0] == len(others)
        for index, row in enumerate(others):
            image = decode_image(contents[row])
            expected = torch.zeros_like(tensor[index]) if image is None else transform(image)
            assert torch.equal(tensor[index], expected)
    assert batch.ok.tolist() == [row not in images.undecodable for row in ordinals]
    jpeg_size = sum(len(contents[row]) for row in jpegs)
    decoded_size = sum(tensor.nbytes for tensor in batch.decoded)
    assert batch.nbytes() - decoded_size <= jpeg_size + 1024 * len(jpegs)


@dataclass(frozen=True)
class LoggingReader:
    """A read_bytes that leaves a file per ordinal read (the readers run in loader processes)."""

    read_bytes: Callable[[int], bytes]
    folder: Path

    def __call__(self, ordinal: int) -> bytes:
        (self.folder / f"{os.getpid()}-{ordinal}").touch()
        return self.read_bytes(ordinal)

    def read(self) -> dict[int, int]:
        """ordinal -> the process that read it."""
        return {int(path.name.split("-")[1]): int(path.name.split("-")[0]) for path in self.folder.iterdir()}


def wait_until(predicate: Callable[[], bool]) -> bool:
    """Whether `predicate` holds within WAIT_S (polled)."""
    deadline = time.monotonic() + WAIT_S
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_the_next_shard_is_read_while_the_current_one_is_still_being_consumed(loader, read_bytes, tmp_path):
    reader = LoggingReader(read_bytes, tmp_path)
    feed = BatchFeed(loader, processes=1)
    current = feed.submit(reader, [0, 1, 2, 3], batch_size=2)
    following = feed.submit(reader, [4, 5], batch_size=2)
    batches = feed.batches(current)
    next(batches)
    last = next(batches)  # the current shard's last batch, in the main process's hands
    assert last.size == 2
    assert wait_until(lambda: {4, 5} <= set(reader.read())), "the next shard waited for the current one"
    assert [batch.size for batch in feed.batches(following)] == [2]
    assert len(set(reader.read().values())) == 1 and os.getpid() not in reader.read().values()
    feed.close()


def test_a_failed_batch_raises_its_error_in_turn_and_the_shards_queued_behind_go_on(loader, read_bytes):
    feed = BatchFeed(loader, processes=2)
    failing = feed.submit(FailingReader(read_bytes, failing=3), list(range(8)), batch_size=2)
    following = feed.submit(read_bytes, [0, 1, 2], batch_size=2)
    batches = feed.batches(failing)
    assert next(batches).size == 2
    with pytest.raises(FileNotFoundError, match="image 3 is gone") as raised:
        next(batches)
    assert "in a loader process" in "".join(raised.value.__notes__)
    feed.cancel(failing)
    loaded = list(feed.batches(following))
    assert [batch.size for batch in loaded] == [2, 1] and all(batch.ok.all() for batch in loaded)
    assert not feed.broken
    feed.close()


def test_a_loader_process_that_dies_is_reported_and_the_feed_marked_broken(loader, read_bytes):
    feed = BatchFeed(loader, processes=1)
    os.kill(feed.workers[0].process.pid, signal.SIGKILL)
    feed.workers[0].process.join()
    shard = feed.submit(read_bytes, [0, 1], batch_size=2)
    with pytest.raises(RuntimeError, match="exited"):
        list(feed.batches(shard))
    assert feed.broken
    feed.close()


def test_without_processes_the_batches_are_loaded_here(loader, read_bytes):
    feed = BatchFeed(loader, processes=0)
    (batch,) = feed.batches(feed.submit(read_bytes, [0, 5], batch_size=2))
    assert batch.jpeg_rows.tolist() == [0] and batch.decoded_rows.tolist() == [1]
    assert not batch.jpeg_bytes.is_shared()
    np.testing.assert_array_equal(batch.ok, [True, True])
