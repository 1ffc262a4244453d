"""The pages' path boxes: a path typed on a page is checked as it is typed, first against the
data roots (roots.py: the home, EAGLE3DASH_DATA_ROOTS and the demo's models, all named when a path
is refused, with how to add a root), then for what the box asks for (a model folder, a training
dump, a config file); the box says what it found, or what is wrong, right under it."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from eagle3dash.demo import FIXTURES
from eagle3dash.diagnosis.options import SCHEMA, Kind
from eagle3dash.errors import InputError
from eagle3dash.roots import data_roots, within_roots
from eagle3dash.target import WEIGHT_SUFFIXES, TargetError, local_target, read_config
from eagle3dash.ui import icons
from eagle3dash.ui.fmt import md_escape, size

CHECKPOINT_LABEL = "Checkpoint folder"
PROMPT_LABEL = "Prompt file"
# What replaces a typed path when it cannot be read: the page's upload, where there is one (a
# target, a training dump or a SpecForge draft config has none: see TARGET_NOT_UPLOADED).
UPLOAD_INSTEAD = {
    CHECKPOINT_LABEL: "upload the checkpoint's files instead ('An upload' above)",
    PROMPT_LABEL: "upload the prompt file instead ('Upload a JSONL file' above)",
}
TARGET_NOT_UPLOADED = (
    "A target is not uploaded: the training side is measured by running the target itself on "
    "the served tokens, which needs all its weights (a large target's are hundreds of GB, far "
    "beyond a browser upload); its config and tokenizer alone give its depth and chat template, "
    "not the training side. Give its folder on this machine, or a training dump, or the "
    "training layout (Options)."
)


# The Checkpoints page's upload, an expander under its path box (New run's is a choice above).
CHECKPOINTS_UPLOAD = "upload the checkpoint's files instead ('Upload a checkpoint' below)"


def inside_roots(path: str, label: str, upload: str | None = None) -> str:
    """A typed path, resolved, if it lies under the data roots (the demo's own fixtures, which
    "Try it on the demo" fills in, too); else OutsideRootsError naming them, whether or not it
    exists, and the page's upload (`upload`, else New run's for the label)."""
    return within_roots(
        path, data_roots(), label, also=(FIXTURES,), upload=upload or UPLOAD_INSTEAD.get(label)
    )


def check_option_path(name: str, value: str) -> str:
    """A diagnosis option's typed path checked now: under the data roots, there, and what the
    option asks for; what was found, in words (Markdown). InputError says what is wrong."""
    label = SCHEMA[name].label
    path = Path(inside_roots(value, label))
    if not path.exists():
        raise InputError(f"{label}: {path} does not exist on this machine")
    if name == "target":
        return _target_words(path, label)
    if name == "draft_config":
        config_file, _ = read_config(path)
        return f"Draft config {md_escape(config_file)}"
    if name == "train_states" and not path.is_dir():
        raise InputError(f"{label}: {path} is a file; give the dump's folder")
    return f"Found {md_escape(path)}"


def _target_words(path: Path, label: str) -> str:
    """What a typed target folder holds: its depth and weights, or why it measures nothing."""
    if not path.is_dir():
        raise InputError(f"{label}: {path} is a file; give the target's model folder")
    try:
        read_config(path)
        found = local_target(path)
    except TargetError as e:
        raise InputError(f"{label}: {e}") from None
    if found is None:  # a config without num_hidden_layers
        raise InputError(f"{label}: {path}/config.json names no decoder depth (num_hidden_layers)")
    if not found.weight_bytes:
        kinds = " or ".join(f"*{suffix}" for suffix in WEIGHT_SUFFIXES)
        raise InputError(
            f"{label}: {path} holds no weights ({kinds}): the training side is measured by "
            "running the target on the served tokens, which needs its weights; its config and "
            "tokenizer alone do not measure it"
        )
    return (
        f"Target at {md_escape(found.path)}: {found.num_layers} decoder blocks, "
        f"{size(found.weight_bytes)} of weights"
    )


def show_path_check(where: Any, name: str, value: str) -> None:
    """Under a typed path option's box (`where`: the page or its column): what was found, or
    the one message of what is wrong."""
    if not value.strip():
        return
    try:
        found = check_option_path(name, value.strip())
    except InputError as e:
        where.error(md_escape(str(e)), icon=icons.REFUSED)
    else:
        where.caption(found)


def check_typed_paths(values: Mapping[str, Any]) -> None:
    """The form's path options under the data roots, or OutsideRootsError before anything looks
    at them (on submit: the boxes said so as they were typed)."""
    for name, option in SCHEMA.items():
        value = values.get(name)
        if option.kind is Kind.PATH and isinstance(value, str) and value.strip():
            inside_roots(value, option.label)
