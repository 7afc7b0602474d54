"""YAML and JSON documents read without aliases, for the files admins hand the service (custom taxonomies,
translation files).

Safe loading makes no objects, but it still expands aliases (*name): a few hundred bytes of nested anchors
stand for billions of values (a "billion laughs"), which whatever reads them next (str(), a walk) builds in
memory. These files have no use for aliases, so the loader refuses the first one before anything is expanded.
"""

from typing import Any

import yaml


class DocumentRefused(ValueError):
    """The text is not a YAML or JSON document this loader takes; the message says why."""


class _NoAliasLoader(yaml.SafeLoader):
    """A safe loader that refuses aliases (*name) as it meets them, before composing what they stand for."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise yaml.YAMLError(f"aliases such as *{self.peek_event().anchor} are not allowed")
        return super().compose_node(parent, index)


def load_document(text: str) -> Any:
    """The document of a YAML or JSON text, loaded safely (no tags, no objects) and without aliases;
    DocumentRefused, saying why, for bad YAML, an alias or nesting too deep to read."""
    try:
        return yaml.load(text, Loader=_NoAliasLoader)
    except yaml.YAMLError as error:
        raise DocumentRefused(str(error)) from None
    except RecursionError:
        raise DocumentRefused("it is nested too deeply to read") from None
