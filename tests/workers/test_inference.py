"""The batched inference engine against plain timm forward passes on the same images."""

import copy
import io
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from PIL import Image, ImageOps, JpegImagePlugin

from app.classifiers.prediction_store import Predictions
from tests.workers.conftest import FailingReader, FileReader
from workers.decoding import decode_image, decode_jpegs, device_decodable
from workers.inference import InferenceEngine, PreparedModel, classify, uint8_transform


def reference_probabilities(model: torch.nn.Module, paths) -> np.ndarray:
    """Softmax of a plain timm pipeline: PIL open, EXIF orientation, RGB, timm eval transform, forward."""
    transform = timm.data.create_transform(**timm.data.resolve_model_data_config(model))
    batch = torch.stack(
        [transform(ImageOps.exif_transpose(Image.open(path)).convert("RGB")) for path in paths]
    )
    with torch.no_grad():
        return model(batch).softmax(dim=1).numpy()


def assert_matches_reference(predictions: Predictions, rows: list[int], probabilities: np.ndarray) -> None:
    """Engine rows equal the reference's top-1, top-5, their probabilities and entropy in bits."""
    expected_top5 = np.argsort(-probabilities, axis=1)[:, :5]
    np.testing.assert_array_equal(predictions.top1[rows], expected_top5[:, 0])
    np.testing.assert_array_equal(predictions.top5[rows], expected_top5)
    np.testing.assert_allclose(predictions.prob[rows], probabilities.max(axis=1), rtol=1e-4)
    np.testing.assert_allclose(
        predictions.top5_prob[rows], np.take_along_axis(probabilities, expected_top5, axis=1), rtol=1e-4
    )
    entropy_bits = -(probabilities * np.log2(probabilities)).sum(axis=1)
    np.testing.assert_allclose(predictions.entropy_bits[rows], entropy_bits, rtol=1e-4)


@pytest.fixture(scope="module")
def engine(models) -> InferenceEngine:
    return InferenceEngine(models, batch_size=4, num_workers=2)


@pytest.fixture(scope="module")
def all_predictions(engine, images, read_bytes) -> list[Predictions]:
    return engine.predict(list(range(len(images.paths))), read_bytes)


def test_each_model_matches_a_plain_forward_pass(models, images, all_predictions):
    decodable = images.decodable
    for model, predictions in zip(models, all_predictions, strict=True):
        probabilities = reference_probabilities(model, [images.paths[i] for i in decodable])
        assert_matches_reference(predictions, decodable, probabilities)


def test_undecodable_images_get_no_prediction_rows(images, all_predictions):
    undecodable = list(images.undecodable)
    for predictions in all_predictions:
        assert len(predictions) == len(images.paths)
        assert (predictions.top1[undecodable] == -1).all() and (predictions.top5[undecodable] == -1).all()
        assert (predictions.prob[undecodable] == 0).all() and np.isnan(
            predictions.entropy_bits[undecodable]
        ).all()
        assert (predictions.top1[images.decodable] >= 0).all()


def test_exif_orientation_is_applied(images, all_predictions):
    rotated, upright = images.exif_rotated, images.upright_copy
    sideways = Image.open(images.paths[rotated])
    assert sideways.size == (240, 120) and decode_image(images.paths[rotated].read_bytes()).size == (120, 240)
    for predictions in all_predictions:
        np.testing.assert_allclose(predictions.top5_prob[rotated], predictions.top5_prob[upright], rtol=1e-6)
        np.testing.assert_allclose(
            predictions.entropy_bits[rotated], predictions.entropy_bits[upright], rtol=1e-6
        )


def test_models_sharing_a_batch_predict_as_they_do_alone(models, images, read_bytes, engine, all_predictions):
    assert engine.group_of_model == [0, 1, 1]  # test_efficientnet and test_vit differ only in mean/std
    ordinals = list(range(len(images.paths)))
    for model, together in zip(models, all_predictions, strict=True):
        (alone,) = InferenceEngine([model], batch_size=4, num_workers=0).predict(ordinals, read_bytes)
        for name, array in together.arrays().items():
            np.testing.assert_allclose(getattr(alone, name), array, rtol=1e-6, err_msg=name)


def test_rows_follow_the_given_ordinals(models, read_bytes, all_predictions):
    ordinals = [11, 0, 5, 3]
    (predictions,) = InferenceEngine(models[:1], batch_size=3, num_workers=1).predict(ordinals, read_bytes)
    for name, array in all_predictions[0].arrays().items():
        np.testing.assert_allclose(getattr(predictions, name), array[ordinals], rtol=1e-6, err_msg=name)


def test_a_failed_read_fails_the_shard_rather_than_passing_for_a_bad_image(models, read_bytes):
    engine = InferenceEngine(models[:1], batch_size=2, num_workers=1)

    with pytest.raises(FileNotFoundError, match="image 3 is gone"):
        engine.predict(list(range(6)), FailingReader(read_bytes, failing=3))


@dataclass(frozen=True)
class PidRecordingReader:
    """A read_bytes that notes which process read each image, in a folder (the readers run in loader
    processes)."""

    read_bytes: Callable[[int], bytes]
    folder: Path

    def __call__(self, ordinal: int) -> bytes:
        (self.folder / f"{os.getpid()}-{ordinal}").touch()
        return self.read_bytes(ordinal)


def test_one_engine_keeps_its_loader_processes_from_shard_to_shard_and_after_a_failure(
    models, read_bytes, all_predictions, tmp_path
):
    engine = InferenceEngine(models[:1], batch_size=2, num_workers=1)
    first = engine.predict([0, 1, 2], PidRecordingReader(read_bytes, tmp_path))
    second = engine.predict([3, 4], PidRecordingReader(read_bytes, tmp_path))
    readers = {path.name.split("-")[0] for path in tmp_path.iterdir()}
    assert len(readers) == 1 and readers != {str(os.getpid())}  # one loader process read both shards
    np.testing.assert_array_equal(first[0].top1, all_predictions[0].top1[:3])
    np.testing.assert_array_equal(second[0].top1, all_predictions[0].top1[3:5])

    with pytest.raises(FileNotFoundError, match="image 1 is gone"):
        engine.predict(list(range(4)), FailingReader(read_bytes, failing=1))
    (after,) = engine.predict([5, 0], PidRecordingReader(read_bytes, tmp_path))
    np.testing.assert_array_equal(after.top1, all_predictions[0].top1[[5, 0]])
    assert {path.name.split("-")[0] for path in tmp_path.iterdir()} == readers  # the same process after it


def test_progress_reports_every_batch(models, read_bytes):
    reports = []
    InferenceEngine(models[:1], batch_size=4, num_workers=0).predict(
        list(range(10)), read_bytes, progress=lambda done, total: reports.append((done, total))
    )
    assert reports == [(4, 10), (8, 10), (10, 10)]


def test_no_ordinals_give_empty_arrays(models, read_bytes):
    (predictions,) = InferenceEngine(models[:1]).predict([], read_bytes)
    assert len(predictions) == 0


def test_padding_a_batch_for_a_fixed_shape_graph_does_not_change_its_rows(models):
    model = models[0]
    config = timm.data.resolve_model_data_config(model)
    images = torch.randint(0, 256, (3, *config["input_size"]), dtype=torch.uint8)
    mean = torch.tensor(config["mean"]).view(1, -1, 1, 1)
    std = torch.tensor(config["std"]).view(1, -1, 1, 1)

    plain = classify(PreparedModel(model, mean, std, autocast_dtype=None, pad_to_batch=None), images)
    padded = classify(PreparedModel(model, mean, std, autocast_dtype=None, pad_to_batch=8), images)

    assert padded.top5.shape == (3, 5)
    torch.testing.assert_close(padded.top5_prob, plain.top5_prob)
    torch.testing.assert_close(padded.entropy_bits, plain.entropy_bits)


def test_compile_is_ignored_on_cpu(models):
    engine = InferenceEngine(models[:1], device="cpu", batch_size=4, compile=True)
    (prepared,) = engine.prepared
    assert prepared.forward is models[0] and prepared.pad_to_batch is None


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_gpu_bf16_agrees_with_cpu_fp32(models, images, read_bytes, all_predictions):
    ordinals = list(range(len(images.paths)))
    gpu_models = [copy.deepcopy(model) for model in models]  # the engine moves models to its device
    on_gpu = InferenceEngine(gpu_models, device="cuda", batch_size=4).predict(ordinals, read_bytes)
    for gpu, cpu in zip(on_gpu, all_predictions, strict=True):
        np.testing.assert_array_equal(gpu.top1 == -1, cpu.top1 == -1)
        np.testing.assert_allclose(gpu.top5_prob, cpu.top5_prob, atol=0.02)


def nearest_chroma_decode(data: bytes) -> Image.Image:
    """A 4:2:0 JPEG decoded with each chroma sample repeated over the 2x2 pixels it covers, as nvJPEG does
    by default, instead of libjpeg-turbo's interpolation: luma from a full-size decode, chroma at its own
    resolution from a half-scale DCT decode (which for 4:2:0 needs no upsampling), RGB by JFIF's equations."""
    full, half = Image.open(io.BytesIO(data)), Image.open(io.BytesIO(data))
    assert JpegImagePlugin.get_sampling(full) == 2  # 4:2:0
    width, height = full.size
    full.draft("YCbCr", (width, height))
    half.draft("YCbCr", ((width + 1) // 2, (height + 1) // 2))
    luma = np.asarray(full)[..., 0].astype(np.float64)
    chroma = np.asarray(half)[..., 1:].astype(np.float64).repeat(2, axis=0).repeat(2, axis=1)
    cb, cr = chroma[:height, :width, 0] - 128, chroma[:height, :width, 1] - 128
    rgb = np.stack([luma + 1.402 * cr, luma - 0.344136 * cb - 0.714136 * cr, luma + 1.772 * cb], axis=-1)
    return Image.fromarray(rgb.round().clip(0, 255).astype(np.uint8))


ROUNDING_LEVELS = 1.5
"""Mean |difference| two correct decodes + resizes of one JPEG may show, in uint8 levels: the inverse DCT
(both libjpeg-turbo's and nvJPEG's meet JPEG's accuracy, ITU T.81 A.3.3 / IEEE 1180: at most one level off
per sample), the YCbCr to RGB conversion and the resize (float on CUDA, fixed point in Pillow) each round
once: three roundings, each at most one level off and on average under half of one."""


@pytest.mark.parametrize(
    "device",
    [
        "cpu",
        pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")),
    ],
)
def test_jpegs_left_to_the_device_decode_and_transform_there_as_pillow_does(models, images, device):
    """On CUDA the loader processes leave complete upright baseline JPEGs to nvJPEG; decode_jpeg on the CPU
    (libjpeg-turbo) runs the same path here, tensors through the same timm transforms.

    How close to Pillow: per image, the mean |difference| of the resized, cropped uint8 tensors is within
    ROUNDING_LEVELS, plus, on CUDA, what chroma upsampling changes. Pillow's libjpeg-turbo (and torchvision's
    on the CPU) interpolates the chroma of 4:2:0 files (its "fancy" upsampling: 3/4 of the nearer sample and
    1/4 of the farther, each way); nvJPEG with torchvision's default flags repeats each sample over its 2x2
    pixels. That change depends on the image's colour detail (these test images are noisy: about 2 levels
    after resizing, more for the one enlarged from 40x30), so it is measured on each image by decoding it
    with repeated chroma here (nearest_chroma_decode); any upsampling between the two stays within it.
    """
    contents = [path.read_bytes() for path in images.paths]
    left = [ordinal for ordinal, data in enumerate(contents) if device_decodable(data)]
    assert [images.paths[ordinal].name for ordinal in left] == [f"photo{n}.jpg" for n in (0, 1, 2, 3, 4, 15)]
    jpegs = [torch.frombuffer(bytearray(contents[ordinal]), dtype=torch.uint8) for ordinal in left]
    decoded = decode_jpegs(jpegs, torch.device(device))
    for model in models[:2]:  # bilinear and bicubic resizing
        transform = uint8_transform(timm.data.resolve_model_data_config(model))
        for ordinal, image in zip(left, decoded, strict=True):
            assert image.device.type == device
            on_device = transform(image).cpu().int()
            pillow = transform(decode_image(contents[ordinal])).int()
            assert on_device.shape == pillow.shape
            upsampling = 0.0
            if device == "cuda":
                nearest = transform(nearest_chroma_decode(contents[ordinal])).int()
                upsampling = (nearest - pillow).abs().float().mean().item()
            difference = (on_device - pillow).abs().float().mean().item()
            assert difference <= ROUNDING_LEVELS + upsampling, (
                f"{images.paths[ordinal].name}: mean |difference| {difference:.2f} levels, chroma upsampling "
                f"explains {upsampling:.2f}, rounding {ROUNDING_LEVELS}"
            )


def test_the_devices_path_on_the_cpu_predicts_as_the_loader_processes_do(
    models, images, read_bytes, all_predictions
):
    """jpegs_to_device runs the GPU's path on the CPU: JPEG bytes shipped, decoded in the main process
    (libjpeg-turbo, as Pillow), resized and cropped on tensors; the rest as before."""
    ordinals = list(range(len(images.paths)))
    engine = InferenceEngine(models, batch_size=4, num_workers=2, jpegs_to_device=True)
    for on_device, pillow in zip(engine.predict(ordinals, read_bytes), all_predictions, strict=True):
        np.testing.assert_array_equal(on_device.top1 == -1, pillow.top1 == -1)
        np.testing.assert_allclose(on_device.top5_prob, pillow.top5_prob, atol=0.01)
        np.testing.assert_allclose(on_device.entropy_bits, pillow.entropy_bits, atol=0.02)


@dataclass
class CountingTransform:
    """A transform that counts its calls."""

    transform: Callable[[torch.Tensor], torch.Tensor]
    calls: int = 0

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.transform(images)


def test_jpegs_of_one_size_are_resized_in_one_call_per_geometry(models, images, read_bytes):
    same_size, other = images.paths[0], images.paths[4]  # photo0 (320x200) three times, photo4 once
    reader = FileReader((same_size, other, same_size, same_size))
    engine = InferenceEngine(models, batch_size=4, num_workers=0, jpegs_to_device=True)
    engine.transforms[:] = [CountingTransform(transform) for transform in engine.transforms]
    predictions = engine.predict(list(range(4)), reader)
    assert [transform.calls for transform in engine.transforms] == [2, 2]  # per geometry: two sizes
    (alone,) = InferenceEngine(models[:1], batch_size=1, num_workers=0).predict([0, 4], read_bytes)
    np.testing.assert_array_equal(predictions[0].top1, alone.top1[[0, 1, 0, 0]])
    np.testing.assert_allclose(predictions[0].top5_prob, alone.top5_prob[[0, 1, 0, 0]], atol=0.01)


@dataclass
class BatchReader:
    """A reader of whole batches (as a shard archive or parallel object GETs are), counting its calls."""

    read_bytes: Callable[[int], bytes]
    batches: list[list[int]]

    def __call__(self, ordinal: int) -> bytes:
        raise AssertionError("a batch reader is asked for whole batches")

    def many(self, ordinals) -> list[bytes]:
        self.batches.append(list(ordinals))
        return [self.read_bytes(ordinal) for ordinal in ordinals]


def test_a_reader_of_batches_is_asked_once_per_batch_for_the_same_predictions(
    models, images, read_bytes, all_predictions
):
    reader = BatchReader(read_bytes, [])
    ordinals = list(range(len(images.paths)))
    (predictions,) = InferenceEngine(models[:1], batch_size=4, num_workers=0).predict(ordinals, reader)
    assert reader.batches == [ordinals[start : start + 4] for start in range(0, len(ordinals), 4)]
    np.testing.assert_array_equal(predictions.top1, all_predictions[0].top1)
