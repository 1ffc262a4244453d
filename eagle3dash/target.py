"""A target model on disk, read without torch: its config, decoder depth, vocabulary and weight
size.

Used to propose the served model's local folder as the target path (on the GPU box the endpoint's
model path is often a folder here) and to tell the target's depth without loading it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from eagle3dash.errors import InputError

WEIGHT_SUFFIXES = (".safetensors", ".bin")


@dataclass(frozen=True)
class Vocabulary:
    """The target's vocabulary where it is known: its size, and where that was read (a file)."""

    size: int
    source: str


class TargetError(InputError):
    """A target folder whose config cannot be read; the message names the file."""


def read_config(target_path: str | Path) -> tuple[Path, dict]:
    """(config.json's path, its object) of a model directory or of the config file itself."""
    path = Path(target_path)
    cfg = path if path.is_file() else path / "config.json"
    if not cfg.is_file():
        raise TargetError(f"{path}: no config.json; not a Hugging Face model directory")
    try:
        config = json.loads(cfg.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise TargetError(f"{cfg}: cannot be read as JSON: {e}") from e
    if not isinstance(config, dict):
        raise TargetError(f"{cfg}: expected a JSON object, got {type(config).__name__}")
    return cfg, config


def num_layers(target_path: str | Path) -> int:
    """The decoder block count N (`num_hidden_layers`, top level or in `text_config` /
    `language_config` for multimodal wrappers)."""
    cfg, config = read_config(target_path)
    for where in (config, config.get("text_config"), config.get("language_config")):
        if isinstance(where, dict) and isinstance(where.get("num_hidden_layers"), int):
            return int(where["num_hidden_layers"])
    raise TargetError(
        f"{cfg}: no integer num_hidden_layers (top level or in text_config); "
        "cannot tell how many decoder blocks the target has"
    )


def vocabulary(target_path: str | Path | None) -> Vocabulary | None:
    """The target's vocabulary (config.json `vocab_size`, top level or in `text_config` /
    `language_config`); None without a local target or a readable config that says it (a
    folder of tokenizer files only)."""
    if not target_path:
        return None
    try:
        cfg, config = read_config(Path(target_path).expanduser())
    except TargetError:
        return None
    for where in (config, config.get("text_config"), config.get("language_config")):
        size = where.get("vocab_size") if isinstance(where, dict) else None
        if isinstance(size, int) and not isinstance(size, bool) and size > 0:
            return Vocabulary(size, f"vocab_size in {cfg}")
    return None


@dataclass(frozen=True)
class LocalTarget:
    """A target model folder on this machine."""

    path: str
    num_layers: int
    weight_bytes: int  # the weight files' total size

    def to_dict(self) -> dict:
        """JSON form."""
        return {"path": self.path, "num_layers": self.num_layers, "weight_bytes": self.weight_bytes}


def local_target(path: str | Path | None) -> LocalTarget | None:
    """The model folder at `path` when it exists here with a readable config.json, else None."""
    if not path:
        return None
    folder = Path(path).expanduser()
    if not (folder / "config.json").is_file():
        return None
    try:
        depth = num_layers(folder)
    except TargetError:
        return None
    size = sum(f.stat().st_size for f in folder.iterdir() if f.name.endswith(WEIGHT_SUFFIXES))
    return LocalTarget(str(folder.resolve()), depth, size)
