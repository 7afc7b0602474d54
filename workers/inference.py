"""Batched timm inference over competition images, producing dense prediction arrays per classifier.

Images are read and decoded in DataLoader worker processes (Pillow, EXIF orientation, RGB) and resized
and cropped once per distinct preprocessing geometry; classifiers that share it share the decoded uint8
batch and normalise it with their own mean/std on the device. On a GPU models run channels_last under
bf16 autocast (optionally torch.compile'd) with pinned, non-blocking copies; on CPU in fp32.
An image Pillow cannot decode gets a no-prediction row instead of failing the shard.
"""

import io
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import timm.data
import torch
from PIL import Image, ImageOps

from app.classifiers.prediction_store import TOP_K, Predictions

ReadBytes = Callable[[int], bytes]
"""The bytes of the image at an ordinal; a reader with a `many(ordinals)` method reads a batch in one go."""
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
    """One batch's top-k labels and probabilities and entropies, still on the device."""

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


def uint8_transform(data_config: dict) -> Callable[[Image.Image], torch.Tensor]:
    """timm's eval transform for `data_config` up to the uint8 CHW tensor (normalisation is on the device)."""
    return timm.data.create_transform(**data_config, is_training=False, use_prefetcher=True)


def decode_image(data: bytes) -> Image.Image | None:
    """An RGB Pillow image upright per its EXIF orientation, or None if Pillow cannot decode `data`."""
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
        ImageOps.exif_transpose(image, in_place=True)
        return image if image.mode == "RGB" else image.convert("RGB")
    except Exception:  # Pillow reports bad data as OSError, SyntaxError, ValueError, struct.error, ...
        return None


def prepare_model(
    model: torch.nn.Module, device: torch.device, *, compile_for_batch: int | None = None
) -> PreparedModel:
    """Move `model` to `device` (channels_last) in eval mode; compile it for a fixed batch size if asked."""
    config = timm.data.resolve_model_data_config(model)
    model = model.eval().to(device, memory_format=torch.channels_last)
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


class _ImageDataset(torch.utils.data.Dataset):
    """Images by position in `ordinals`: one uint8 tensor per geometry, and whether the image decoded."""

    def __init__(
        self,
        ordinals: Sequence[int],
        read_bytes: ReadBytes,
        transforms: list[Callable[[Image.Image], torch.Tensor]],
        input_sizes: list[tuple[int, int, int]],
    ) -> None:
        self.ordinals = ordinals
        self.read_bytes = read_bytes
        self.transforms = transforms
        self.input_sizes = input_sizes

    def __len__(self) -> int:
        return len(self.ordinals)

    def __getitem__(self, index: int) -> tuple[list[torch.Tensor], bool]:
        return self._decoded(self.read_bytes(self.ordinals[index]))

    def __getitems__(self, indices: list[int]) -> list[tuple[list[torch.Tensor], bool]]:
        """A batch: its bytes read together when the reader can (DataLoader calls this per batch)."""
        ordinals = [self.ordinals[index] for index in indices]
        many = getattr(self.read_bytes, "many", None)
        contents = many(ordinals) if many is not None else [self.read_bytes(o) for o in ordinals]
        return [self._decoded(data) for data in contents]

    def _decoded(self, data: bytes) -> tuple[list[torch.Tensor], bool]:
        """One tensor per geometry, and whether the image decoded (zeros when it did not)."""
        image = decode_image(data)
        if image is None:
            return [torch.zeros(size, dtype=torch.uint8) for size in self.input_sizes], False
        return [transform(image) for transform in self.transforms], True


class InferenceEngine:
    """Classifiers loaded on one device, predicting shards of images; same-geometry models share batches.

    `compile` applies torch.compile on a CUDA device only; on CPU it is ignored.
    """

    def __init__(
        self,
        models: Sequence[torch.nn.Module],
        *,
        device: str | torch.device = "cpu",
        batch_size: int = 64,
        num_workers: int | None = None,
        compile: bool = False,
    ) -> None:
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.num_workers = default_num_workers(self.device) if num_workers is None else num_workers
        if self.device.type == "cuda":
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
            prepare_model(
                model,
                self.device,
                compile_for_batch=batch_size if compile and self.device.type == "cuda" else None,
            )
            for model in models
        ]

    def predict(
        self, ordinals: Sequence[int], read_bytes: ReadBytes, progress: Progress | None = None
    ) -> list[Predictions]:
        """Predictions of every model for `ordinals` (row i = ordinals[i]), in the order models were given."""
        loader = self._loader(ordinals, read_bytes)
        outputs: list[list[BatchPredictions]] = [[] for _ in self.prepared]
        decoded: list[torch.Tensor] = []
        done = 0
        for batches, ok in loader:
            on_device = [batch.to(self.device, non_blocking=True) for batch in batches]
            for index, prepared in enumerate(self.prepared):
                outputs[index].append(classify(prepared, on_device[self.group_of_model[index]]))
            decoded.append(ok)
            done += len(ok)
            if progress is not None:
                progress(done, len(ordinals))
        ok_rows = torch.cat(decoded).numpy() if decoded else np.zeros(0, bool)
        return [_to_predictions(batch_outputs, ok_rows) for batch_outputs in outputs]

    def _loader(self, ordinals: Sequence[int], read_bytes: ReadBytes) -> torch.utils.data.DataLoader:
        """A DataLoader decoding `ordinals` in order, in worker processes."""
        dataset = _ImageDataset(ordinals, read_bytes, self.transforms, self.input_sizes)
        workers = min(self.num_workers, math.ceil(len(ordinals) / self.batch_size))
        return torch.utils.data.DataLoader(
            dataset,
            batch_size=self.batch_size,
            num_workers=workers,
            pin_memory=self.device.type == "cuda",
        )


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
