"""Batched timm inference over competition images, producing dense prediction arrays per classifier.

Images are read and decoded in loader processes (workers/feed.py: Pillow, EXIF orientation, RGB) and resized
and cropped once per distinct preprocessing geometry; on a CUDA device, the loader processes ship complete,
upright, baseline JPEGs as bytes and the GPU decodes them (nvJPEG through torchvision.io.decode_jpeg) and
resizes and crops them with the same timm transforms, on tensors, one call per group of equal sizes;
classifiers that share a geometry share the decoded uint8 batch and normalise it with their own mean/std on
the device. On a GPU the next batch is decoded, uploaded (through a reused pinned buffer) and transformed on
a stream of its own while the model runs the current one on the default stream; models run channels_last
under bf16 autocast (optionally torch.compile'd), and their outputs come back to the host without a sync
until a shard's predictions are asked for. On CPU in fp32. An image that decodes nowhere gets a
no-prediction row instead of failing the shard.
"""

import contextlib
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import timm.data
import torch

from app.classifiers.prediction_store import TOP_K, Predictions
from workers.decoding import decode_jpegs
from workers.feed import BatchFeed, BatchLoader, FeedShard, LoadedBatch, ReadBytes, Transform

Progress = Callable[[int, int], None]

LOG2 = math.log(2.0)


@dataclass(frozen=True, eq=False)
class PreparedModel:
    """A classifier on its device with its input normalisation, ready for `classify`."""

    forward: Callable[[torch.Tensor], torch.Tensor]
    mean: torch.Tensor
    std: torch.Tensor
    autocast_dtype: torch.dtype | None
    pad_to_batch: int | None


@dataclass(frozen=True, eq=False)
class BatchPredictions:
    """One batch's top-k labels and probabilities and entropies."""

    top5: torch.Tensor
    top5_prob: torch.Tensor
    entropy_bits: torch.Tensor


def available_cpus() -> int:
    """CPU cores this process may run on."""
    return len(os.sched_getaffinity(0))


def default_num_workers(device: torch.device) -> int:
    """Decoding processes: all cores but one beside a GPU; on CPU a quarter (the rest run the model)."""
    if device.type == "cuda":
        return max(1, available_cpus() - 1)
    return max(1, available_cpus() // 4)


def geometry_key(data_config: dict) -> tuple:
    """What decides a model's resized, cropped uint8 input: its data config without normalisation.

    The mean stays in the key for crop_mode 'border', where it is the padding colour.
    """
    return tuple(
        (name, value)
        for name, value in sorted(data_config.items())
        if name != "std" and (name != "mean" or data_config.get("crop_mode") == "border")
    )


def uint8_transform(data_config: dict) -> Transform:
    """timm's eval transform for `data_config` up to the uint8 CHW tensor (normalisation is on the device)."""
    return timm.data.create_transform(**data_config, is_training=False, use_prefetcher=True)


def prepare_model(
    model: torch.nn.Module, device: torch.device, *, compile_for_batch: int | None = None
) -> PreparedModel:
    """Move `model` to `device` (channels_last) in eval mode; compile it for a fixed batch size if asked."""
    config = timm.data.resolve_model_data_config(model)
    model = model.eval().to(device).to(memory_format=torch.channels_last)
    forward = torch.compile(model, dynamic=False) if compile_for_batch else model
    return PreparedModel(
        forward=forward,
        mean=torch.tensor(config["mean"], device=device).view(1, -1, 1, 1),
        std=torch.tensor(config["std"], device=device).view(1, -1, 1, 1),
        autocast_dtype=torch.bfloat16 if device.type == "cuda" else None,
        pad_to_batch=compile_for_batch,
    )


@torch.inference_mode()
def classify(prepared: PreparedModel, images: torch.Tensor) -> BatchPredictions:
    """Top-5 labels, their softmax probabilities and the softmax entropy in bits for a uint8 NCHW batch.

    Input is normalised as timm does it: (x / 255 - mean) / std. Entropy = -sum p log2 p.
    """
    n = len(images)
    if prepared.pad_to_batch and n < prepared.pad_to_batch:  # a compiled graph keeps one batch shape
        images = torch.cat([images, images.new_zeros((prepared.pad_to_batch - n, *images.shape[1:]))])
    x = images.float().div_(255).sub_(prepared.mean).div_(prepared.std)
    x = x.contiguous(memory_format=torch.channels_last)
    with torch.autocast(
        x.device.type, dtype=prepared.autocast_dtype, enabled=prepared.autocast_dtype is not None
    ):
        logits = prepared.forward(x)[:n]
    probabilities = logits.float().softmax(dim=1)
    top = probabilities.topk(min(TOP_K, probabilities.shape[1]), dim=1)
    entropy_bits = torch.special.entr(probabilities).sum(dim=1) / LOG2
    return BatchPredictions(top5=top.indices, top5_prob=top.values, entropy_bits=entropy_bits)


def to_host(batch: BatchPredictions) -> BatchPredictions:
    """The batch's outputs copied to host memory behind the work queued on the device (pinned, without
    waiting for it: read them only after the copy's event)."""
    return BatchPredictions(
        *(tensor.to("cpu", non_blocking=True) for tensor in (batch.top5, batch.top5_prob, batch.entropy_bits))
    )


@dataclass(eq=False)
class ShardOutputs:
    """A shard's outputs per model as the device produces them; `predictions()` waits for the last copy."""

    batches: list[list[BatchPredictions]]
    decoded: list[np.ndarray] = field(default_factory=list)
    copied: torch.cuda.Event | None = None

    def predictions(self) -> list[Predictions]:
        """Dense arrays per model (row i = the shard's i-th ordinal)."""
        if self.copied is not None:
            self.copied.synchronize()
        ok_rows = np.concatenate(self.decoded) if self.decoded else np.zeros(0, bool)
        return [_to_predictions(batch_outputs, ok_rows) for batch_outputs in self.batches]


class InferenceEngine:
    """Classifiers loaded on one device, predicting shards of images; same-geometry models share batches.

    `compile` applies torch.compile on a CUDA device only; on CPU it is ignored. JPEGs are left to the
    device to decode on CUDA; `jpegs_to_device=True` does it on the CPU too (torchvision's libjpeg decoder),
    which runs the GPU's path where there is none.
    """

    def __init__(
        self,
        models: Sequence[torch.nn.Module],
        *,
        device: str | torch.device = "cpu",
        batch_size: int = 64,
        num_workers: int | None = None,
        compile: bool = False,
        jpegs_to_device: bool | None = None,
    ) -> None:
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.num_workers = default_num_workers(self.device) if num_workers is None else num_workers
        on_cuda = self.device.type == "cuda"
        if on_cuda:
            torch.backends.cudnn.benchmark = True  # fixed input shapes: let cuDNN pick the fastest kernels
        configs = [timm.data.resolve_model_data_config(model) for model in models]
        config_by_geometry: dict[tuple, dict] = {}
        for config in configs:
            config_by_geometry.setdefault(geometry_key(config), config)
        geometries = list(config_by_geometry)
        self.transforms = [uint8_transform(config) for config in config_by_geometry.values()]
        self.input_sizes = [tuple(config["input_size"]) for config in config_by_geometry.values()]
        self.group_of_model = [geometries.index(geometry_key(config)) for config in configs]
        self.prepared = [
            prepare_model(model, self.device, compile_for_batch=batch_size if compile and on_cuda else None)
            for model in models
        ]
        self.loader = BatchLoader(
            self.transforms, self.input_sizes, on_cuda if jpegs_to_device is None else jpegs_to_device
        )
        self.feed: BatchFeed | None = None
        self.stream = torch.cuda.Stream(self.device) if on_cuda else None
        """Where batches are uploaded, decoded and transformed, beside the models' default stream."""
        self.staging: torch.Tensor | None = None
        self.staging_free: torch.cuda.Event | None = None

    def submit(self, ordinals: Sequence[int], read_bytes: ReadBytes) -> FeedShard:
        """Queue a shard behind those queued: its loader processes start reading it as they free up."""
        return self._feed().submit(read_bytes, ordinals, self.batch_size)

    def run(self, shard: FeedShard, progress: Progress | None = None) -> ShardOutputs:
        """Every model over a submitted shard, batch by batch; on a GPU it returns once the work is queued."""
        feed = self._feed()
        if shard.feed is not feed:  # queued on a feed since closed: queue it again
            shard = feed.submit(shard.read_bytes, shard.ordinals, self.batch_size)
        outputs = ShardOutputs([[] for _ in self.prepared])
        done = 0
        try:
            for loaded in feed.batches(shard):
                batches, decoded = self._on_device(loaded)
                for index, prepared in enumerate(self.prepared):
                    batch = batches[self.group_of_model[index]]
                    outputs.batches[index].append(to_host(classify(prepared, batch)))
                outputs.decoded.append(decoded)
                done += loaded.size
                if progress is not None:
                    progress(done, len(shard.ordinals))
        except BaseException:
            feed.cancel(shard)  # the processes stay, and so do the batches of shards queued behind
            raise
        if self.stream is not None:
            outputs.copied = torch.cuda.Event()
            outputs.copied.record(torch.cuda.current_stream(self.device))
        return outputs

    def cancel(self, shard: FeedShard) -> None:
        """Let go of a submitted shard that will not run."""
        shard.feed.cancel(shard)

    def predict(
        self, ordinals: Sequence[int], read_bytes: ReadBytes, progress: Progress | None = None
    ) -> list[Predictions]:
        """Predictions of every model for `ordinals` (row i = ordinals[i]), in the order models were given."""
        return self.run(self.submit(ordinals, read_bytes), progress).predictions()

    def _feed(self) -> BatchFeed:
        """The engine's loader processes, kept from shard to shard (started again if one died)."""
        if self.feed is None or self.feed.broken:
            if self.feed is not None:
                self.feed.close()
            self.feed = BatchFeed(self.loader, self.num_workers)
        return self.feed

    def _on_device(self, loaded: LoadedBatch) -> tuple[list[torch.Tensor], np.ndarray]:
        """Each geometry's uint8 batch on the device, and which rows decoded: the loader's tensors as they
        are when they are the whole batch on the CPU; else uploaded, JPEGs decoded and transformed there,
        undecodable rows zeros. On a GPU on the engine's stream, which the models' stream then waits for."""
        decoded = loaded.ok.copy()
        if self.device.type == "cpu" and len(loaded.decoded_rows) == loaded.size:
            return loaded.decoded, decoded
        with torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext():
            batches = [
                torch.empty((loaded.size, *size), dtype=torch.uint8, device=self.device)
                for size in self.input_sizes
            ]
            if len(loaded.decoded_rows):
                rows = torch.from_numpy(loaded.decoded_rows).to(self.device)
                for batch, tensor in zip(batches, self._upload(loaded.decoded), strict=True):
                    batch.index_copy_(0, rows, tensor)
            if len(loaded.jpeg_rows):
                self._decode_jpegs(loaded, batches, decoded)
        if self.stream is not None:
            models_stream = torch.cuda.current_stream(self.device)
            models_stream.wait_stream(self.stream)
            for batch in batches:
                batch.record_stream(models_stream)  # freed only once the models have read it
        return batches, decoded

    def _upload(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        """The tensors on the device; on a GPU through one pinned staging buffer, kept and reused (grown
        when a batch needs more), copied without blocking."""
        if self.stream is None:
            return [tensor.to(self.device) for tensor in tensors]
        total = sum(tensor.numel() for tensor in tensors)
        if self.staging is None or self.staging.numel() < total:
            self.staging = torch.empty(total, dtype=torch.uint8, pin_memory=True)
        elif self.staging_free is not None:
            self.staging_free.synchronize()  # the previous batch's copies have left it
        uploaded, offset = [], 0
        for tensor in tensors:
            staged = self.staging[offset : offset + tensor.numel()].view(tensor.shape)
            staged.copy_(tensor)
            uploaded.append(staged.to(self.device, non_blocking=True))
            offset += tensor.numel()
        self.staging_free = torch.cuda.Event()
        self.staging_free.record(self.stream)
        return uploaded

    def _decode_jpegs(self, loaded: LoadedBatch, batches: list[torch.Tensor], decoded: np.ndarray) -> None:
        """Decode the batch's JPEGs on the device (nvJPEG, one call), then resize and crop each group of
        equal sizes in one call per geometry (timm's transforms work on batched tensors) into their rows; a
        JPEG that does not decode gets zeros and is marked undecoded."""
        groups: dict[tuple[int, ...], list[tuple[int, torch.Tensor]]] = {}
        for row, image in zip(
            loaded.jpeg_rows.tolist(), decode_jpegs(loaded.jpegs(), self.device), strict=True
        ):
            if image is None:
                decoded[row] = False
                for batch in batches:
                    batch[row] = 0
            else:
                groups.setdefault(tuple(image.shape), []).append((row, image))
        for members in groups.values():
            rows = torch.tensor([row for row, _ in members], device=self.device)
            images = torch.stack([image for _, image in members])
            for batch, transform in zip(batches, self.transforms, strict=True):
                batch.index_copy_(0, rows, transform(images))


def _to_predictions(batches: list[BatchPredictions], ok_rows: np.ndarray) -> Predictions:
    """Dense arrays from one model's batch outputs; rows whose image did not decode get no prediction."""
    predictions = Predictions.empty(len(ok_rows))
    if not batches:
        return predictions
    top5 = torch.cat([batch.top5 for batch in batches]).cpu().numpy()
    top5_prob = torch.cat([batch.top5_prob for batch in batches]).cpu().numpy()
    entropy_bits = torch.cat([batch.entropy_bits for batch in batches]).cpu().numpy()
    k = top5.shape[1]
    predictions.top5[ok_rows, :k] = top5[ok_rows]
    predictions.top5_prob[ok_rows, :k] = top5_prob[ok_rows]
    predictions.entropy_bits[ok_rows] = entropy_bits[ok_rows]
    predictions.top1[ok_rows] = top5[ok_rows, 0]
    predictions.prob[ok_rows] = top5_prob[ok_rows, 0]
    return predictions
