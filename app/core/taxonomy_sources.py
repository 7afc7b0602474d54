"""Where taxonomies come from: the shipped ImageNet hierarchy with timm's class lists, custom YAML or JSON
files, WordNet synsets (app.core.wordnet), and a competition's (kind, source)."""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib.resources import files
from pathlib import Path

from app.core.taxonomy import Taxonomy, TaxonomyError, enumerate_paths, from_children, unique_names
from app.core.wordnet import from_wordnet
from app.core.yaml_documents import DocumentRefused, load_document

IMAGENET_HIERARCHY_FILE = "imagenet_hierarchy.tsv"
BUILTIN_TAXONOMIES = ("imagenet-1k", "imagenet-a")


# ImageNet -------------------------------------------------------------------------------------------


def timm_info_file(name: str) -> Path:
    """A file of timm's `data/_info/`, located without importing timm (importing it loads torch, ~7 s)."""
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        raise TaxonomyError("timm is not installed; it ships the ImageNet class lists")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "_info" / name
    if not path.is_file():
        raise TaxonomyError(f"timm does not ship {name} (looked for {path})")
    return path


@dataclass(frozen=True)
class Hierarchy:
    """A WordNet hypernym DAG: each node's parents, first lemma and gloss (its definition)."""

    parents: dict[str, tuple[str, ...]]
    names: dict[str, str]
    glosses: dict[str, str]


def read_hierarchy(text: str) -> Hierarchy:
    """Parse the shipped hierarchy: lines "wnid<TAB>parent wnids (space separated)<TAB>name<TAB>gloss", #
    comments."""
    hierarchy = Hierarchy({}, {}, {})
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        node, node_parents, name, gloss = line.split("\t")
        hierarchy.parents[node] = tuple(node_parents.split())
        hierarchy.names[node] = name
        hierarchy.glosses[node] = gloss
    return hierarchy


@lru_cache(maxsize=1)
def _imagenet_hierarchy() -> Hierarchy:
    """The WordNet 3.0 hypernym DAG above the ImageNet-1k classes, from the package data."""
    return read_hierarchy(files("app.core").joinpath("data", IMAGENET_HIERARCHY_FILE).read_text())


def _imagenet_taxonomy(key: str, wnids: Sequence[str]) -> Taxonomy:
    """A taxonomy over ImageNet wnids with display names from timm's first lemma, disambiguated, and each
    class's WordNet gloss as its definition."""
    hierarchy = _imagenet_hierarchy()
    parents, node_names = hierarchy.parents, hierarchy.names
    unknown = [wnid for wnid in wnids if wnid not in parents]
    if unknown:
        raise TaxonomyError(f"wnids {unknown[:5]} are not in the shipped ImageNet hierarchy")
    lemma_lines = timm_info_file("imagenet_synset_to_lemma.txt").read_text().splitlines()
    lemmas = dict(line.split("\t", 1) for line in lemma_lines)
    paths = enumerate_paths(parents, wnids)
    words = [lemmas[wnid].split(", ") for wnid in wnids]
    names = unique_names(words, paths, node_names)
    definitions = tuple(hierarchy.glosses[wnid] for wnid in wnids)
    return Taxonomy(key, tuple(wnids), names, tuple(paths), node_names, definitions)


@lru_cache(maxsize=1)
def imagenet_1k() -> Taxonomy:
    """The 1000 ImageNet-1k classes in timm's index order (`imagenet_synsets.txt`)."""
    return _imagenet_taxonomy("imagenet-1k", timm_info_file("imagenet_synsets.txt").read_text().split())


@lru_cache(maxsize=1)
def imagenet_a() -> Taxonomy:
    """The 200 ImageNet-A classes in the order of timm's `imagenet_a_synsets.txt`."""
    return _imagenet_taxonomy("imagenet-a", timm_info_file("imagenet_a_synsets.txt").read_text().split())


# Custom taxonomy files ---------------------------------------------------------------------------------


def from_text(text: str, source: str = "taxonomy", key: str = "custom") -> Taxonomy:
    """A custom taxonomy from YAML or JSON text with keys root, classes, children and optional names,
    descriptions (class -> what it means, shown to annotators) and translations (language -> names and
    descriptions in that language, as {"de": {"names": {...}, "descriptions": {...}}}).

    YAML aliases are refused (app.core.yaml_documents: a taxonomy has no use for them, and nested ones make a
    few bytes stand for billions of labels), and so is nesting too deep to read.
    """
    try:
        document = load_document(text)
    except DocumentRefused as error:
        raise TaxonomyError(f"{source} is not valid YAML or JSON: {error}") from None
    if not isinstance(document, dict):
        raise TaxonomyError(f"{source} must hold a mapping with keys root, classes, children, names")
    unexpected = sorted(
        set(document) - {"root", "classes", "children", "names", "descriptions", "translations"}
    )
    if unexpected:
        raise TaxonomyError(f"{source}: unexpected keys {unexpected}")
    for required in ("root", "classes"):
        if required not in document:
            raise TaxonomyError(f"{source}: missing '{required}'")
    classes, children, names = document["classes"], document.get("children") or {}, document.get("names")
    if not isinstance(classes, list):
        raise TaxonomyError(f"{source}: 'classes' must be a list")
    if not isinstance(children, dict) or not all(isinstance(kids, list) for kids in children.values()):
        raise TaxonomyError(f"{source}: 'children' must map each parent to a list of children")
    if names is not None and not isinstance(names, dict):
        raise TaxonomyError(f"{source}: 'names' must map labels to display names")
    descriptions = document.get("descriptions")
    if descriptions is not None and not isinstance(descriptions, dict):
        raise TaxonomyError(f"{source}: 'descriptions' must map classes to what they mean")
    taxonomy = from_children(document["root"], classes, children, names, key=key, descriptions=descriptions)
    translations = _translations(document.get("translations") or {}, taxonomy.classes, source)
    return replace(taxonomy, translations=translations) if translations else taxonomy


LANGUAGE_TAG = re.compile(r"[a-z]{2,3}(_[A-Z]{2})?")
"""A language as the catalogues name it: ISO 639 code, optionally _ and an ISO 3166 region (de, pt_BR)."""


def _translations(
    given: object, classes: Sequence[str], source: str
) -> dict[str, dict[str, tuple[str, str]]]:
    """A taxonomy file's translations: language -> class -> (name, description), every name and description
    a non-empty string of a known class, the names of one language all different."""
    if not isinstance(given, dict):
        raise TaxonomyError(f"{source}: 'translations' must map languages to their names and descriptions")
    known = set(classes)
    translations = {}
    for language, entry in given.items():
        where = f"{source}: translations.{language}"
        if not isinstance(language, str) or not LANGUAGE_TAG.fullmatch(language):
            raise TaxonomyError(f"{where}: a language is a tag such as de, es or pt_BR")
        if not isinstance(entry, dict) or set(entry) - {"names", "descriptions"}:
            raise TaxonomyError(f"{where} must be a mapping with keys names and descriptions")
        texts = {part: entry.get(part) or {} for part in ("names", "descriptions")}
        for part, mapping in texts.items():
            if not isinstance(mapping, dict):
                raise TaxonomyError(f"{where}.{part} must map classes to text")
            for label, text in mapping.items():
                if str(label) not in known:
                    raise TaxonomyError(f"{where}.{part}: unknown class {label!r}")
                if not isinstance(text, str) or not text.strip():
                    raise TaxonomyError(f"{where}.{part}: the text of {label!r} must be a non-empty string")
        names = {str(label): name.strip() for label, name in texts["names"].items()}
        if len(set(names.values())) != len(names):
            raise TaxonomyError(f"{where}.names: two classes have the same name")
        descriptions = {str(label): text.strip() for label, text in texts["descriptions"].items()}
        translations[language] = {
            label: (names.get(label, ""), descriptions.get(label, ""))
            for label in names.keys() | descriptions
        }
    return translations


def from_file(path: str | Path) -> Taxonomy:
    """A custom taxonomy from a YAML or JSON file (format: from_text)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as error:
        raise TaxonomyError(f"cannot read taxonomy file {path}: {error.strerror}") from error
    return from_text(text, source=str(path), key=path.stem)


def load_taxonomy(spec: str | Path) -> Taxonomy:
    """ "imagenet-1k", "imagenet-a", or the path of a custom taxonomy file."""
    if spec == "imagenet-1k":
        return imagenet_1k()
    if spec == "imagenet-a":
        return imagenet_a()
    if not Path(spec).is_file():
        builtins = " or ".join(BUILTIN_TAXONOMIES)
        raise TaxonomyError(f"unknown taxonomy {str(spec)!r}: use {builtins} or a taxonomy file path")
    return from_file(spec)


# A competition's taxonomy ------------------------------------------------------------------------------


def build_taxonomy(kind: str, source: str | None) -> Taxonomy:
    """The taxonomy a competition names: a shipped one, WordNet synsets (one per line), or a custom file's
    text."""
    if kind in BUILTIN_TAXONOMIES:
        return load_taxonomy(kind)
    if kind == "wordnet":
        return from_wordnet([line.strip() for line in (source or "").splitlines() if line.strip()])
    return from_text(source or "")


@lru_cache(maxsize=16)
def cached_taxonomy(kind: str, source: str | None) -> Taxonomy:
    """build_taxonomy, remembered per process (the distance matrix is cached on the object)."""
    return build_taxonomy(kind, source)
