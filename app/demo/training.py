"""Briefly training timm classifiers on small slices of the digits, with the preprocessing inference uses."""

from pathlib import Path

import numpy as np
import safetensors.torch
import timm
import torch
from PIL import Image

from workers.decoding import decode_image
from workers.inference import uint8_transform

BATCH_SIZE = 32
LEARNING_RATE = 3e-3


def _decoded(path: Path) -> Image.Image:
    """A demo image decoded as the worker decodes it."""
    image = decode_image(path.read_bytes())
    if image is None:
        raise ValueError(f"{path} is not an image Pillow can decode")
    return image


def preprocess(paths: list[Path], data_config: dict) -> torch.Tensor:
    """The images as the worker feeds them to the model: timm's eval transform, then mean/std."""
    transform = uint8_transform(data_config)
    images = torch.stack([transform(_decoded(path)) for path in paths]).float() / 255
    mean = torch.tensor(data_config["mean"]).view(1, 3, 1, 1)
    std = torch.tensor(data_config["std"]).view(1, 3, 1, 1)
    return (images - mean) / std


def train_classifier(
    architecture: str,
    paths: list[Path],
    digits: np.ndarray,
    data_config_overlay: dict,
    *,
    steps: int,
    seed: int,
) -> torch.nn.Module:
    """A randomly initialised timm model trained with AdamW for `steps` mini-batches on the given images."""
    torch.manual_seed(seed)
    model = timm.create_model(architecture, num_classes=10, pretrained_cfg_overlay=data_config_overlay)
    data_config = timm.data.resolve_model_data_config(model)
    inputs, targets = preprocess(paths, data_config), torch.as_tensor(digits, dtype=torch.long)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LEARNING_RATE, weight_decay=0.01)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        batch = torch.randint(0, len(inputs), (BATCH_SIZE,), generator=generator)
        loss = torch.nn.functional.cross_entropy(model(inputs[batch]), targets[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    recalibrate_batch_norm(model, inputs)
    return model.eval()


def recalibrate_batch_norm(model: torch.nn.Module, inputs: torch.Tensor) -> None:
    """BatchNorm's running mean/var := the population statistics of `inputs` (Ioffe & Szegedy 2015, §3.1), by
    torch's update_bn: after a few dozen steps the moving averages are far off and it predicts one digit."""
    with torch.no_grad():
        torch.optim.swa_utils.update_bn([inputs], model)


def held_out_accuracy(model: torch.nn.Module, paths: list[Path], digits: np.ndarray) -> float:
    """Top-1 accuracy of a model on images it was not trained on, in the preprocessing of inference."""
    inputs = preprocess(paths, timm.data.resolve_model_data_config(model))
    with torch.inference_mode():
        predicted = model(inputs).argmax(dim=1).numpy()
    return float(np.mean(predicted == digits))


def save_weights(model: torch.nn.Module, path: Path) -> Path:
    """The model's state dict as a safetensors file (the format `mad classifiers add --weights` takes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    safetensors.torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))
    return path
