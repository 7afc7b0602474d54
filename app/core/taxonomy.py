"""Class taxonomies and the WordNet-weighted MAD distance between classes (paper Eq. 3, DESIGN.md).

A taxonomy is a rooted DAG (a node may have several parents, as in WordNet). Each class has one or more
hypernym paths root -> class; the root is at depth 0 and an edge from a parent at depth l weighs 2**-l.
The distance between two classes is the minimum, over every pair of their paths, of the weight of the
edges below the paths' deepest common node.
"""

from __future__ import annotations

import importlib.util
import reprlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property, lru_cache
from importlib.resources import files
from pathlib import Path
from typing import Any

import numpy as np

HierarchyPath = tuple[str, ...]

IMAGENET_HIERARCHY_FILE = "imagenet_hierarchy.tsv"
BUILTIN_TAXONOMIES = ("imagenet-1k", "imagenet-a")
_PATH_BLOCK = 2048  # rows of the path-by-path table computed at once, to bound memory on large taxonomies


class TaxonomyError(ValueError):
    """A taxonomy that cannot be built: bad file, unknown label, cycle, duplicate, missing WordNet data."""


def path_distance(p: HierarchyPath, q: HierarchyPath) -> float:
    """d(p, q) = Σ_{l=c}^{D1-1} 2^-l + Σ_{l=c}^{D2-1} 2^-l = 2^(2-c) - 2^(1-D1) - 2^(1-D2) (Eq. 3, DESIGN.md).

    c is the depth of the last node of the paths' common prefix, D1 and D2 the depths of their leaves.
    """
    common = 0
    while common < min(len(p), len(q)) and p[common] == q[common]:
        common += 1
    if common == 0:
        raise TaxonomyError(f"paths {p[0]!r}... and {q[0]!r}... do not share a root")
    return 2.0 ** (2 - (common - 1)) - 2.0 ** (1 - (len(p) - 1)) - 2.0 ** (1 - (len(q) - 1))


@dataclass(frozen=True, eq=False)
class Taxonomy:
    """Classes in model output order, their display names, and each class's root -> class paths."""

    key: str
    classes: tuple[str, ...]
    names: tuple[str, ...]
    paths: tuple[tuple[HierarchyPath, ...], ...]
    node_names: Mapping[str, str] = field(repr=False)

    def __post_init__(self) -> None:
        """Check the invariants every constructor relies on."""
        if not self.classes:
            raise TaxonomyError(f"taxonomy {self.key!r} has no classes")
        if not len(self.classes) == len(self.names) == len(self.paths):
            raise TaxonomyError("classes, names and paths must have the same length")
        _raise_on_duplicates(self.classes, "class")
        _raise_on_duplicates(self.names, "display name")
        roots = {path[0] for class_paths in self.paths for path in class_paths}
        if len(roots) != 1:
            raise TaxonomyError(f"taxonomy {self.key!r} has several roots: {sorted(roots)}")
        for label, class_paths in zip(self.classes, self.paths, strict=True):
            if not class_paths or any(path[-1] != label for path in class_paths):
                raise TaxonomyError(f"class {label!r} needs paths from the root that end at it")

    @property
    def root(self) -> str:
        """The node every path starts from (depth 0)."""
        return self.paths[0][0][0]

    @cached_property
    def _index(self) -> dict[str, int]:
        return {label: index for index, label in enumerate(self.classes)}

    def index_of(self, label: str) -> int:
        """Model output index of a class label."""
        try:
            return self._index[label]
        except KeyError:
            raise TaxonomyError(f"unknown class {label!r} in taxonomy {self.key!r}") from None

    def distance(self, a: str, b: str) -> float:
        """d(a, b) = min over paths p of a, q of b of path_distance(p, q) (Eq. 3, DESIGN.md)."""
        paths_a, paths_b = self.paths[self.index_of(a)], self.paths[self.index_of(b)]
        return min(path_distance(p, q) for p in paths_a for q in paths_b)

    def distance_matrix(self) -> np.ndarray:
        """The read-only C×C float64 matrix D[a, b] = d(a, b) in class order, computed once per object."""
        return self._distance_matrix

    @cached_property
    def _distance_matrix(self) -> np.ndarray:
        matrix = _class_distance_matrix(self.paths)
        matrix.setflags(write=False)
        return matrix

    def ancestors(self, label: str) -> frozenset[str]:
        """Every node on some root -> class path of `label`, the class itself excluded."""
        class_paths = self.paths[self.index_of(label)]
        return frozenset(node for path in class_paths for node in path[:-1])

    def superclasses(self) -> tuple[tuple[str, ...], np.ndarray]:
        """Non-root ancestors above at least two classes, sorted, and their read-only S×C membership."""
        return self._superclasses

    @cached_property
    def _superclasses(self) -> tuple[tuple[str, ...], np.ndarray]:
        covered: dict[str, set[int]] = {}
        for index, label in enumerate(self.classes):
            for node in self.ancestors(label) - {self.root}:
                covered.setdefault(node, set()).add(index)
        nodes = tuple(sorted(node for node, members in covered.items() if len(members) >= 2))
        membership = np.zeros((len(nodes), len(self.classes)), dtype=bool)
        for row, node in enumerate(nodes):
            membership[row, sorted(covered[node])] = True
        membership.setflags(write=False)
        return nodes, membership


def _raise_on_duplicates(values: Sequence[str], what: str) -> None:
    """Raise TaxonomyError naming the first repeated value."""
    seen: set[str] = set()
    for value in values:
        if value in seen:
            raise TaxonomyError(f"duplicate {what} {value!r}")
        seen.add(value)


def _class_distance_matrix(paths: Sequence[Sequence[HierarchyPath]]) -> np.ndarray:
    """D[a, b] = min over path pairs of 2^(2-c) - 2^(1-D1) - 2^(1-D2), vectorised over all paths (Eq. 3)."""
    node_ids: dict[str, int] = {}
    flat = [path for class_paths in paths for path in class_paths]
    longest = max(len(path) for path in flat)
    nodes = np.full((len(flat), longest), -1, dtype=np.int32)
    for row, path in enumerate(flat):
        nodes[row, : len(path)] = [node_ids.setdefault(node, len(node_ids)) for node in path]
    leaf_weight = 2.0 ** (1 - (np.array([len(path) for path in flat]) - 1))
    starts = np.cumsum([0] + [len(class_paths) for class_paths in paths[:-1]])
    per_path_to_class = np.empty((len(flat), len(paths)))
    for begin in range(0, len(flat), _PATH_BLOCK):
        block = nodes[begin : begin + _PATH_BLOCK]
        common = np.zeros((len(block), len(flat)), dtype=np.int32)
        shared = np.ones((len(block), len(flat)), dtype=bool)
        for depth in range(longest):
            shared &= (block[:, depth, None] == nodes[None, :, depth]) & (block[:, depth, None] >= 0)
            common += shared
        below_common = 2.0 ** (2 - (common - 1))
        pair = below_common - leaf_weight[begin : begin + len(block), None] - leaf_weight[None, :]
        per_path_to_class[begin : begin + len(block)] = np.minimum.reduceat(pair, starts, axis=1)
    return np.minimum.reduceat(per_path_to_class, starts, axis=0)


def _enumerate_paths(
    parents: Mapping[str, Sequence[str]], leaves: Iterable[str]
) -> list[tuple[HierarchyPath, ...]]:
    """All root -> leaf paths of each leaf in a DAG given as node -> parents (a root has no parents)."""

    @cache
    def paths_to(node: str) -> tuple[HierarchyPath, ...]:
        if not parents[node]:
            return ((node,),)
        return tuple(path + (node,) for parent in parents[node] for path in paths_to(parent))

    return [paths_to(leaf) for leaf in leaves]


def _unique_names(
    words: Sequence[Sequence[str]], paths: Sequence[Sequence[HierarchyPath]], node_names: Mapping[str, str]
) -> tuple[str, ...]:
    """Each class's first word; where shared case-insensitively, "word (second word or parent's name)"."""
    counts: dict[str, int] = {}
    for class_words in words:
        counts[class_words[0].lower()] = counts.get(class_words[0].lower(), 0) + 1
    names = []
    for class_words, class_paths in zip(words, paths, strict=True):
        first = class_words[0]
        if counts[first.lower()] == 1:
            names.append(first)
        elif len(class_words) > 1:
            names.append(f"{first} ({class_words[1]})")
        else:
            names.append(f"{first} ({node_names[class_paths[0][-2]]})")
    return tuple(names)


# ImageNet ----------------------------------------------------------------------------------------------


def timm_info_file(name: str) -> Path:
    """A file of timm's `data/_info/`, located without importing timm (importing it loads torch, ~7 s)."""
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        raise TaxonomyError("timm is not installed; it ships the ImageNet class lists")
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / "_info" / name
    if not path.is_file():
        raise TaxonomyError(f"timm does not ship {name} (looked for {path})")
    return path


def read_hierarchy(text: str) -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """Parse the shipped hierarchy: lines "wnid<TAB>parent wnids (space separated)<TAB>name", # comments."""
    parents: dict[str, tuple[str, ...]] = {}
    names: dict[str, str] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        node, node_parents, name = line.split("\t")
        parents[node] = tuple(node_parents.split())
        names[node] = name
    return parents, names


@lru_cache(maxsize=1)
def _imagenet_hierarchy() -> tuple[dict[str, tuple[str, ...]], dict[str, str]]:
    """The WordNet 3.0 hypernym DAG above the ImageNet-1k classes, from the package data."""
    return read_hierarchy(files("app.core").joinpath("data", IMAGENET_HIERARCHY_FILE).read_text())


def _imagenet_taxonomy(key: str, wnids: Sequence[str]) -> Taxonomy:
    """A taxonomy over ImageNet wnids with display names from timm's first lemma, disambiguated."""
    parents, node_names = _imagenet_hierarchy()
    unknown = [wnid for wnid in wnids if wnid not in parents]
    if unknown:
        raise TaxonomyError(f"wnids {unknown[:5]} are not in the shipped ImageNet hierarchy")
    lemma_lines = timm_info_file("imagenet_synset_to_lemma.txt").read_text().splitlines()
    lemmas = dict(line.split("\t", 1) for line in lemma_lines)
    paths = _enumerate_paths(parents, wnids)
    words = [lemmas[wnid].split(", ") for wnid in wnids]
    names = _unique_names(words, paths, node_names)
    return Taxonomy(key, tuple(wnids), names, tuple(paths), node_names)


@lru_cache(maxsize=1)
def imagenet_1k() -> Taxonomy:
    """The 1000 ImageNet-1k classes in timm's index order (`imagenet_synsets.txt`)."""
    return _imagenet_taxonomy("imagenet-1k", timm_info_file("imagenet_synsets.txt").read_text().split())


@lru_cache(maxsize=1)
def imagenet_a() -> Taxonomy:
    """The 200 ImageNet-A classes in the order of timm's `imagenet_a_synsets.txt`."""
    return _imagenet_taxonomy("imagenet-a", timm_info_file("imagenet_a_synsets.txt").read_text().split())


# WordNet through nltk ----------------------------------------------------------------------------------


def from_wordnet(synsets: Sequence[str], key: str = "wordnet") -> Taxonomy:
    """A taxonomy over WordNet noun synsets given as wnids ("n01847000") or names ("drake.n.02")."""
    from app.core.wordnet import default_wordnet

    wordnet = default_wordnet()
    parents: dict[str, tuple[str, ...]] = {}
    node_names: dict[str, str] = {}
    lemma_lists: list[list[str]] = []
    wnids: list[str] = []
    for spec in synsets:
        synset = _lookup_synset(wordnet, spec)
        wnids.append(_wnid(synset))
        lemma_lists.append([lemma.replace("_", " ") for lemma in synset.lemma_names()])
        pending = [synset]
        while pending:
            node = pending.pop()
            if _wnid(node) in parents:
                continue
            hypernyms = sorted(node.hypernyms() + node.instance_hypernyms(), key=_wnid)
            parents[_wnid(node)] = tuple(_wnid(hypernym) for hypernym in hypernyms)
            node_names[_wnid(node)] = node.lemma_names()[0].replace("_", " ")
            pending.extend(hypernyms)
    paths = _enumerate_paths(parents, wnids)
    names = _unique_names(lemma_lists, paths, node_names)
    return Taxonomy(key, tuple(wnids), names, tuple(paths), node_names)


def _wnid(synset: Any) -> str:
    """ImageNet-style id of a noun synset: "n" + its 8-digit WordNet 3.0 offset."""
    return f"{synset.pos()}{synset.offset():08d}"


def _lookup_synset(wordnet: Any, spec: str) -> Any:
    """A noun synset from a wnid or an nltk synset name, or a TaxonomyError naming `spec`."""
    try:
        if len(spec) == 9 and spec[0] == "n" and spec[1:].isdigit():
            synset = wordnet.synset_from_pos_and_offset("n", int(spec[1:]))
        else:
            synset = wordnet.synset(spec)
    except Exception as error:  # nltk raises WordNetError, ValueError or AttributeError by input shape
        raise TaxonomyError(f"unknown WordNet synset {spec!r}") from error
    if synset is None or synset.pos() != "n":
        raise TaxonomyError(f"{spec!r} is not a WordNet noun synset")
    return synset


# Custom taxonomy files ---------------------------------------------------------------------------------


def from_children(
    root: str,
    classes: Sequence[str],
    children: Mapping[str, Sequence[str]],
    names: Mapping[str, str] | None = None,
    key: str = "custom",
) -> Taxonomy:
    """A taxonomy from a root, classes in model output order, parent -> children edges and display names."""
    root = _label(root, "root")
    class_labels = [_label(value, "classes") for value in classes]
    if not class_labels:
        raise TaxonomyError("'classes' is empty")
    _raise_on_duplicates(class_labels, "class")
    parents = _parents_from_children(root, children)
    reachable = _reachable_without_cycles(root, parents)
    unreachable = sorted(set(parents) - reachable)
    if unreachable:
        raise TaxonomyError(f"nodes not reachable from root {root!r}: {', '.join(map(repr, unreachable))}")
    unknown = [label for label in class_labels if label not in reachable]
    if unknown:
        raise TaxonomyError(f"classes not in the tree under root {root!r}: {', '.join(map(repr, unknown))}")
    node_names = {node: node for node in parents}
    for node, name in (names or {}).items():
        node = _label(node, "names")
        if node not in parents:
            raise TaxonomyError(f"names: unknown label {node!r}")
        if not isinstance(name, str) or not name.strip():
            raise TaxonomyError(f"names: display name of {node!r} must be a non-empty string")
        node_names[node] = name
    paths = _enumerate_paths(parents, class_labels)
    display = tuple(node_names[label] for label in class_labels)
    return Taxonomy(key, tuple(class_labels), display, tuple(paths), node_names)


def from_text(text: str, source: str = "taxonomy", key: str = "custom") -> Taxonomy:
    """A custom taxonomy from YAML or JSON text with keys root, classes, children and optional names.

    YAML aliases are refused (a taxonomy has no use for them, and nested ones make a few bytes stand for
    billions of labels), and so is nesting too deep to read.
    """
    import yaml

    class NoAliasLoader(yaml.SafeLoader):
        """A safe loader that refuses aliases (*name)."""

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                raise yaml.YAMLError(f"aliases such as *{self.peek_event().anchor} are not allowed")
            return super().compose_node(parent, index)

    try:
        document = yaml.load(text, Loader=NoAliasLoader)
    except yaml.YAMLError as error:
        raise TaxonomyError(f"{source} is not valid YAML or JSON: {error}") from error
    except RecursionError:
        raise TaxonomyError(f"{source} is nested too deeply to be a taxonomy") from None
    if not isinstance(document, dict):
        raise TaxonomyError(f"{source} must hold a mapping with keys root, classes, children, names")
    unexpected = sorted(set(document) - {"root", "classes", "children", "names"})
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
    return from_children(document["root"], classes, children, names, key=key)


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


def _label(value: object, where: str) -> str:
    """A node label: a non-empty string, or an integer written as a string (YAML reads `0` as a number)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value
    raise TaxonomyError(f"{where}: labels must be non-empty strings, got {reprlib.repr(value)}")


def _parents_from_children(root: str, children: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
    """Invert parent -> children into node -> parents, refusing duplicate children."""
    parents: dict[str, list[str]] = {root: []}
    for raw_parent, raw_kids in children.items():
        parent = _label(raw_parent, "children")
        parents.setdefault(parent, [])
        seen: set[str] = set()
        for raw_kid in raw_kids:
            kid = _label(raw_kid, f"children of {parent!r}")
            if kid in seen:
                raise TaxonomyError(f"duplicate child {kid!r} under {parent!r}")
            seen.add(kid)
            parents.setdefault(kid, []).append(parent)
    return {node: tuple(node_parents) for node, node_parents in parents.items()}


def _reachable_without_cycles(root: str, parents: Mapping[str, Sequence[str]]) -> set[str]:
    """Nodes reachable from the root; raises TaxonomyError naming a cycle met on the way."""
    children: dict[str, list[str]] = {}
    for node, node_parents in parents.items():
        for parent in node_parents:
            children.setdefault(parent, []).append(node)
    done: set[str] = set()
    trail: list[str] = [root]
    on_trail = {root}
    stack = [iter(children.get(root, []))]
    while stack:
        kid = next(stack[-1], None)
        if kid is None:
            stack.pop()
            finished = trail.pop()
            on_trail.discard(finished)
            done.add(finished)
            continue
        if kid in on_trail:
            cycle = trail[trail.index(kid) :] + [kid]
            raise TaxonomyError(f"cycle: {' -> '.join(map(repr, cycle))}")
        if kid not in done:
            trail.append(kid)
            on_trail.add(kid)
            stack.append(iter(children.get(kid, [])))
    return done
