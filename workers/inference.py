"""Batched timm inference over competition images, producing dense prediction arrays per classifier.

Images are read and decoded in DataLoader worker processes (Pillow, EXIF orientation, RGB) and resized
and cropped once per distinct preprocessing geometry; on a CUDA device, the loader processes leave complete
upright RGB JPEGs undecoded and the GPU decodes them (nvJPEG through torchvision.io.decode_jpeg) and resizes
and crops them with the same timm transforms, on tensors; classifiers that share it share the decoded uint8
batch and normalise it with their own mean/std on the device. On a GPU models run channels_last under
bf16 autocast (optionally torch.compile'd) with pinned, non-blocking copies; on CPU in fp32.
An image Pillow cannot decode gets a no-prediction row instead of failing the shard.
"""

import io
import math
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import timm.data
import torch
import torchvision.io
from PIL import Image, ImageOps

from app.classifiers.prediction_store import TOP_K, Predictions

ReadBytes = Callable[[int], bytes | memoryview]
"""The bytes of the image at an ordinal; a reader with a `many(ordinals)` method reads a batch in one go."""
Sample = tuple[list[torch.Tensor], bool, torch.Tensor | None]
"""One image from a loader process: a tensor per geometry, whether it decoded, and its JPEG bytes when the
device is left to decode it (then the tensors are placeholders)."""
Progress = Callable[[int, int], None]

LOG2 = math.log(2.0)
EXIF_ORIENTATION = 0x0112


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


def uint8_transform(data_config: dict) -> Callable[[Image.Image | torch.Tensor], torch.Tensor]:
    """timm's eval transform for `data_config` up to the uint8 CHW tensor (normalisation is on the device)."""
    return timm.data.create_transform(**data_config, is_training=False, use_prefetcher=True)


def decode_image(data: bytes | memoryview) -> Image.Image | None:
    """An RGB Pillow image upright per its EXIF orientation, or None if Pillow cannot decode `data`."""
    try:
        image = Image.open(io.BytesIO(data))
        image.load()
        ImageOps.exif_transpose(image, in_place=True)
        return image if image.mode == "RGB" else image.convert("RGB")
    except Exception:  # Pillow reports bad data as OSError, SyntaxError, ValueError, struct.error, ...
        return None


def gpu_decodable(data: bytes | memoryview) -> bool:
    """Whether nvJPEG can take the image as it is: a complete JPEG (SOI ... EOI) in RGB with no EXIF rotation
    (which nvJPEG does not apply); Pillow reads only its header."""
    if bytes(data[:3]) != b"\xff\xd8\xff" or bytes(data[-2:]) != b"\xff\xd9":
        return False
    try:
        with Image.open(io.BytesIO(data)) as image:
            return image.mode == "RGB" and image.getexif().get(EXIF_ORIENTATION, 1) == 1
    except Exception:  # as in decode_image: Pillow's many errors for bad data
        return False


def decode_jpegs(jpegs: list[torch.Tensor], device: torch.device) -> list[torch.Tensor | None]:
    """RGB uint8 CHW images on `device`: nvJPEG for the batch, else one at a time, else Pillow; None for an
    image none of them decodes."""
    with warnings.catch_warnings():  # torchvision 0.29 deprecates its codecs for torchcodec's
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            return torchvision.io.decode_jpeg(jpegs, mode=torchvision.io.ImageReadMode.RGB, device=device)
        except RuntimeError:
            return [_decode_one(jpeg, device) for jpeg in jpegs]


def _decode_one(jpeg: torch.Tensor, device: torch.device) -> torch.Tensor | None:
    """One JPEG decoded by nvJPEG, or by Pillow when nvJPEG refuses it."""
    try:
        return torchvision.io.decode_jpeg(jpeg, mode=torchvision.io.ImageReadMode.RGB, device=device)
    except RuntimeError:
        image = decode_image(jpeg.numpy().tobytes())
        return None if image is None else torch.from_numpy(np.asarray(image)).permute(2, 0, 1).to(device)


def collate(samples: list[Sample]) -> tuple[list[torch.Tensor], torch.Tensor, list[tuple[int, torch.Tensor]]]:
    """A batch: a uint8 NCHW tensor per geometry, whether each image decoded, (row, JPEG) for the device."""
    tensors, ok, jpegs = zip(*samples, strict=True)
    batches = [torch.stack(group) for group in zip(*tensors, strict=True)]
    return batches, torch.tensor(ok), [(row, jpeg) for row, jpeg in enumerate(jpegs) if jpeg is not None]


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


class ShardBatches:
    """The batch sampler of an engine's one long-lived DataLoader: the current shard's batches, each as
    (read_bytes, ordinals), so that the same loader processes serve shard after shard (starting them costs
    a fork of this process each, ~0.1 s, and a shard of 4,096 images takes about a second)."""

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self.read_bytes: ReadBytes | None = None
        self.ordinals: Sequence[int] = ()

    def __iter__(self) -> Iterator[tuple[ReadBytes | None, Sequence[int]]]:
        for start in range(0, len(self.ordinals), self.batch_size):
            yield self.read_bytes, self.ordinals[start : start + self.batch_size]

    def __len__(self) -> int:
        return math.ceil(len(self.ordinals) / self.batch_size)


class _ImageDataset(torch.utils.data.Dataset):
    """Batches of ShardBatches as Samples; JPEGs the device can decode are left to it if asked."""

    def __init__(
        self,
        transforms: list[Callable[[Image.Image | torch.Tensor], torch.Tensor]],
        input_sizes: list[tuple[int, int, int]],
        jpegs_to_device: bool,
    ) -> None:
        self.transforms = transforms
        self.input_sizes = input_sizes
        self.jpegs_to_device = jpegs_to_device

    def __getitems__(self, batch: tuple[ReadBytes, Sequence[int]]) -> list[Sample]:
        """A batch: its bytes read together when the reader can (DataLoader calls this per batch)."""
        read_bytes, ordinals = batch
        many = getattr(read_bytes, "many", None)
        contents = many(ordinals) if many is not None else [read_bytes(o) for o in ordinals]
        return [self._decoded(data) for data in contents]

    def _placeholders(self) -> list[torch.Tensor]:
        """Zeros of each geometry's shape."""
        return [torch.zeros(size, dtype=torch.uint8) for size in self.input_sizes]

    def _decoded(self, data: bytes | memoryview) -> Sample:
        """A tensor per geometry and whether the image decoded (zeros if not), or the JPEG for the device."""
        if self.jpegs_to_device and gpu_decodable(data):
            return self._placeholders(), True, torch.frombuffer(bytearray(data), dtype=torch.uint8)
        image = decode_image(data)
        if image is None:
            return self._placeholders(), False, None
        return [transform(image) for transform in self.transforms], True, None


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
        self.batches = ShardBatches(batch_size)
        self.loader: torch.utils.data.DataLoader | None = None

    def predict(
        self, ordinals: Sequence[int], read_bytes: ReadBytes, progress: Progress | None = None
    ) -> list[Predictions]:
        """Predictions of every model for `ordinals` (row i = ordinals[i]), in the order models were given."""
        self.batches.read_bytes, self.batches.ordinals = read_bytes, ordinals
        outputs: list[list[BatchPredictions]] = [[] for _ in self.prepared]
        decoded: list[torch.Tensor] = []
        done = 0
        try:
            for batches, ok, jpegs in self._loader():
                on_device = [batch.to(self.device, non_blocking=True) for batch in batches]
                if jpegs:
                    self._decode_on_device(jpegs, on_device, ok)
                for index, prepared in enumerate(self.prepared):
                    outputs[index].append(classify(prepared, on_device[self.group_of_model[index]]))
                decoded.append(ok)
                done += len(ok)
                if progress is not None:
                    progress(done, len(ordinals))
        except BaseException:
            self.loader = None  # its processes may hold this shard's batches, or be gone: start afresh
            raise
        ok_rows = torch.cat(decoded).numpy() if decoded else np.zeros(0, bool)
        return [_to_predictions(batch_outputs, ok_rows) for batch_outputs in outputs]

    def _decode_on_device(
        self, jpegs: list[tuple[int, torch.Tensor]], batches: list[torch.Tensor], ok: torch.Tensor
    ) -> None:
        """Decode the batch's JPEGs on the device into their rows of each geometry's batch (timm's transforms
        work on tensors too); a JPEG that does not decode keeps its zeros and is marked undecoded."""
        rows, data = zip(*jpegs, strict=True)
        for row, image in zip(rows, decode_jpegs(list(data), self.device), strict=True):
            if image is None:
                ok[row] = False
                continue
            for batch, transform in zip(batches, self.transforms, strict=True):
                batch[row] = transform(image)

    def _loader(self) -> torch.utils.data.DataLoader:
        """The engine's DataLoader over self.batches, its processes kept from shard to shard; they decode
        all but the JPEGs left to a CUDA device."""
        if self.loader is None:
            jpegs_to_device = self.device.type == "cuda"
            self.loader = torch.utils.data.DataLoader(
                _ImageDataset(self.transforms, self.input_sizes, jpegs_to_device),
                batch_sampler=self.batches,  # type: ignore[arg-type]  # DataLoader hands any batch on as is
                num_workers=self.num_workers,
                persistent_workers=self.num_workers > 0,
                collate_fn=collate,
                pin_memory=self.device.type == "cuda",
            )
        return self.loader


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
