"""Class taxonomies and the WordNet-weighted MAD distance between classes (paper Eq. 3).

The method as implemented: docs/architecture.md, Distance.

A taxonomy is a rooted DAG (a node may have several parents, as in WordNet). Each class has one or more
hypernym paths root -> class; the root is at depth 0 and an edge from a parent at depth l weighs 2**-l.
The distance between two classes is the minimum, over every pair of their paths, of the weight of the
edges below the paths' deepest common node. Pure: where taxonomies come from (files, timm's class lists,
WordNet) is app.core.taxonomy_sources and app.core.wordnet.
"""

from __future__ import annotations

import reprlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache, cached_property
from typing import Any

import numpy as np

HierarchyPath = tuple[str, ...]

_BLOCK_CELLS = 4_000_000
"""Cells of the path-by-path table computed at once (~25 bytes each), to bound memory on large taxonomies."""
MAX_CLASSES = 10_000
"""Most classes of a taxonomy: the distance matrix is classes² float64 (0.8 GB at the limit)."""
MAX_NODES = 100_000
"""Most nodes of a custom taxonomy (WordNet's noun hierarchy has 82,115)."""
MAX_PATHS_PER_CLASS = 64
"""Most root paths to one class (ImageNet-1k's most is 5); a ladder of nodes with two parents each doubles
them per level."""
MAX_PATHS = 50_000
"""Most root paths of all classes together (ImageNet-1k has 1,343)."""


class TaxonomyError(ValueError):
    """A taxonomy that cannot be built: bad file, unknown label, cycle, duplicate, missing WordNet data."""


def path_distance(p: HierarchyPath, q: HierarchyPath) -> float:
    """d(p, q) = Σ_{l=c}^{D1-1} 2^-l + Σ_{l=c}^{D2-1} 2^-l = 2^(2-c) - 2^(1-D1) - 2^(1-D2) (Eq. 3).

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
    """Classes in model output order, their display names, each class's root -> class paths, and what each
    class means (its definition for annotators: a WordNet gloss, a custom file's description; "" if none)."""

    key: str
    classes: tuple[str, ...]
    names: tuple[str, ...]
    paths: tuple[tuple[HierarchyPath, ...], ...]
    node_names: Mapping[str, str] = field(repr=False)
    definitions: tuple[str, ...] = field(default=(), repr=False)
    translations: Mapping[str, Mapping[str, tuple[str, str]]] = field(default_factory=dict, repr=False)
    """Per language (a tag such as "de"): class label -> (its name, its description; "" where not given)."""

    def __post_init__(self) -> None:
        """Check the invariants every constructor relies on."""
        if not self.classes:
            raise TaxonomyError(f"taxonomy {self.key!r} has no classes")
        if len(self.classes) > MAX_CLASSES:
            raise TaxonomyError(f"{len(self.classes):,} classes; at most {MAX_CLASSES:,} are allowed")
        if not len(self.classes) == len(self.names) == len(self.paths):
            raise TaxonomyError("classes, names and paths must have the same length")
        if self.definitions and len(self.definitions) != len(self.classes):
            raise TaxonomyError("definitions, when given, must have one entry per class")
        _raise_on_duplicates(self.classes, "class")
        _raise_on_duplicates(self.names, "display name")
        roots = {path[0] for class_paths in self.paths for path in class_paths}
        if len(roots) != 1:
            raise TaxonomyError(f"taxonomy {self.key!r} has several roots: {sorted(roots)}")
        for label, class_paths in zip(self.classes, self.paths, strict=True):
            if not class_paths or any(path[-1] != label for path in class_paths):
                raise TaxonomyError(f"class {label!r} needs paths from the root that end at it")

    def definition(self, index: int) -> str:
        """What the class at this output index means, or "" when the taxonomy does not say."""
        return self.definitions[index] if self.definitions else ""

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
        """d(a, b) = min over paths p of a, q of b of path_distance(p, q) (Eq. 3)."""
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
    rows = max(1, _BLOCK_CELLS // len(flat))
    for begin in range(0, len(flat), rows):
        block = nodes[begin : begin + rows]
        common = np.zeros((len(block), len(flat)), dtype=np.int32)
        shared = np.ones((len(block), len(flat)), dtype=bool)
        for depth in range(longest):
            shared &= (block[:, depth, None] == nodes[None, :, depth]) & (block[:, depth, None] >= 0)
            common += shared
        below_common = 2.0 ** (2 - (common - 1))
        pair = below_common - leaf_weight[begin : begin + len(block), None] - leaf_weight[None, :]
        per_path_to_class[begin : begin + len(block)] = np.minimum.reduceat(pair, starts, axis=1)
    return np.minimum.reduceat(per_path_to_class, starts, axis=0)


def enumerate_paths(
    parents: Mapping[str, Sequence[str]], leaves: Iterable[str]
) -> list[tuple[HierarchyPath, ...]]:
    """All root -> leaf paths of each leaf in a DAG given as node -> parents (a root has no parents).

    They are counted first (count(node) = Σ count(parent), polynomial however many there are): a taxonomy
    with more than MAX_PATHS_PER_CLASS paths to a class or MAX_PATHS in all is refused before any is made.
    """
    leaves = list(leaves)
    _refuse_too_many_paths(parents, leaves)

    @cache
    def paths_to(node: str) -> tuple[HierarchyPath, ...]:
        if not parents[node]:
            return ((node,),)
        return tuple(path + (node,) for parent in parents[node] for path in paths_to(parent))

    return [paths_to(leaf) for leaf in leaves]


def _refuse_too_many_paths(parents: Mapping[str, Sequence[str]], leaves: Sequence[str]) -> None:
    """TaxonomyError when a class has more than MAX_PATHS_PER_CLASS root paths, or all have more than
    MAX_PATHS (each node's count is the sum of its parents', computed once per node in post-order)."""
    counts: dict[str, int] = {}
    for leaf in leaves:
        stack = [leaf]
        while stack:
            node = stack[-1]
            pending = [parent for parent in parents[node] if parent not in counts]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            counts[node] = sum(counts[parent] for parent in parents[node]) or 1
    worst = max(leaves, key=counts.__getitem__)
    if counts[worst] > MAX_PATHS_PER_CLASS:
        raise TaxonomyError(
            f"class {worst!r} has {counts[worst]:,} paths from the root (at most {MAX_PATHS_PER_CLASS} are "
            "allowed): nodes with several parents, level after level, multiply the paths; give fewer parents"
        )
    total = sum(counts[leaf] for leaf in leaves)
    if total > MAX_PATHS:
        raise TaxonomyError(f"the classes have {total:,} paths from the root in all; at most {MAX_PATHS:,}")


def unique_names(
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


# Building a taxonomy from parent -> children edges ------------------------------------------------------


def from_children(
    root: str,
    classes: Sequence[str],
    children: Mapping[str, Sequence[str]],
    names: Mapping[str, str] | None = None,
    key: str = "custom",
    descriptions: Mapping[str, str] | None = None,
) -> Taxonomy:
    """A taxonomy from a root, classes in model output order, parent -> children edges, display names and
    descriptions of classes (what annotators read when unsure)."""
    root = _label(root, "root")
    class_labels = [_label(value, "classes") for value in classes]
    if not class_labels:
        raise TaxonomyError("'classes' is empty")
    if len(class_labels) > MAX_CLASSES:
        raise TaxonomyError(f"{len(class_labels):,} classes; at most {MAX_CLASSES:,} are allowed")
    _raise_on_duplicates(class_labels, "class")
    parents = _parents_from_children(root, children)
    if len(parents) > MAX_NODES:
        raise TaxonomyError(f"{len(parents):,} nodes; at most {MAX_NODES:,} are allowed")
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
    described = _descriptions(descriptions or {}, set(class_labels))
    paths = enumerate_paths(parents, class_labels)
    display = tuple(node_names[label] for label in class_labels)
    definitions = tuple(described.get(label, "") for label in class_labels) if described else ()
    return Taxonomy(key, tuple(class_labels), display, tuple(paths), node_names, definitions)


def _descriptions(descriptions: Mapping[Any, object], classes: set[str]) -> dict[str, str]:
    """Each described class's text, checked: a class of the taxonomy and a non-empty string."""
    checked = {}
    for label, text in descriptions.items():
        label = _label(label, "descriptions")
        if label not in classes:
            raise TaxonomyError(f"descriptions: {label!r} is not a class")
        if not isinstance(text, str) or not text.strip():
            raise TaxonomyError(f"descriptions: the description of {label!r} must be a non-empty string")
        checked[label] = " ".join(text.split())
    return checked


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
