"""Reading a YAML config file strictly: a mapping that names a key twice is refused (PyYAML keeps
the last value without a word, so half of a spec would be ignored), and every error names the
file and the line in one line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rope_lab.typed import ConfigError


class _DuplicateKey(yaml.YAMLError):
    """A mapping names a key twice."""


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        first: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in first:
                    raise _DuplicateKey(
                        f"line {line}: duplicate key {key!r} (first at line {first[key]})"
                    )
                first[key] = line
            except TypeError:  # an unhashable key: the constructor's own error names it
                break
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | Path) -> Any:
    """The document of a YAML file (None when empty); ConfigError naming the file (and the
    line) when it cannot be read, is not YAML, or names a key twice in a mapping."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read YAML: {err}") from None
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except _DuplicateKey as err:
        raise ConfigError(f"{path}: {err}") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: cannot read YAML: {err}") from None
