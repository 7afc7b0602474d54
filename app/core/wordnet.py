"""Open WordNet 3.0 with nltk, from nltk's own data or from a plain dict directory (Debian's packages), and
build taxonomies over its noun synsets."""

from __future__ import annotations

import atexit
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.core.taxonomy import Taxonomy, TaxonomyError, enumerate_paths, unique_names

if TYPE_CHECKING:
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

DEBIAN_WORDNET_DIR = Path("/usr/share/wordnet")

INSTALL_HINT = (
    "WordNet 3.0 data is not installed. Either run `python -m nltk.downloader wordnet`, or offline on "
    "Debian/Ubuntu `apt-get install wordnet-base wordnet-sense-index` (dict files in /usr/share/wordnet)."
)

# lexnames(5WN): lexicographer file number, name and syntactic category; nltk >= 3.9 needs this file and
# Debian's wordnet-base omits it.
LEXICOGRAPHER_FILES: tuple[tuple[str, int], ...] = (
    ("adj.all", 3),
    ("adj.pert", 3),
    ("adv.all", 4),
    ("noun.Tops", 1),
    ("noun.act", 1),
    ("noun.animal", 1),
    ("noun.artifact", 1),
    ("noun.attribute", 1),
    ("noun.body", 1),
    ("noun.cognition", 1),
    ("noun.communication", 1),
    ("noun.event", 1),
    ("noun.feeling", 1),
    ("noun.food", 1),
    ("noun.group", 1),
    ("noun.location", 1),
    ("noun.motive", 1),
    ("noun.object", 1),
    ("noun.person", 1),
    ("noun.phenomenon", 1),
    ("noun.plant", 1),
    ("noun.possession", 1),
    ("noun.process", 1),
    ("noun.quantity", 1),
    ("noun.relation", 1),
    ("noun.shape", 1),
    ("noun.state", 1),
    ("noun.substance", 1),
    ("noun.time", 1),
    ("verb.body", 2),
    ("verb.change", 2),
    ("verb.cognition", 2),
    ("verb.communication", 2),
    ("verb.competition", 2),
    ("verb.consumption", 2),
    ("verb.contact", 2),
    ("verb.creation", 2),
    ("verb.emotion", 2),
    ("verb.motion", 2),
    ("verb.perception", 2),
    ("verb.possession", 2),
    ("verb.social", 2),
    ("verb.stative", 2),
    ("verb.weather", 2),
    ("adj.ppl", 3),
)

DICT_FILES: tuple[str, ...] = tuple(
    [f"{kind}.{pos}" for kind in ("data", "index") for pos in ("noun", "verb", "adj", "adv")]
    + [f"{pos}.exc" for pos in ("noun", "verb", "adj", "adv")]
    + ["index.sense"]
)


def lexnames_text() -> str:
    """The 45-line `lexnames` file: "NN<TAB>name<TAB>category" per line (WordNet lexnames(5WN))."""
    return "".join(
        f"{number:02d}\t{name}\t{category}\n" for number, (name, category) in enumerate(LEXICOGRAPHER_FILES)
    )


def stage_wordnet_dict(dict_dir: Path, nltk_data_dir: Path) -> Path:
    """Copy a WordNet dict dir to `nltk_data_dir/corpora/wordnet/`, add `lexnames`, return nltk_data_dir.

    Copies, not symlinks: nltk's corpus reader refuses paths that resolve outside its root.
    """
    missing = [name for name in DICT_FILES if not (dict_dir / name).is_file()]
    if missing:
        raise TaxonomyError(f"{dict_dir} lacks WordNet files {', '.join(missing)}. {INSTALL_HINT}")
    target = nltk_data_dir / "corpora" / "wordnet"
    target.mkdir(parents=True, exist_ok=True)
    for name in DICT_FILES:
        shutil.copyfile(dict_dir / name, target / name)
    (target / "lexnames").write_text(lexnames_text())
    return nltk_data_dir


def open_wordnet_dict(nltk_data_dir: Path) -> WordNetCorpusReader:
    """nltk's WordNet reader over `nltk_data_dir/corpora/wordnet/`; registers the dir as NLTK_DATA would."""
    import nltk
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    if str(nltk_data_dir) not in nltk.data.path:
        nltk.data.path.insert(0, str(nltk_data_dir))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The multilingual functions are not available")
        return WordNetCorpusReader(str(nltk_data_dir / "corpora" / "wordnet"), None)


@lru_cache(maxsize=1)
def default_wordnet() -> WordNetCorpusReader:
    """nltk's WordNet if its data is installed, else Debian's dict staged once per process, else an error."""
    try:
        from nltk.corpus import wordnet
    except ImportError as error:
        raise TaxonomyError(f"nltk is not installed. {INSTALL_HINT}") from error
    try:
        wordnet.ensure_loaded()
        return wordnet
    except LookupError:
        pass
    if not DEBIAN_WORDNET_DIR.is_dir():
        raise TaxonomyError(INSTALL_HINT)
    staging = Path(tempfile.mkdtemp(prefix="mad-wordnet-"))
    atexit.register(shutil.rmtree, staging, True)
    return open_wordnet_dict(stage_wordnet_dict(DEBIAN_WORDNET_DIR, staging))


def from_wordnet(synsets: Sequence[str], key: str = "wordnet") -> Taxonomy:
    """A taxonomy over WordNet noun synsets given as wnids ("n01847000") or names ("drake.n.02"), each
    class defined by its gloss."""
    wordnet = default_wordnet()
    parents: dict[str, tuple[str, ...]] = {}
    node_names: dict[str, str] = {}
    lemma_lists: list[list[str]] = []
    wnids: list[str] = []
    glosses: list[str] = []
    for spec in synsets:
        synset = _lookup_synset(wordnet, spec)
        wnids.append(_wnid(synset))
        glosses.append(synset.definition())
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
    paths = enumerate_paths(parents, wnids)
    names = unique_names(lemma_lists, paths, node_names)
    return Taxonomy(key, tuple(wnids), names, tuple(paths), node_names, tuple(glosses))


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
