"""What to diagnose and how hard to look: the options of one diagnosis, and their one schema.

Each option's field carries an `Option`: its form label, help text, kind, bounds or choices. The
CLI's diagnose flags, the New run page's widgets and `DiagnoseOptions.parse` (the one check both
interfaces call) are all read from it, so an option is written once.

Values are typed inside (`training_layout` a `Layout`, `temperatures` a tuple of floats); text only
at the edges: a flag or a form field (`parse`), the default shown (`Option.default_text`), and the
JSON a run keeps and its job reads (`to_json` / `from_json`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from enum import Enum
from pathlib import Path
from typing import Any, Literal

from eagle3dash.engines.facts import FALLBACK_ARCH
from eagle3dash.engines.sglang.rules import parse_version, version_text
from eagle3dash.errors import InputError
from eagle3dash.http_client import normalize_url
from eagle3dash.layout import Layout, format_layout, parse_layout
from eagle3dash.profile import parse_temperatures
from eagle3dash.servebench import BUILTIN_PROMPT_SETS
from eagle3dash.trainers import SPECFORGE_SGLANG_VERSION, TRAINERS

DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "bfloat16", "float16")

Naming = Literal["label", "flag"]  # how messages name an option: the form's label or the CLI flag


class Kind(Enum):
    """How an option's value is read and checked."""

    TEXT = "free text"
    PATH = "a path that must exist"
    URL = "an endpoint URL"
    INT = "a whole number within bounds"
    CHOICE = "one of a list"
    SET_OR_FILE = "a built-in set or an existing file"
    LAYOUT = "taps, e.g. 0,3,31"
    TEMPERATURES = "temperatures, e.g. 0,0.7"
    VERSION = "a release, e.g. 0.5.14"
    SWITCH = "on unless switched off (the CLI's --no-<name>)"


@dataclass(frozen=True)
class Option:
    """How one option is asked for (form label, CLI flag, help) and checked (kind and limits)."""

    label: str  # the form's label, and the option's name in the app's messages
    help: str
    kind: Kind = Kind.TEXT
    required: bool = False
    bounds: tuple[int, int] | None = None  # inclusive, for Kind.INT
    choices: tuple[str, ...] = ()  # for Kind.CHOICE and Kind.SET_OR_FILE
    placeholder: str = ""  # what an empty box shows, or the unset entry of a choice
    name: str = ""  # the field's name and default: filled in from the dataclass by SCHEMA
    default: Any = None

    @property
    def flag(self) -> str:
        """The command-line flag, e.g. --num-prompts (--no-profile for a switch)."""
        return ("--no-" if self.kind is Kind.SWITCH else "--") + self.name.replace("_", "-")

    def named(self, naming: Naming) -> str:
        """The option's name in a message: its form label or its CLI flag."""
        return self.flag if naming == "flag" else self.label

    @property
    def default_text(self) -> str | None:
        """The default as a user would type it (None: no default)."""
        return None if self.default is None else self.text(self.default)

    def text(self, value: Any) -> str:
        """A typed value of this option as a user would type it: '0,3,31', '0,0.7'."""
        return _WRITERS.get(self.kind, str)(value)

    def describe(self) -> str:
        """The help text with the choices and the default, for the CLI."""
        parts = [self.help]
        if self.choices:
            among = "built-in: " if self.kind is Kind.SET_OR_FILE else "one of "
            parts.append(among + ", ".join(self.choices))
        if self.default_text is not None:
            parts.append(f"default {self.default_text}")
        return "; ".join(parts)

    def parse(self, value: object, naming: Naming = "label") -> Any:
        """The typed value from what a user gave (text or a widget's value); empty -> default."""
        if isinstance(value, str):
            value = value.strip()
        if value is None or value == "":
            if self.required:
                raise InputError(f"{self.named(naming)} is required")
            return self.default
        try:
            return _READERS[self.kind](self, value)
        except (InputError, ValueError) as e:
            raise InputError(f"{self.named(naming)}: {e}") from None


def _text(option: Option, value: object) -> str:
    return str(value)


def _path(option: Option, value: object) -> str:
    path = Path(str(value)).expanduser()
    if not path.exists():
        raise ValueError(f"{value} does not exist on this machine")
    return str(path.resolve())


def _url(option: Option, value: object) -> str:
    return normalize_url(str(value))


def _int(option: Option, value: object) -> int:
    try:
        number = int(str(value))  # widgets give ints, the CLI text; 2.5 and True are refused
    except ValueError:
        raise ValueError(f"must be a whole number, got {value!r}") from None
    if option.bounds is not None:
        low, high = option.bounds
        if not low <= number <= high:
            raise ValueError(f"must be between {low} and {high}, got {number}")
    return number


def _choice(option: Option, value: object) -> str:
    if value not in option.choices:
        raise ValueError(f"must be one of {', '.join(option.choices)}, got {value!r}")
    return str(value)


def _set_or_file(option: Option, value: object) -> str:
    if value in option.choices or Path(str(value)).is_file():
        return str(value)
    raise ValueError(f"{value!r} is not a built-in set ({', '.join(option.choices)}) nor a file")


def _layout(option: Option, value: object) -> Layout:
    return parse_layout(str(value))


def _temperatures(option: Option, value: object) -> tuple[float, ...]:
    return tuple(parse_temperatures(str(value)))


def _temperatures_text(value: tuple[float, ...]) -> str:
    return ",".join(f"{t:g}" for t in value)


def _version(option: Option, value: object) -> str:
    return version_text(parse_version(str(value)))


def _switch(option: Option, value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise ValueError(f"must be on or off, got {value!r}")


_READERS: dict[Kind, Callable[[Option, object], Any]] = {
    Kind.TEXT: _text,
    Kind.PATH: _path,
    Kind.URL: _url,
    Kind.INT: _int,
    Kind.CHOICE: _choice,
    Kind.SET_OR_FILE: _set_or_file,
    Kind.LAYOUT: _layout,
    Kind.TEMPERATURES: _temperatures,
    Kind.VERSION: _version,
    Kind.SWITCH: _switch,
}
# The kinds whose typed value is not its text: how it is written back at an edge.
_WRITERS: dict[Kind, Callable[[Any], str]] = {
    Kind.LAYOUT: format_layout,
    Kind.TEMPERATURES: _temperatures_text,
}


def _option(default: Any, label: str, help: str, **how: Any) -> Any:
    """A dataclass field (MISSING: no default) that carries its Option."""
    return field(default=default, metadata={"option": Option(label, help, **how)})


@dataclass
class DiagnoseOptions:
    """What to diagnose and how hard to look."""

    draft: str = _option(
        MISSING,
        "Draft checkpoint",
        "the draft checkpoint folder (or its config.json / .safetensors)",
        required=True,
    )
    endpoint: str = _option(
        MISSING,
        "Endpoint URL (the server running the target with this draft)",
        "the SGLang or vLLM endpoint serving the target with the draft, e.g. http://gpubox:30000",
        kind=Kind.URL,
        required=True,
        placeholder="http://gpubox:30000",
    )
    baseline: str | None = _option(
        None,
        "Baseline URL (optional: the same target served without speculation, for the speedup)",
        "the same target served without speculation, for the speedup",
        kind=Kind.URL,
        placeholder="http://gpubox:30001",
    )
    draft_config: str | None = _option(
        None,
        "Draft config (for a SpecForge step folder)",
        "the draft's config.json the SpecForge run trained with, to read the draft from a step "
        "folder's training_state.pt (which has no config.json)",
        kind=Kind.PATH,
    )
    prompts: str = _option(
        "all",
        "Prompt set",
        "a built-in prompt set or a JSONL file of prompts",
        kind=Kind.SET_OR_FILE,
        choices=BUILTIN_PROMPT_SETS,
    )
    num_prompts: int = _option(
        16, "Number of prompts", "prompts to capture and send", kind=Kind.INT, bounds=(1, 100_000)
    )
    max_new_tokens: int = _option(
        64, "Max new tokens", "tokens generated per prompt", kind=Kind.INT, bounds=(1, 65_536)
    )
    concurrency: int = _option(
        4, "Concurrency", "requests in flight in the benchmark", kind=Kind.INT, bounds=(1, 1024)
    )
    train_states: str | None = _option(
        None,
        "Training states folder",
        "a training dump made with the training layout (SpecForge data_*.ckpt or speculators "
        "hs_*.safetensors)",
        kind=Kind.PATH,
    )
    target: str | None = _option(
        None,
        "Local target path (for training-side states)",
        "a local Hugging Face checkpoint of the target, for the training-side states",
        kind=Kind.PATH,
        placeholder="/data/models/target (Hugging Face checkpoint)",
    )
    target_layers: int | None = _option(
        None,
        "Target layers N",
        "the target's decoder blocks (else read from the target's config)",
        kind=Kind.INT,
        bounds=(1, 10_000),
    )
    arch: str | None = _option(
        None,
        "Target architecture",
        "the target architecture for SGLang's capture rules, e.g. llama, kimi (else the "
        f"server's, else {FALLBACK_ARCH})",
        placeholder="from the server",
    )
    trainer: str | None = _option(
        None,
        "Trainer (id convention)",
        "the framework that made the training data (else from the checkpoint format)",
        kind=Kind.CHOICE,
        choices=tuple(TRAINERS),
        placeholder="from the checkpoint format",
    )
    training_sglang_version: str | None = _option(
        None,
        "Training SGLang version (SpecForge 0.2 and later)",
        "the SGLang release SpecForge 0.2+ captured the training states with (it pins "
        f"{SPECFORGE_SGLANG_VERSION}; a patched install may differ), so drift to the serving "
        "release is checked",
        kind=Kind.VERSION,
        placeholder=f"{SPECFORGE_SGLANG_VERSION} (SpecForge 0.2's pin)",
    )
    training_layout: Layout | None = _option(
        None,
        "Training layout override (taps the training data used)",
        "taps the training data really used, e.g. 0,3,31 (0 = embedding output)",
        kind=Kind.LAYOUT,
        placeholder="e.g. 0,3,31 (0 = embedding output)",
    )
    steps: int = _option(
        5,
        "Draft steps evaluated",
        "draft steps evaluated (the server's own steps are reported too)",
        kind=Kind.INT,
        bounds=(1, 64),
    )
    device: str = _option(
        "cpu",
        "Device for the standalone draft",
        "where the draft runs for its standalone evaluation",
        kind=Kind.CHOICE,
        choices=DEVICES,
    )
    dtype: str = _option(
        "float32",
        "dtype",
        "the draft's dtype for its standalone evaluation",
        kind=Kind.CHOICE,
        choices=DTYPES,
    )
    capture_dir: str | None = _option(
        None, "Capture folder", "keep the serving capture in this folder"
    )
    capture_server: str | None = _option(
        None,
        "vLLM capture server (extract_hidden_states)",
        "a vLLM server of the same target started with the extract_hidden_states method, whose "
        "capture files show the served taps (vLLM endpoints only)",
        kind=Kind.URL,
        placeholder="http://gpubox:30002",
    )
    profile: bool = _option(
        True,
        "Acceptance profile",
        "the acceptance profile per category, prompt format, temperature and draft steps (on by "
        "default; --no-profile skips it): one more benchmark per temperature and per prompt "
        "format, on as many prompts as their numbers need (four or more), and a capture",
        kind=Kind.SWITCH,
    )
    temperatures: tuple[float, ...] = _option(
        (0.0, 0.7),
        "Temperatures to profile",
        "the temperatures you serve with, e.g. 0,0.7 (each one more benchmark)",
        kind=Kind.TEMPERATURES,
    )
    timeout: float = 120.0  # seconds per request to the endpoint; set by code, not by users

    @classmethod
    def parse(cls, values: Mapping[str, object], naming: Naming = "label") -> DiagnoseOptions:
        """Checked options from what a user gave; InputError names the first bad option."""
        unknown = values.keys() - SCHEMA.keys()
        if unknown:
            raise TypeError(f"not options of a diagnosis: {', '.join(sorted(unknown))}")
        parsed = {name: opt.parse(values.get(name), naming) for name, opt in SCHEMA.items()}
        for a, b in EXCLUSIVE:
            if parsed[a] is not None and parsed[b] is not None:
                first, second = SCHEMA[a].named(naming), SCHEMA[b].named(naming)
                raise InputError(f"give {first} or {second}, not both")
        if parsed["baseline"] is not None and parsed["baseline"] == parsed["endpoint"]:
            raise InputError(
                f"{SCHEMA['baseline'].named(naming)}: must be another server than the endpoint: "
                "the same target without a draft"
            )
        return cls(**parsed)

    def to_json(self) -> dict[str, Any]:
        """The JSON a run keeps and its job reads: every field, typed values as their text."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            option = SCHEMA.get(f.name)
            out[f.name] = value if option is None or value is None else _json_value(option, value)
        return out

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> DiagnoseOptions:
        """Inverse of to_json; keys that are not options (a run's labels) are left aside."""
        values = {}
        for f in fields(cls):
            if f.name not in d:
                continue
            value, option = d[f.name], SCHEMA.get(f.name)
            if option is not None and option.kind in _WRITERS and value is not None:
                value = _READERS[option.kind](option, value)
            values[f.name] = value
        return cls(**values)


def _json_value(option: Option, value: Any) -> Any:
    """A typed option value in its JSON form: text for the kinds that have a writer."""
    return option.text(value) if option.kind in _WRITERS else value


# Every option by field name, in field order.
SCHEMA: dict[str, Option] = {
    f.name: replace(
        f.metadata["option"], name=f.name, default=None if f.default is MISSING else f.default
    )
    for f in fields(DiagnoseOptions)
    if "option" in f.metadata
}

# Options that exclude each other: the training-side states come from one source.
EXCLUSIVE: tuple[tuple[str, str], ...] = (("train_states", "target"),)
