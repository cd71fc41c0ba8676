"""A checkpoint's `config.json` read field by field: `local_folder(path)` finds it (a local
folder only), `parse_config(file)` refuses a file that is not a JSON object, and
`Fields(cfg, file)` reads each field with its JSON type and range, so a missing or mistyped
one is one `CheckpointError` line naming the file and the key (where the plain dict gave a
`KeyError`, a `ValueError` or a model of the wrong shape)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rope_lab.typed import ConfigError

if TYPE_CHECKING:
    from rope_lab.config import ModelConfig

MISSING: Any = object()


class CheckpointError(ConfigError):
    """A checkpoint folder or config that rope_lab cannot load, with the reason."""


def local_folder(path: str | Path) -> Path:
    """`path` as an existing local folder holding config.json; CheckpointError otherwise (a
    hub name or URL is refused: rope_lab never downloads)."""
    text = str(path)
    if "://" in text:
        raise CheckpointError(f"{text}: not a local folder (rope_lab reads local checkpoints only)")
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise CheckpointError(
            f"{text}: no such local folder (rope_lab reads local checkpoints only; download "
            "the checkpoint first, e.g. `huggingface-cli download NAME --local-dir DIR`)"
        )
    if not (folder / "config.json").is_file():
        raise CheckpointError(f"{folder}: no config.json, not a Hugging Face checkpoint folder")
    return folder


def size_keys(model: ModelConfig, vocab_size: int) -> dict[str, int]:
    """The keys of an exported config.json that every family spells alike: vocabulary, width,
    MLP width, depth and (key/value) heads."""
    return {
        "vocab_size": vocab_size,
        "hidden_size": model.width,
        "intermediate_size": model.d_mlp,
        "num_hidden_layers": model.depth,
        "num_attention_heads": model.n_heads,
        "num_key_value_heads": model.n_kv_heads,
    }


def parse_config(file: Path) -> dict[str, Any]:
    """The JSON object in `file`; CheckpointError naming the file when it is not UTF-8 JSON
    or not an object."""
    try:
        cfg = json.loads(file.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise CheckpointError(f"{file}: not UTF-8 text") from None
    except json.JSONDecodeError as err:
        raise CheckpointError(
            f"{file}: not valid JSON ({err.msg} at line {err.lineno} column {err.colno})"
        ) from None
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{file}: not a JSON object (got {_json_kind(cfg)})")
    return cfg


def _json_kind(value: Any) -> str:
    kinds = {list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


def is_number(value: Any) -> bool:
    """A JSON number (a boolean is not one)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


class Fields:
    """Typed access to the JSON object `cfg` read from `file`; keys are named `prefix` + key
    in errors (`rope_parameters.factor`)."""

    def __init__(self, cfg: dict[str, Any], file: str, prefix: str = "") -> None:
        self.cfg, self.file, self.prefix = cfg, file, prefix

    def error(self, key: str, problem: str) -> CheckpointError:
        """The one-line error for `key`: `FILE: PREFIX.KEY PROBLEM`."""
        return CheckpointError(f"{self.file}: {self.prefix}{key} {problem}")

    def get(self, key: str, default: Any = MISSING) -> Any:
        """The raw value; a JSON null counts as absent; CheckpointError when absent without a
        default."""
        value = self.cfg.get(key)
        if value is None:
            if default is MISSING:
                raise self.error(key, "is missing")
            return default
        return value

    def integer(self, key: str, default: Any = MISSING, minimum: int = 1) -> Any:
        """An integer >= `minimum` (the default, which may be None, when absent)."""
        value = self.get(key, default)
        if value is default and default is not MISSING:
            return value
        if not (isinstance(value, int) and not isinstance(value, bool)) or value < minimum:
            raise self.error(key, f"must be an integer >= {minimum}, got {value!r}")
        return value

    def number(self, key: str, default: Any = MISSING, minimum: float | None = None,
               positive: bool = False) -> Any:  # fmt: skip
        """A number (>= `minimum`, or > 0 when `positive`)."""
        value = self.get(key, default)
        if value is default and default is not MISSING:
            return value
        if not is_number(value):
            raise self.error(key, f"must be a number, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.error(key, f"must be a number >= {minimum:g}, got {value!r}")
        if positive and value <= 0:
            raise self.error(key, f"must be a number > 0, got {value!r}")
        return float(value)

    def boolean(self, key: str, default: bool) -> bool:
        """true or false."""
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {value!r}")
        return value

    def string(self, key: str, default: Any = MISSING) -> Any:
        """A string."""
        value = self.get(key, default)
        if value is default and default is not MISSING:
            return value
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, got {value!r}")
        return value

    def numbers(self, key: str) -> tuple[float, ...]:
        """A list of numbers."""
        value = self.get(key)
        if not (isinstance(value, list) and all(is_number(x) for x in value)):
            raise self.error(key, f"must be a list of numbers, got {value!r}")
        return tuple(float(x) for x in value)
