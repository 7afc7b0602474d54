"""Classifier sources: weights files and pretrained tags through timm's pretrained path, and their errors."""

import re
from pathlib import Path

import huggingface_hub
import pytest
import timm
import torch
from safetensors.torch import save_file

from app.classifiers.timm_source import (
    ClassCountError,
    ClassifierSourceError,
    CorruptWeightsError,
    PretrainedUnavailableError,
    UnknownArchitectureError,
    WeightsMismatchError,
    load_pretrained_tag,
    load_weights_file,
    weights_format,
)

ARCH = "test_resnet"
TAG = "test_resnet.r160_in1k"
NUM_CLASSES = 10


@pytest.fixture(scope="module")
def trained() -> torch.nn.Module:
    """A small random-init model standing in for one trained on a 10-class label set."""
    torch.manual_seed(0)
    return timm.create_model(ARCH, num_classes=NUM_CLASSES).eval()


def assert_same_weights(loaded: torch.nn.Module, expected: dict[str, torch.Tensor]) -> None:
    """Every tensor of `loaded` equals the one in `expected` (so the file, not random init, was used)."""
    state = loaded.state_dict()
    assert state.keys() == expected.keys()
    for name, tensor in expected.items():
        assert torch.equal(state[name], tensor), name


@pytest.mark.parametrize("suffix", [".safetensors", ".pth"])
def test_weights_file_loads_the_files_weights_and_the_tags_preprocessing(trained, tmp_path, suffix):
    path = tmp_path / f"weights{suffix}"
    if suffix == ".safetensors":
        save_file(trained.state_dict(), path)
    else:
        torch.save(trained.state_dict(), path)

    loaded = load_weights_file(ARCH, path, NUM_CLASSES)

    assert_same_weights(loaded, trained.state_dict())
    assert not loaded.training
    config = timm.data.resolve_model_data_config(loaded)
    assert config["input_size"] == (3, 160, 160) and config["mean"] == (0.5, 0.5, 0.5)
    assert loaded.pretrained_cfg["file"] == str(path)


@pytest.mark.parametrize("suffix", [".pt", ".bin", ".SAFETENSORS", ".Pth", ".BIN"])
def test_every_accepted_suffix_loads_in_any_case(trained, tmp_path, suffix):
    path = tmp_path / f"weights{suffix}"
    if suffix.lower() == ".safetensors":
        save_file(trained.state_dict(), path)
    else:
        torch.save(trained.state_dict(), path)

    assert weights_format(path.name) == ("safetensors" if suffix.lower() == ".safetensors" else "pth")
    assert_same_weights(load_weights_file(ARCH, path, NUM_CLASSES), trained.state_dict())


def test_weights_file_with_an_explicit_tag_uses_that_tags_config(trained, tmp_path):
    path = tmp_path / "weights.pth"
    torch.save({"state_dict": trained.state_dict()}, path)  # a training checkpoint wraps the state dict

    loaded = load_weights_file(TAG, path, NUM_CLASSES)

    assert_same_weights(loaded, trained.state_dict())
    assert loaded.pretrained_cfg["tag"] == "r160_in1k"


def test_weights_file_with_overridden_preprocessing(trained, tmp_path):
    path = tmp_path / "weights.safetensors"
    save_file(trained.state_dict(), path)
    override = {
        "input_size": (3, 128, 128),
        "crop_pct": 1.0,
        "mean": (0.4, 0.4, 0.4),
        "interpolation": "bicubic",
    }

    loaded = load_weights_file(ARCH, path, NUM_CLASSES, override)

    assert_same_weights(loaded, trained.state_dict())
    config = timm.data.resolve_model_data_config(loaded)
    assert {name: config[name] for name in override} == override
    assert config["std"] == (0.5, 0.5, 0.5)  # what is not overridden still comes from the pretrained config


def test_unknown_architecture_suggests_close_names(tmp_path):
    with pytest.raises(UnknownArchitectureError, match="resnet50x.*did you mean.*resnet50"):
        load_weights_file("resnet50x", tmp_path / "weights.pth", NUM_CLASSES)


def test_unknown_tag_of_a_known_architecture(tmp_path):
    with pytest.raises(UnknownArchitectureError, match="test_resnet.nope"):
        load_weights_file("test_resnet.nope", tmp_path / "weights.pth", NUM_CLASSES)


def test_wrong_number_of_classes_names_both_counts(trained, tmp_path):
    path = tmp_path / "weights.safetensors"
    save_file(trained.state_dict(), path)

    with pytest.raises(ClassCountError, match=r"10 classes.*label set has 1000"):
        load_weights_file(ARCH, path, 1000)


def test_truncated_safetensors_is_reported_as_corrupt(trained, tmp_path):
    path = tmp_path / "weights.safetensors"
    save_file(trained.state_dict(), path)
    path.write_bytes(path.read_bytes()[:5000])

    with pytest.raises(CorruptWeightsError, match="unreadable"):
        load_weights_file(ARCH, path, NUM_CLASSES)


def test_truncated_pth_is_reported_as_corrupt(trained, tmp_path):
    path = tmp_path / "weights.pth"
    torch.save(trained.state_dict(), path)
    path.write_bytes(path.read_bytes()[:5000])

    with pytest.raises(CorruptWeightsError, match="unreadable"):
        load_weights_file(ARCH, path, NUM_CLASSES)


def test_missing_file_and_unknown_suffix(tmp_path):
    with pytest.raises(CorruptWeightsError, match="does not exist"):
        load_weights_file(ARCH, tmp_path / "absent.safetensors", NUM_CLASSES)
    (tmp_path / "weights.h5").write_bytes(b"\x89HDF")
    with pytest.raises(CorruptWeightsError, match=r"one of \.safetensors, \.pth, \.pt, \.bin$"):
        load_weights_file(ARCH, tmp_path / "weights.h5", NUM_CLASSES)
    assert weights_format("weights.h5") is None


def test_weights_of_another_architecture_are_counted_not_listed_under_the_owners_file_name(tmp_path):
    other = timm.create_model("test_efficientnet", num_classes=NUM_CLASSES)
    path = tmp_path / "upload.safetensors"
    save_file(other.state_dict(), path)

    with pytest.raises(WeightsMismatchError) as raised:
        load_weights_file(ARCH, path, NUM_CLASSES, shown_name="my-effnet.safetensors")
    message = str(raised.value)
    assert message.startswith(f"weights file 'my-effnet.safetensors' was not saved from '{ARCH}'")
    assert re.search(r"\d+ of the model's \d+ tensors are not in the file and \d+ of the file's", message)
    assert message.endswith("register it with the architecture it was trained as")
    assert "upload" not in message and not any(key in message for key in other.state_dict())
    assert isinstance(raised.value, ClassifierSourceError) and isinstance(raised.value, ValueError)


def test_weights_with_a_reshaped_tensor_name_it(trained, tmp_path):
    state = dict(trained.state_dict())
    state["layer1.0.conv1.weight"] = torch.zeros(3, 3, 1, 1)
    path = tmp_path / "weights.safetensors"
    save_file(state, path)

    expected = r": 1 tensor has another shape \(layer1\.0\.conv1\.weight is \(3, 3, 1, 1\) in the file"
    with pytest.raises(WeightsMismatchError, match=expected):
        load_weights_file(ARCH, path, NUM_CLASSES)


def test_pretrained_tag_with_another_class_count_fails_before_downloading():
    with pytest.raises(ClassCountError, match="predicts 1000 classes.*has 10"):
        load_pretrained_tag(TAG, NUM_CLASSES)


def test_unknown_pretrained_tag():
    with pytest.raises(UnknownArchitectureError, match="no pretrained model 'test_resnet.in22k'"):
        load_pretrained_tag("test_resnet.in22k", 1000)


def test_pretrained_tag_unreachable_and_not_cached_fails_with_advice(monkeypatch, tmp_path):
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there

    with pytest.raises(PretrainedUnavailableError, match="not reachable.*upload a weights file"):
        load_pretrained_tag(TAG, 1000, cache_dir=tmp_path)


def test_pretrained_tag_in_offline_mode_loads_from_the_local_cache(monkeypatch, tmp_path):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    weights = timm.create_model(ARCH).state_dict()
    snapshot = _fake_hub_cache(tmp_path, "timm/" + TAG)
    save_file(weights, snapshot / "model.safetensors")

    loaded = load_pretrained_tag(TAG, 1000, cache_dir=tmp_path)

    assert_same_weights(loaded, weights)


def test_pretrained_tag_in_offline_mode_without_cache_fails(monkeypatch, tmp_path):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)

    with pytest.raises(PretrainedUnavailableError, match="not in its local cache"):
        load_pretrained_tag(TAG, 1000, cache_dir=tmp_path)


def _fake_hub_cache(cache_dir: Path, repo_id: str) -> Path:
    """The snapshot directory of `repo_id` in a Hugging Face cache laid out as huggingface_hub writes it."""
    repo = cache_dir / f"models--{repo_id.replace('/', '--')}"
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True)
    return snapshot
