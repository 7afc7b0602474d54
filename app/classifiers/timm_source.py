"""Classifier sources: a timm model from a local weights file or from a timm pretrained tag.

Both go through timm's own pretrained path, so the model carries its pretrained config and
`timm.data.resolve_model_data_config(model)` gives the preprocessing its weights expect.
Every failure a user can cause raises a `ClassifierSourceError` whose message says what to fix.
"""

import difflib
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

import huggingface_hub
import timm
import torch
from huggingface_hub.errors import LocalEntryNotFoundError
from timm.models import get_pretrained_cfg, load_state_dict
from timm.models._hub import hf_split
from timm.models._pretrained import PretrainedCfg

WEIGHTS_FORMATS = {".safetensors": "safetensors", ".pth": "pth", ".pt": "pth", ".bin": "pth"}
"""Weights file suffixes (compared in lower case) and the format each is stored and loaded as."""
HUB_PROBE_TIMEOUT_S = 3.0


class ClassifierSourceError(ValueError):
    """A classifier source that cannot become a working model; the message tells the user why."""


class UnknownArchitectureError(ClassifierSourceError):
    """The architecture or pretrained tag is not one timm knows."""


class ClassCountError(ClassifierSourceError):
    """The model predicts a different number of classes than the competition's label set has."""


class CorruptWeightsError(ClassifierSourceError):
    """The weights file cannot be read (missing, truncated, corrupt or of the wrong format)."""


class WeightsMismatchError(ClassifierSourceError):
    """The weights file was made for another architecture (missing/unexpected keys, other shapes)."""


class PretrainedUnavailableError(ClassifierSourceError):
    """Pretrained weights cannot be downloaded here and are not in the local cache."""


def load_weights_file(
    architecture: str,
    weights_path: Path,
    num_classes: int,
    data_config: dict | None = None,
    *,
    shown_name: str | None = None,
) -> torch.nn.Module:
    """Build `architecture` (or `arch.tag`) with the weights of a .safetensors/.pth file, in eval mode.

    The file must hold a state dict whose classifier has `num_classes` outputs, in label-set order.
    `data_config` overrides the preprocessing of the pretrained config (input_size, crop_pct, mean, …)
    for weights trained at another resolution. Errors name the file `shown_name` (the name its owner
    gave it, when `weights_path` is a copy), else the file's own name.
    """
    shown = shown_name or weights_path.name
    _check_architecture(architecture)
    _check_weights_file(weights_path, shown)
    # num_classes in the overlay keeps timm from silently dropping a head it thinks was made for 1000 classes.
    preprocessing = {key: tuple(v) if isinstance(v, list) else v for key, v in (data_config or {}).items()}
    with _lower_case_suffix(weights_path) as loadable:
        overlay = dict(file=str(loadable), num_classes=num_classes, **preprocessing)
        try:
            model = timm.create_model(
                architecture, pretrained=True, pretrained_cfg_overlay=overlay, num_classes=num_classes
            )
        except Exception as error:  # timm surfaces file and key problems as many unrelated exception types
            raise _explain_load_failure(architecture, shown, loadable, num_classes, error) from error
    return model.eval()


def weights_format(filename: str) -> str | None:
    """'safetensors' or 'pth' by the file name's suffix in any case (see WEIGHTS_FORMATS), else None."""
    return WEIGHTS_FORMATS.get(Path(filename).suffix.lower())


@contextmanager
def _lower_case_suffix(path: Path) -> Iterator[Path]:
    """`path`, or a temporary link to it ending in the lower-case suffix (timm reads safetensors by name)."""
    if path.suffix == path.suffix.lower():
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="mad-weights-") as directory:
        link = Path(directory) / f"weights{path.suffix.lower()}"
        link.symlink_to(path.resolve())
        yield link


def load_pretrained_tag(
    tag: str, num_classes: int, *, cache_dir: Path | None = None, probe_timeout_s: float = HUB_PROBE_TIMEOUT_S
) -> torch.nn.Module:
    """Build timm's pretrained `tag` (e.g. "resnet50.a1_in1k"), downloading it or using the local cache."""
    cfg = _pretrained_cfg(tag)
    if cfg.num_classes != num_classes:
        raise ClassCountError(
            f"pretrained model {tag!r} predicts {cfg.num_classes} classes, but the competition's label set "
            f"has {num_classes}; choose a tag trained on this label set or upload weights for it"
        )
    overlay: dict[str, Any] = {}
    if huggingface_hub.constants.is_offline_mode() or not _reachable(_source_url(cfg), probe_timeout_s):
        overlay = _cached_weights_overlay(tag, cfg, cache_dir)
    try:
        model = timm.create_model(tag, pretrained=True, pretrained_cfg_overlay=overlay, cache_dir=cache_dir)
    except (OSError, RuntimeError) as error:  # hub/network errors are OSErrors; timm raises RuntimeError
        raise PretrainedUnavailableError(f"could not fetch or load weights for {tag!r}: {error}") from error
    return model.eval()


def _check_architecture(architecture: str) -> None:
    """Raise UnknownArchitectureError unless timm can build `architecture` (and knows its tag, if any)."""
    if not timm.is_model(architecture):
        raise UnknownArchitectureError(
            f"timm has no architecture {architecture!r}{_suggestions(architecture, timm.list_models())}"
        )
    if "." in architecture:
        _pretrained_cfg(architecture)


def _pretrained_cfg(tag: str) -> PretrainedCfg:
    """The pretrained config timm registers for `tag`, or UnknownArchitectureError."""
    try:
        cfg = get_pretrained_cfg(tag)
    except RuntimeError:  # timm raises this for an unknown tag of a known architecture
        cfg = None
    if cfg is None:
        raise UnknownArchitectureError(
            f"timm has no pretrained model {tag!r}{_suggestions(tag, timm.list_pretrained())}"
        )
    return cfg


def _suggestions(name: str, known: list[str]) -> str:
    """A '; did you mean ...' hint listing up to three close names, or ''."""
    close = difflib.get_close_matches(name, known, n=3)
    return f"; did you mean {', '.join(close)}?" if close else ""


def _check_weights_file(weights_path: Path, shown: str) -> None:
    """Raise CorruptWeightsError unless `weights_path` is an existing file with a suffix timm can load."""
    if weights_format(shown) is None:
        raise CorruptWeightsError(f"weights file {shown!r} must end with one of {', '.join(WEIGHTS_FORMATS)}")
    if not weights_path.is_file():
        raise CorruptWeightsError(f"weights file {weights_path} does not exist")


def _explain_load_failure(
    architecture: str, shown: str, loadable: Path, num_classes: int, error: Exception
) -> ClassifierSourceError:
    """The error a user understands for a failed timm load of their file `shown`, found by re-reading it
    (at `loadable`)."""
    try:
        found = load_state_dict(str(loadable))
    except Exception as read_error:
        return CorruptWeightsError(
            f"weights file {shown!r} is unreadable (corrupt, truncated or not a "
            f"{Path(shown).suffix} state dict): {_first_line(read_error)}"
        )
    model = timm.create_model(architecture, num_classes=num_classes)
    head_classes = _head_classes(model, found)
    if head_classes is not None and head_classes != num_classes:
        return ClassCountError(
            f"weights file {shown!r} has a classifier with {head_classes} classes, "
            f"but the competition's label set has {num_classes}"
        )
    expected = model.state_dict()
    if set(expected) != set(found):
        return WeightsMismatchError(
            f"weights file {shown!r} was not saved from {architecture!r}: "
            f"{_key_mismatch(expected, found)}; register it with the architecture it was trained as"
        )
    return WeightsMismatchError(
        f"weights file {shown!r} does not fit architecture {architecture!r}: "
        f"{_shape_mismatch(expected, found) or _first_line(error)}"
    )


def _head_classes(model: torch.nn.Module, state_dict: dict[str, torch.Tensor]) -> int | None:
    """Number of outputs of the classifier head stored in `state_dict`, if it has the model's head."""
    heads = cast(dict[str, Any], model.pretrained_cfg).get("classifier") or ()
    for head in (heads,) if isinstance(heads, str) else heads:
        weight = state_dict.get(f"{head}.weight")
        if weight is not None:
            return int(weight.shape[0])
    return None


def _key_mismatch(expected: dict[str, torch.Tensor], found: dict[str, torch.Tensor]) -> str:
    """How many of the model's tensors the file lacks and how many of the file's the model has no place
    for, as counts: the names themselves tell a user nothing."""
    missing = sum(key not in found for key in expected)
    unexpected = sum(key not in expected for key in found)
    parts = [
        f"{missing} of the model's {len(expected)} tensors are not in the file" if missing else "",
        f"{unexpected} of the file's {len(found)} tensors are not in the model" if unexpected else "",
    ]
    return " and ".join(part for part in parts if part)


def _shape_mismatch(expected: dict[str, torch.Tensor], found: dict[str, torch.Tensor]) -> str:
    """How many tensors differ in shape, and the first of them ('' when none)."""
    shapes = [
        f"{key} is {tuple(found[key].shape)} in the file, {tuple(value.shape)} in the model"
        for key, value in expected.items()
        if found[key].shape != value.shape
    ]
    if not shapes:
        return ""
    return f"{len(shapes)} tensor{'s have' if len(shapes) > 1 else ' has'} another shape ({shapes[0]})"


def _first_line(error: Exception) -> str:
    """An exception's first line, at most 200 characters: library errors can list every key of a model."""
    return str(error).strip().split("\n", 1)[0][:200]


def _source_url(cfg: PretrainedCfg) -> str:
    """The URL timm would download `cfg`'s weights from: the Hugging Face Hub, else the config's url."""
    return huggingface_hub.constants.ENDPOINT if cfg.hf_hub_id else _weights_url(cfg)[0]


def _weights_url(cfg: PretrainedCfg) -> tuple[str, str]:
    """The URL of `cfg`'s weights and the file name timm caches them under (a config may give it)."""
    if isinstance(cfg.url, tuple):
        return cfg.url
    url = cfg.url or ""
    return url, Path(urlsplit(url).path).name


def _reachable(url: str, timeout_s: float) -> bool:
    """Whether an HTTP HEAD to `url`'s host gets any answer within `timeout_s` (honours proxy settings)."""
    parts = urlsplit(url)
    request = urllib.request.Request(f"{parts.scheme}://{parts.netloc}/", method="HEAD")
    try:
        urllib.request.urlopen(request, timeout=timeout_s).close()
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


def _cached_weights_overlay(tag: str, cfg: PretrainedCfg, cache_dir: Path | None) -> dict[str, Any]:
    """A pretrained_cfg_overlay pointing timm at cached weights for `tag`, or PretrainedUnavailableError."""
    if cfg.hf_hub_id:
        repo_id, revision = hf_split(cfg.hf_hub_id)
        try:
            snapshot = huggingface_hub.snapshot_download(
                repo_id, revision=revision, cache_dir=cache_dir, local_files_only=True
            )
        except LocalEntryNotFoundError:
            snapshot = None
        if snapshot is not None:
            return dict(source="local-dir", file=snapshot)
    elif cfg.url:
        cached = Path(torch.hub.get_dir()) / "checkpoints" / _weights_url(cfg)[1]
        if cached.is_file():
            return dict(file=str(cached))
    raise PretrainedUnavailableError(
        f"cannot download pretrained weights for {tag!r}: {_source_url(cfg) or 'no download source'} is not "
        "reachable from this machine and the weights are not in its local cache; upload a weights file "
        "instead, or run this on a worker with internet access"
    )
