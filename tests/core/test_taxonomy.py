"""Taxonomies and the WordNet-weighted distance (paper Eq. 3, Fig. 2; docs/architecture.md, Distance)."""

import itertools
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from app.core.taxonomy import TaxonomyError, from_children
from app.core.taxonomy_sources import from_file, from_text, imagenet_1k, imagenet_a, load_taxonomy
from app.core.wordnet import DEBIAN_WORDNET_DIR, from_wordnet, lexnames_text, stage_wordnet_dict

REPO = Path(__file__).resolve().parents[2]
FOUNTAIN, CHURCH, DRAKE, COOT = "n03388043", "n03028079", "n01847000", "n02018207"


def literal_distance(p: tuple[str, ...], q: tuple[str, ...]) -> float:
    """docs/architecture.md, Distance, word for word: common node at depth c, leaves at depths D1, D2."""
    c = max(depth for depth in range(min(len(p), len(q))) if p[: depth + 1] == q[: depth + 1])
    return sum(2**-level for level in range(c, len(p) - 1)) + sum(2**-level for level in range(c, len(q) - 1))


def literal_class_distance(paths_a, paths_b) -> float:
    return min(literal_distance(p, q) for p in paths_a for q in paths_b)


DIGITS = {
    "root": "digit",
    "classes": ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"],
    "names": {"0": "zero", "1": "one", "round": "round digits"},
    "children": {
        "digit": ["round", "straight"],
        "round": ["0", "2", "3", "loop"],
        "loop": ["6", "8", "9"],
        "straight": ["1", "2", "4", "5", "7"],
        "5": ["3"],
    },
}


def test_figure_2_distances_are_exact():
    taxonomy = imagenet_1k()
    assert taxonomy.distance(FOUNTAIN, CHURCH) == 0.0859375
    assert taxonomy.distance(DRAKE, COOT) == 0.003662109375
    matrix, index = taxonomy.distance_matrix(), taxonomy.index_of
    assert matrix[index(FOUNTAIN), index(CHURCH)] == 0.0859375
    assert matrix[index(DRAKE), index(COOT)] == 0.003662109375


def test_fountain_path_is_wordnets():
    # entity, physical entity, object, whole, artifact, structure, fountain (WordNet 3.0)
    expected = ("n00001740", "n00001930", "n00002684", "n00003553", "n00021939", "n04341686", FOUNTAIN)
    assert imagenet_1k().paths[imagenet_1k().index_of(FOUNTAIN)] == (expected,)


def test_imagenet_matrix_shape_diagonal_symmetry_and_order():
    taxonomy = imagenet_1k()
    matrix = taxonomy.distance_matrix()
    assert matrix.shape == (1000, 1000) and matrix.dtype == np.float64
    assert np.all(np.diag(matrix) == 0)
    assert np.array_equal(matrix, matrix.T)
    assert np.all(matrix[~np.eye(1000, dtype=bool)] > 0)
    assert taxonomy.classes[0] == "n01440764" and taxonomy.names[0] == "tench"
    assert taxonomy.classes[-1] == "n15075141"
    assert not matrix.flags.writeable
    assert taxonomy.distance_matrix() is matrix


def test_imagenet_matrix_matches_literal_formula_on_sampled_pairs():
    taxonomy = imagenet_1k()
    matrix = taxonomy.distance_matrix()
    rng = np.random.default_rng(7)
    multi_path = [index for index, paths in enumerate(taxonomy.paths) if len(paths) > 1]
    pairs = list(zip(rng.integers(0, 1000, 3000), rng.integers(0, 1000, 3000), strict=True))
    pairs += list(zip(rng.choice(multi_path, 1000), rng.choice(multi_path, 1000), strict=True))
    for a, b in pairs:
        assert matrix[a, b] == literal_class_distance(taxonomy.paths[a], taxonomy.paths[b])


def test_distance_does_not_depend_on_path_order():
    # The paper's released code reversed paths in place inside its loop, so the answer depended on how
    # often a path had been visited; here every order of the same paths gives the same matrix.
    taxonomy = imagenet_1k()
    multi = [label for label, paths in zip(taxonomy.classes, taxonomy.paths, strict=True) if len(paths) >= 3]
    reordered = from_children(taxonomy.root, multi, _children_of(taxonomy, multi))
    rows = [taxonomy.index_of(label) for label in multi]
    sub = taxonomy.distance_matrix()[np.ix_(rows, rows)]
    assert np.array_equal(reordered.distance_matrix(), sub)
    for a, b in itertools.product(range(len(multi)), repeat=2):
        paths_a = reordered.paths[a][::-1]
        paths_b = reordered.paths[b][::-1]
        assert literal_class_distance(paths_a, paths_b) == sub[a, b]


def _children_of(taxonomy, labels):
    """parent -> children edges of the given classes' paths, children listed in reverse of WordNet order."""
    edges: dict[str, list[str]] = {}
    for label in labels:
        for path in taxonomy.paths[taxonomy.index_of(label)]:
            for parent, child in itertools.pairwise(path):
                if child not in edges.setdefault(parent, []):
                    edges[parent].insert(0, child)
    return edges


def test_imagenet_a_is_the_matching_submatrix():
    full, subset = imagenet_1k(), imagenet_a()
    assert len(subset.classes) == 200
    rows = [full.index_of(label) for label in subset.classes]
    assert np.array_equal(subset.distance_matrix(), full.distance_matrix()[np.ix_(rows, rows)])
    assert subset.classes[0] == "n01498041"


def test_display_names_are_unique_and_disambiguated():
    taxonomy = imagenet_1k()
    assert len(set(taxonomy.names)) == 1000
    names = dict(zip(taxonomy.classes, taxonomy.names, strict=True))
    assert names["n02012849"] == "crane (wading bird)"
    assert names["n03126707"] == "crane (lifting device)"
    assert names[DRAKE] == "drake"


def test_ancestors_and_superclasses():
    taxonomy = imagenet_1k()
    ancestors = {taxonomy.node_names[node] for node in taxonomy.ancestors(DRAKE)}
    assert {"entity", "animal", "bird", "duck"} <= ancestors and "drake" not in ancestors
    nodes, membership = taxonomy.superclasses()
    assert taxonomy.root not in nodes
    for node, row in zip(nodes, membership, strict=True):
        expected = [node in taxonomy.ancestors(label) for label in taxonomy.classes]
        assert row.tolist() == expected and row.sum() >= 2


def test_custom_dag_distances_by_hand():
    taxonomy = from_children(DIGITS["root"], DIGITS["classes"], DIGITS["children"], DIGITS["names"])
    d = taxonomy.distance
    assert d("0", "0") == 0.0
    assert d("0", "1") == 2 * (1 + 0.5)  # through the root: edges at depths 0 and 1 on each side
    assert d("6", "8") == 2 * 0.25  # siblings under loop (depth 2)
    assert d("0", "6") == 0.5 + 0.5 + 0.25  # common node round (depth 1)
    assert d("2", "0") == 1.0 and d("2", "1") == 1.0  # "2" has two parents: the nearer one counts
    assert d("3", "0") == 1.0  # via round; via straight -> 5 -> 3 it would be 2 + 0.5 + 0.25
    assert d("3", "5") == 0.25  # 5 is a parent of 3 (a class above a class)
    assert taxonomy.names[:3] == ("zero", "one", "2")
    assert taxonomy.node_names["round"] == "round digits"
    matrix = taxonomy.distance_matrix()
    for a, b in itertools.product(range(10), repeat=2):
        assert matrix[a, b] == literal_class_distance(taxonomy.paths[a], taxonomy.paths[b])


def test_custom_file_yaml_and_json(tmp_path):
    import yaml

    yaml_file, json_file = tmp_path / "digits.yaml", tmp_path / "digits.json"
    yaml_file.write_text(yaml.safe_dump(DIGITS))
    json_file.write_text(json.dumps(DIGITS))
    from_yaml, from_json = from_file(yaml_file), load_taxonomy(str(json_file))
    assert from_yaml.key == "digits"
    assert from_yaml.classes == from_json.classes == tuple(DIGITS["classes"])
    assert np.array_equal(from_yaml.distance_matrix(), from_json.distance_matrix())


def test_yaml_integer_labels_become_strings(tmp_path):
    file = tmp_path / "bits.yaml"
    file.write_text("root: bit\nclasses: [0, 1]\nchildren:\n  bit: [0, 1]\n")
    assert from_file(file).classes == ("0", "1")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"children": {"digit": ["round"], "round": ["0", "loop"], "loop": ["round"]}},
            "cycle: 'round' -> 'loop' -> 'round'",
        ),
        ({"classes": ["0", "1", "0"]}, "duplicate class '0'"),
        ({"children": {"digit": ["0", "1", "0"]}}, "duplicate child '0' under 'digit'"),
        ({"children": {"digit": ["0"], "orphan": ["1"]}}, "not reachable from root 'digit': '1', 'orphan'"),
        (
            {"children": {"digit": ["0", "1"]}, "classes": ["0", "1", "7"]},
            "classes not in the tree under root 'digit': '7'",
        ),
        ({"names": {"0": "zero", "eleven": "eleven"}}, "names: unknown label 'eleven'"),
        ({"names": {"0": "nought", "1": "nought"}}, "duplicate display name 'nought'"),
        ({"classes": []}, "'classes' is empty"),
    ],
)
def test_custom_taxonomy_errors_name_the_offender(change, message):
    spec = {**DIGITS, **change}
    with pytest.raises(TaxonomyError, match=_literal(message)):
        from_children(spec["root"], spec["classes"], spec["children"], spec["names"])


def test_classes_carry_their_definitions():
    full = imagenet_1k()
    fountain = full.index_of(FOUNTAIN)
    assert full.definition(fountain) == "a structure from which an artificially produced jet of water arises"
    assert all(full.definition(index) for index in range(len(full.classes)))  # every gloss is shipped
    assert imagenet_a().definition(imagenet_a().index_of(FOUNTAIN)) == full.definition(fountain)
    described = from_children(
        DIGITS["root"], DIGITS["classes"], DIGITS["children"], descriptions={0: "a  closed\n loop"}
    )
    assert described.definition(0) == "a closed loop" and described.definition(1) == ""
    assert from_children(DIGITS["root"], DIGITS["classes"], DIGITS["children"]).definition(0) == ""
    with pytest.raises(TaxonomyError, match="descriptions: 'round' is not a class"):
        from_children(DIGITS["root"], DIGITS["classes"], DIGITS["children"], descriptions={"round": "x"})
    with pytest.raises(TaxonomyError, match="the description of '1' must be a non-empty string"):
        from_children(DIGITS["root"], DIGITS["classes"], DIGITS["children"], descriptions={"1": " "})
    demo = load_taxonomy(str(REPO / "app" / "demo" / "digits_taxonomy.yaml"))
    assert all(demo.definition(index).startswith(f"the digit {demo.names[index]}") for index in range(10))


def test_a_taxonomy_file_names_its_classes_per_language():
    demo = load_taxonomy(str(REPO / "app" / "demo" / "digits_taxonomy.yaml"))
    for language, digit in (("de", "die Ziffer"), ("es", "el dígito")):
        named = demo.translations[language]
        assert sorted(named) == list(demo.classes)
        assert all(description.startswith(f"{digit} {name}") for name, description in named.values())
    assert demo.translations["de"]["0"][0] == "Null"  # quoted: YAML would read a bare Null as nothing


@pytest.mark.parametrize(
    ("translations", "message"),
    [
        ({"de": {"names": {"9": "Neun"}}}, "translations.de.names: unknown class '9'"),
        ({"German": {"names": {"0": "Null"}}}, "translations.German: a language is a tag such as de"),
        ({"de": {"names": {"0": None}}}, "translations.de.names: the text of '0' must be a non-empty string"),
        ({"de": {"names": {"0": "Eins", "1": "Eins"}}}, "translations.de.names: two classes have the same"),
        ({"de": {"labels": {}}}, "translations.de must be a mapping with keys names and descriptions"),
        ({"de": {"descriptions": ["x"]}}, "translations.de.descriptions must map classes to text"),
        (["de"], "'translations' must map languages to their names and descriptions"),
    ],
)
def test_bad_translations_in_a_taxonomy_file_are_refused(translations, message):
    document = {"root": "digit", "classes": ["0", "1"], "children": {"digit": ["0", "1"]}}
    with pytest.raises(TaxonomyError, match=re.escape(message)):
        from_text(json.dumps({**document, "translations": translations}))


def _literal(text: str) -> str:
    return re.escape(text)


def test_missing_root_and_bad_files(tmp_path):
    file = tmp_path / "noroot.yaml"
    file.write_text("classes: [a]\nchildren: {}\n")
    with pytest.raises(TaxonomyError, match="missing 'root'"):
        from_file(file)
    file.write_text("root: [\n")
    with pytest.raises(TaxonomyError, match="not valid YAML"):
        from_file(file)
    with pytest.raises(TaxonomyError, match="unknown taxonomy 'imagenet-2k'"):
        load_taxonomy("imagenet-2k")
    with pytest.raises(TaxonomyError, match="unknown class 'n00000000'"):
        imagenet_1k().index_of("n00000000")


def test_lexnames_has_the_45_lexicographer_files():
    lines = lexnames_text().splitlines()
    assert len(lines) == 45
    assert lines[0] == "00\tadj.all\t3" and lines[3] == "03\tnoun.Tops\t1" and lines[44] == "44\tadj.ppl\t3"


def test_staging_an_incomplete_dict_says_how_to_install(tmp_path):
    with pytest.raises(TaxonomyError, match="apt-get install wordnet-base wordnet-sense-index"):
        stage_wordnet_dict(tmp_path, tmp_path / "nltk_data")


wordnet_installed = pytest.mark.skipif(
    not (DEBIAN_WORDNET_DIR / "data.noun").is_file(), reason="WordNet 3.0 dict files not installed"
)


@wordnet_installed
def test_wordnet_synsets_match_the_shipped_hierarchy():
    full = imagenet_1k()
    labels = list(full.classes[::37]) + [FOUNTAIN, CHURCH, DRAKE, COOT]
    taxonomy = from_wordnet(labels)
    rows = [full.index_of(label) for label in labels]
    assert np.array_equal(taxonomy.distance_matrix(), full.distance_matrix()[np.ix_(rows, rows)])
    by_name = from_wordnet(["drake.n.02", "American_coot.n.01"])
    assert by_name.classes == (DRAKE, COOT)
    assert by_name.definition(0) == full.definition(full.index_of(DRAKE))  # the same gloss as shipped
    assert by_name.distance(DRAKE, COOT) == 0.003662109375
    with pytest.raises(TaxonomyError, match="unknown WordNet synset 'nosuchthing.n.01'"):
        from_wordnet(["nosuchthing.n.01"])


@wordnet_installed
def test_generator_reproduces_the_shipped_hierarchy(tmp_path):
    out = tmp_path / "hierarchy.tsv"
    subprocess.run(
        [sys.executable, "scripts/build_imagenet_hierarchy.py", "--out", str(out)],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    assert out.read_text() == (REPO / "app" / "core" / "data" / "imagenet_hierarchy.tsv").read_text()


def ladder_taxonomy(levels: int) -> str:
    """A ~1 kB-per-20-levels taxonomy whose every level has two nodes, each a child of both nodes above:
    each class has 2**levels root paths."""
    children = {"top": ["a0", "b0"]}
    for level in range(levels - 1):
        children[f"a{level}"] = children[f"b{level}"] = [f"a{level + 1}", f"b{level + 1}"]
    last = levels - 1
    children[f"a{last}"] = children[f"b{last}"] = ["x", "y"]
    return json.dumps({"root": "top", "classes": ["x", "y"], "children": children})


LADDER_PROBE = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (2 * 1024**3, 2 * 1024**3))
from app.core.taxonomy import TaxonomyError
from app.core.taxonomy_sources import from_text
try:
    from_text(sys.stdin.read())
except TaxonomyError as error:
    print("refused:", error)
"""


def test_a_40_level_ladder_is_refused_at_once_not_enumerated():
    """2**40 paths per class: enumerating them never ends (or runs out of memory), so the refusal is checked
    in a subprocess capped at 2 GB and 120 s; the count that refuses it is polynomial."""
    text = ladder_taxonomy(40)
    assert len(text) < 4000
    probe = subprocess.run(
        [sys.executable, "-c", LADDER_PROBE], input=text, capture_output=True, text=True, timeout=120
    )
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert "refused: class 'x' has 1,099,511,627,776 paths from the root" in probe.stdout


def test_ladders_within_the_path_limit_still_work():
    taxonomy = from_children("top", ["x", "y"], json.loads(ladder_taxonomy(6))["children"])
    assert len(taxonomy.paths[0]) == 64
    assert taxonomy.distance("x", "y") == pytest.approx(2 * 2.0**-6)


def test_too_many_classes_or_nodes_are_refused():
    from app.core.taxonomy import MAX_CLASSES, MAX_NODES

    classes = [f"c{index}" for index in range(MAX_CLASSES + 1)]
    with pytest.raises(TaxonomyError, match="classes; at most"):
        from_children("top", classes, {"top": classes})
    nodes = [f"n{index}" for index in range(MAX_NODES)]
    with pytest.raises(TaxonomyError, match="nodes; at most"):
        from_children("top", ["n0"], {"top": nodes})
