"""Read and write EAGLE-3 draft checkpoints in every format, onto one DraftSpec and one naming.

The formats (`DraftSpec.format`: speculators, specforge, eagle, export) are the rows of
`checkpoint_formats.FORMAT_TABLE`: how each is recognised, read and written.

`inspect` reads config.json and the safetensors headers only, never tensor data, and imports no
torch for safetensors checkpoints. `load` reads the tensors. `save` writes any format (tests, demo,
conversions). Every name on disk is mapped onto the canonical names of `spec.expected_shapes`.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from eagle3dash.checkpoint_formats import FORMAT_TABLE, CheckpointFormat, detect_format
from eagle3dash.checkpoint_problems import CheckpointProblem, ProblemCode, problem_lines
from eagle3dash.engines.vllm.rules import parallel_eagle_serving
from eagle3dash.errors import InputError
from eagle3dash.provenance import (
    Provenance,
    RunFolderError,
    is_run_folder,
    materialize,
    no_model_message,
    read_run_folder,
)
from eagle3dash.run_record import record_problems
from eagle3dash.spec import OPTIONAL_TENSORS, OTHER_ID_KEYS, DraftSpec, expected_shapes

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    import torch

CONFIG = "config.json"
SAFETENSORS = "model.safetensors"
INDEX = "model.safetensors.index.json"
BIN = "pytorch_model.bin"

# safetensors dtype code -> (torch dtype name, bytes per element)
_ST_DTYPES = {
    "F64": ("float64", 8),
    "F32": ("float32", 4),
    "F16": ("float16", 2),
    "BF16": ("bfloat16", 2),
    "F8_E4M3": ("float8_e4m3fn", 1),
    "F8_E5M2": ("float8_e5m2", 1),
    "I64": ("int64", 8),
    "I32": ("int32", 4),
    "I16": ("int16", 2),
    "I8": ("int8", 1),
    "U8": ("uint8", 1),
    "BOOL": ("bool", 1),
}
_FLOAT_DTYPES = {"float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"}
_MAX_HEADER = 100 * 1024 * 1024  # the safetensors library refuses larger headers too
_AUX_NORMS = {"low": 0, "mid": 1, "high": 2}  # legacy TorchSpec/SGLang names of fc_norm.{i}
_WRITER_KEYS = ("dtype", "torch_dtype", "rope_parameters", "rope_scaling")  # transformers 4 vs 5


class CheckpointError(InputError):
    """A checkpoint that cannot be read; the message names the file, the problem and the fix."""


# Draft algorithms other than EAGLE-3 that share its `fc` projection, by the names their configs
# carry: speculators 0.9.0 registers peagle, dflash, dflash2, dspark, xpress and mtp
# (models/*/config.py `speculators_model_type` and default `architectures`); SpecForge 0.2.0
# exports PEagleDraftModel, DFlashDraftModel, DominoDraftModel and DSparkDraftModel
# (modeling/draft/*.py `@register_draft`). Name -> (algorithm, what sets it apart).
OTHER_ALGORITHMS = {
    "P-EAGLE": "it drafts several positions in parallel in one forward pass (mask tokens), where "
    "EAGLE-3 drafts one token per step and feeds each step back",
    "DFlash": "a block-diffusion draft",
    "DFlash2": "a block-diffusion draft",
    "DSpark": "",
    "XPress": "",
    "MTP": "multi-token prediction heads",
    "Domino": "a DFlash-family block draft",
}
_ALGORITHM_NAMES = {  # config names, lower case without punctuation -> algorithm
    **dict.fromkeys(("peagle", "peaglespeculator", "peagledraftmodel"), "P-EAGLE"),
    **dict.fromkeys(("dflash", "dflashspeculator", "dflashdraftmodel"), "DFlash"),
    **dict.fromkeys(("dflash2", "dflash2draftmodel"), "DFlash2"),
    **dict.fromkeys(("dspark", "dsparkspeculator", "dsparkdraftmodel"), "DSpark"),
    **dict.fromkeys(("xpress", "xpressspeculator"), "XPress"),
    **dict.fromkeys(("mtp", "mtpdraftmodel"), "MTP"),
    "dominodraftmodel": "Domino",
}


def other_algorithm(names: list[str]) -> str | None:
    """One line naming another draft algorithm among these config names, or None (EAGLE-3)."""
    for name in names:
        algorithm = _ALGORITHM_NAMES.get(re.sub(r"[^a-z0-9]", "", str(name).lower()))
        if algorithm is not None:
            how = OTHER_ALGORITHMS[algorithm]
            engines = f"; {parallel_eagle_serving()}" if algorithm == "P-EAGLE" else ""
            return (
                f"a {algorithm} draft{f' ({how})' if how else ''}: eagle3dash diagnoses "
                f"EAGLE-3 drafts only{engines}"
            )
    return None


@dataclass
class InspectReport:
    """What a checkpoint holds and what is wrong with it, read without loading tensor data."""

    path: str  # the checkpoint directory
    files: list[str]  # weight files, relative to path
    spec: DraftSpec
    tensors: dict[str, tuple[list[int], str]]  # canonical name -> (shape, dtype)
    raw_names: dict[str, str]  # canonical name -> name on disk
    param_count: int  # elements of the floating-point tensors
    problems: list[CheckpointProblem] = field(default_factory=list)
    nonfinite: list[str] = field(default_factory=list)  # filled only by `load`
    provenance: Provenance | None = None  # when a trainer's run folder was given

    def to_json(self) -> dict:
        """One JSON-ready object: every spec field plus files, tensors, counts and problems."""
        d = self.spec.to_dict()
        d.update(
            path=self.path,
            files=self.files,
            heads=self.spec.num_heads,
            kv_heads=self.spec.num_kv_heads,
            param_count=self.param_count,
            problems=problem_lines(self.problems),
            nonfinite=self.nonfinite,
            tensors={n: {"shape": s, "dtype": t} for n, (s, t) in self.tensors.items()},
            provenance=None if self.provenance is None else self.provenance.to_dict(),
        )
        return d


class _Raw(NamedTuple):
    """One tensor as stored on disk."""

    shape: list[int]
    dtype: str  # torch dtype name
    file: Path


class _Source(NamedTuple):
    """Where a canonical tensor comes from: a tensor on disk, or a row range of a fused one."""

    raw: str
    rows: tuple[int, int] | None = None


# ---------------------------------------------------------------------------------------------
# Public API


def find_checkpoint(path: str | Path) -> tuple[Path, Path]:
    """The checkpoint directory and its config.json for a directory, config or weights path."""
    p = Path(path).expanduser().absolute()
    if not p.exists():
        raise CheckpointError(
            f"{p} does not exist; give a checkpoint directory, "
            "its config.json or its .safetensors file"
        )
    directory = p if p.is_dir() else p.parent
    config = directory / CONFIG
    if not config.is_file():
        raise CheckpointError(
            f"{directory}: no config.json; put the trainer's config.json next to the weights"
        )
    return directory, config


def inspect(path: str | Path) -> InspectReport:
    """Format, dims, options and problems of a checkpoint from config.json and weight headers."""
    return _inspect(path)[0]


def inspect_draft(path: str | Path, draft_config: str | Path | None = None) -> InspectReport:
    """`inspect`, or for a SpecForge step folder and the draft config the user gives, the draft
    made from the step's state dict (provenance.materialize), with the run's card kept."""
    if draft_config is None:
        return inspect(path)
    try:
        report = inspect(materialize(path, draft_config))
        report.provenance = read_run_folder(path)
        report.problems += record_problems(report.spec, report.provenance)
    except RunFolderError as e:
        raise CheckpointError(str(e)) from None
    return report


def load(
    path: str | Path, device: str = "cpu", dtype: torch.dtype | str | None = None
) -> tuple[DraftSpec, dict[str, torch.Tensor], InspectReport]:
    """Spec, tensors under canonical names, and the report with NaN/Inf and d2t checks added."""
    import torch

    report, raw, sources = _inspect(path)
    if isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    known = expected_shapes(report.spec)
    wanted = {c: s for c, s in sources.items() if c in known}  # unknown tensors stay on disk
    data = _read_tensors(raw, {s.raw for s in wanted.values()})
    tensors: dict[str, torch.Tensor] = {}
    for name, src in wanted.items():
        t = data[src.raw]
        if src.rows is not None:
            t = t[src.rows[0] : src.rows[1]].clone()  # own storage, so it can be saved again
        if t.is_floating_point():
            if not _all_finite(t):
                nan, inf = int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
                report.nonfinite.append(name)
                report.problems.append(
                    CheckpointProblem(
                        ProblemCode.NOT_FINITE, {"tensor": name, "nan": nan, "inf": inf}
                    )
                )
            if dtype is not None:
                t = t.to(dtype)
        elif name == "d2t":
            t = t.to(torch.int64)
        elif name == "t2d":
            t = t.to(torch.bool)
        tensors[name] = t.to(device)
    if "d2t" in tensors:
        report.problems.extend(_d2t_problems(tensors["d2t"], report.spec))
    return report.spec, tensors, report


def save(
    spec: DraftSpec,
    tensors: dict[str, torch.Tensor],
    out_dir: str | Path,
    format: str,
    shards: int = 1,
) -> Path:
    """Write canonical tensors as a checkpoint of `format` (config.json + weights) into out_dir."""
    import torch

    if format not in FORMAT_TABLE:
        raise ValueError(f"unknown format {format!r}; use one of {', '.join(FORMAT_TABLE)}")
    form = FORMAT_TABLE[format]
    if shards < 1 or (form.single_bin and shards != 1):
        raise ValueError(f"shards={shards}: use 1 or more, and 1 for the {format} format")
    unexpressed = form.config.cannot_express(spec)
    if unexpressed is not None:  # refused rather than dropped
        raise ValueError(f"{format} configs cannot express {unexpressed}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    disk = form.to_disk(tensors)
    if form.single_bin:
        _write_atomically(out / BIN, lambda tmp: torch.save(disk, tmp))
        written = [BIN]
    else:
        written = _write_safetensors(disk, out, shards)
    config = form.config.write(spec, form.architectures(spec))
    (out / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    for f in out.iterdir():  # weights of an earlier save would shadow or mix with the new ones
        stale = f.name in (SAFETENSORS, INDEX, BIN) or re.fullmatch(
            r"model-\d+-of-\d+\.safetensors", f.name
        )
        if stale and f.name not in written:
            f.unlink()
    return out


# ---------------------------------------------------------------------------------------------
# Inspect


def _inspect(path: str | Path) -> tuple[InspectReport, dict[str, _Raw], dict[str, _Source]]:
    """The report, plus the on-disk tensors and canonical sources that `load` needs."""
    card = None
    if is_run_folder(path):
        try:
            card = read_run_folder(path)
        except RunFolderError as e:
            raise CheckpointError(str(e)) from None
        if not card.has_model_config:
            raise CheckpointError(no_model_message(card))
        path = card.checkpoint
    directory, config_path = find_checkpoint(path)
    cfg = _read_json(config_path)
    names = [str(cfg.get("speculators_model_type") or ""), *(cfg.get("architectures") or [])]
    if cfg.get("parallel_drafting") is True:  # NeMo AutoModel's P-EAGLE (eagle/draft_llama.py)
        names.append("P-EAGLE")
    refusal = other_algorithm(names)
    if refusal is not None:
        raise CheckpointError(f"{directory}: {refusal}")
    files = _weight_files(directory, Path(path).expanduser().absolute())
    raw = _read_raw(files)
    form = detect_format(cfg, raw, files)
    layer_cfg = form.config.layer_config(cfg)
    if layer_cfg is None:
        raise CheckpointError(
            f"{config_path}: {form.name} config without a {form.config.where} object; "
            f"re-save it with {form.name}"
        )
    dims = _dims(layer_cfg, config_path, form.config.where)
    _check_types(cfg, layer_cfg, config_path)
    q_out, kv_out = dims["num_heads"] * dims["head_dim"], dims["num_kv_heads"] * dims["head_dim"]
    sources, problems = _sources(raw, q_out, kv_out)
    tensors = {
        c: (_piece_shape(raw[s.raw].shape, s.rows), raw[s.raw].dtype) for c, s in sources.items()
    }
    _refuse_non_draft(directory, tensors)
    dropped = [n for n in raw if _canonical_name(n) is None]
    indices = _layer_indices(tensors)
    configured = dims["num_layers"]
    dims["num_layers"] = form.config.decoder_layers(configured, indices)
    spec = _build_spec(cfg, layer_cfg, form, dims, tensors, dropped)
    if spec.num_layers != configured:  # the config's count is another model's (NeMo: the target)
        spec.extra["config_num_hidden_layers"] = configured
    problems += _problems(spec, cfg, tensors, sources)
    problems += record_problems(spec, card)
    floats = [s for s, dtype in tensors.values() if dtype in _FLOAT_DTYPES]
    report = InspectReport(
        path=str(directory),
        files=[str(f.relative_to(directory)) for f in files],
        spec=spec,
        tensors=tensors,
        raw_names={c: s.raw for c, s in sources.items()},
        param_count=sum(math.prod(s) for s in floats),
        problems=problems,
        provenance=card,
    )
    return report, raw, sources


def _refuse_non_draft(directory: Path, tensors: dict[str, tuple[list[int], str]]) -> None:
    """Every EAGLE draft projects the target's states through `fc`: a checkpoint without
    fc.weight is not one, most often the target model itself given by mistake."""
    if "fc.weight" in tensors:
        return
    blocks = _layer_indices(tensors)
    if blocks:
        layers = len(blocks)
        raise CheckpointError(
            f"{directory}: this looks like a target model (a causal LM), not an EAGLE-3 draft: "
            f"no fc.weight, {layers} decoder layer{'s' if layers != 1 else ''}; give the "
            "EAGLE-3 draft's folder"
        )
    raise CheckpointError(
        f"{directory}: not an EAGLE-3 draft: no fc.weight (the draft's projection of the "
        "target's hidden states); give the EAGLE-3 draft's folder"
    )


def _layer_indices(names: Iterable[str]) -> set[int]:
    """The decoder layer indices among canonical tensor names (`layers.{i}.`)."""
    return {int(m[1]) for name in names if (m := re.match(r"layers\.(\d+)\.", name))}


def _read_json(path: Path) -> dict:
    """A JSON object from a file, or a CheckpointError that says where it is broken."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise CheckpointError(
            f"{path}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}); "
            "fix the file or copy it again from the trainer's output"
        ) from e
    except RecursionError:
        raise CheckpointError(
            f"{path}: nested too deeply to be a config; fix the file or copy it again"
        ) from None
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{path}: not UTF-8 text ({e}); is this really a JSON file?") from e
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: holds a JSON {type(data).__name__}, expected an object")
    return data


def _weight_files(directory: Path, given: Path) -> list[Path]:
    """The weight files: the one named, else sharded safetensors, model.safetensors or .bin."""
    if given.is_file() and given.suffix in (".safetensors", ".bin"):
        return [given]
    index = directory / INDEX
    if index.is_file():
        weight_map = _read_json(index).get("weight_map")
        if not isinstance(weight_map, dict):
            raise CheckpointError(f"{index}: no weight_map object; re-export the checkpoint")
        names = list(dict.fromkeys(weight_map.values()))
        for name in names:  # plain names of files beside the index: never a path out of it
            if not isinstance(name, str) or name in ("", ".", "..") or Path(name).name != name:
                raise CheckpointError(
                    f"{index}: weight_map names {str(name)[:60]!r}, not a file name in "
                    f"{directory}: re-export the checkpoint"
                )
        shards = [directory / name for name in names]
        for shard in shards:
            if not shard.is_file():
                raise CheckpointError(
                    f"{index}: names shard {shard.name}, which is missing from {directory}; "
                    "copy every shard listed in weight_map"
                )
        return shards
    for name in (SAFETENSORS, BIN):
        if (directory / name).is_file():
            return [directory / name]
    raise CheckpointError(
        f"{directory}: no weights; expected {SAFETENSORS}, {INDEX} with its shards, or {BIN}"
    )


def _read_raw(files: list[Path]) -> dict[str, _Raw]:
    """Name -> shape, dtype and file of every tensor in the weight files, without their data."""
    raw: dict[str, _Raw] = {}
    for f in files:
        entries = _safetensors_header(f) if f.suffix == ".safetensors" else _bin_header(f)
        for name, (shape, dtype) in entries.items():
            raw[name] = _Raw(shape, dtype, f)
    return raw


def _safetensors_header(path: Path) -> dict[str, tuple[list[int], str]]:
    """Shapes and dtypes from a safetensors header: u64 length, then JSON; data is not read."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise CheckpointError(f"{path}: truncated: {size} bytes, too short for a header")
        (n,) = struct.unpack("<Q", head)
        if n > _MAX_HEADER:
            raise CheckpointError(
                f"{path}: corrupt header: length {n} bytes; not a safetensors file?"
            )
        if 8 + n > size:
            raise CheckpointError(
                f"{path}: truncated: header needs {8 + n} bytes, file has {size}; copy it again"
            )
        text = f.read(n)
    try:
        header = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CheckpointError(f"{path}: corrupt header: not JSON ({e}); copy the file again") from e
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt header: not a JSON object; copy the file again")
    out: dict[str, tuple[list[int], str]] = {}
    end = 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            code, shape, (start, stop) = info["dtype"], info["shape"], info["data_offsets"]
            dtype, itemsize = _ST_DTYPES.get(code, (str(code).lower(), None))
            ok = all(isinstance(x, int) and x >= 0 for x in [*shape, start, stop]) and start <= stop
        except (TypeError, KeyError, ValueError):
            ok = False
        if not ok:
            raise CheckpointError(f"{path}: corrupt header entry for {name!r}: {info!r}")
        if itemsize is not None and stop - start != math.prod(shape) * itemsize:
            raise CheckpointError(
                f"{path}: corrupt header: {name} {shape} {code} needs "
                f"{math.prod(shape) * itemsize} bytes, offsets give {stop - start}"
            )
        out[name] = (list(shape), dtype)
        end = max(end, stop)
    if size < 8 + n + end:
        raise CheckpointError(
            f"{path}: truncated: expected {8 + n + end} bytes, file has {size}; copy it again"
        )
    return out


def _load_bin(path: Path) -> dict[str, torch.Tensor]:
    """A .bin state dict, memory-mapped, unpickled with weights_only=True and nothing looser."""
    import pickle

    import torch

    try:
        sd = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as e:
        why = next((ln.strip() for ln in str(e).splitlines() if "WeightsUnpickler" in ln), "")
        raise CheckpointError(
            f"{path}: needs more than torch.load(weights_only=True) to unpickle ({why}); "
            "eagle3dash never runs pickled code: re-save the plain state dict of tensors "
            "(torch.save(model.state_dict()) or safetensors)"
        ) from e
    except (RuntimeError, OSError, EOFError, ValueError) as e:
        raise CheckpointError(
            f"{path}: cannot be read as a torch checkpoint ({e}); re-save it with torch.save "
            "(zip format) or as safetensors"
        ) from e
    if not isinstance(sd, dict) or not all(isinstance(v, torch.Tensor) for v in sd.values()):
        raise CheckpointError(
            f"{path}: not a flat state dict of tensors; re-save model.state_dict()"
        )
    return sd


def _bin_header(path: Path) -> dict[str, tuple[list[int], str]]:
    """Shapes and dtypes of a .bin state dict; mmap means its data pages are not read."""
    return {
        name: (list(t.shape), str(t.dtype).removeprefix("torch."))
        for name, t in _load_bin(path).items()
    }


# Sanity caps for config dims: far above any real draft (Kimi: hidden 7168, vocab 163840), far
# below what would make a headers-only inspect allocate gigabytes for a typo.
DIM_CAPS = {
    "hidden_size": 1 << 17,
    "num_attention_heads": 4096,
    "num_key_value_heads": 4096,
    "head_dim": 1 << 14,
    "intermediate_size": 1 << 20,
    "num_hidden_layers": 256,
    "vocab_size": 1 << 22,
}


def _dim(layer_cfg: dict, key: str, config_path: Path, where: str, default: int | None) -> int:
    """A positive integer dim within DIM_CAPS (the default when absent); CheckpointError naming
    the key and the file otherwise."""
    value = layer_cfg.get(key)
    if value is None and default is not None:
        return default
    if not isinstance(value, int) or isinstance(value, bool):
        got = "missing" if value is None else f"{type(value).__name__} {str(value)[:30]!r}"
        raise CheckpointError(
            f"{config_path}: {where} {key} is {got}, not a whole number: fix config.json "
            "(a draft config needs the Llama decoder dims)"
        )
    if not 1 <= value <= DIM_CAPS[key]:
        raise CheckpointError(
            f"{config_path}: {where} {key} = {value} is outside 1..{DIM_CAPS[key]:,}: fix "
            "config.json"
        )
    return value


def _dims(layer_cfg: dict, config_path: Path, where: str) -> dict:
    """Decoder dims; head_dim defaults to hidden_size // heads, kv heads to heads, layers to 1."""
    h = _dim(layer_cfg, "hidden_size", config_path, where, None)
    nh = _dim(layer_cfg, "num_attention_heads", config_path, where, None)
    return {
        "hidden_size": h,
        "num_heads": nh,
        "num_kv_heads": _dim(layer_cfg, "num_key_value_heads", config_path, where, nh),
        "head_dim": _dim(layer_cfg, "head_dim", config_path, where, max(1, h // nh)),
        "intermediate_size": _dim(layer_cfg, "intermediate_size", config_path, where, None),
        "num_layers": _dim(layer_cfg, "num_hidden_layers", config_path, where, 1),
        "vocab_size": _dim(layer_cfg, "vocab_size", config_path, where, None),
    }


def _is_ids(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(i, int) and not isinstance(i, bool) for i in value
    )


def _check_types(cfg: dict, layer_cfg: dict, config_path: Path) -> None:
    """The other config keys the spec reads, of the types their frameworks write; CheckpointError
    naming the key otherwise (read once here, so nothing downstream meets a str for an int)."""

    def bad(key: str, value: object, want: str) -> CheckpointError:
        got = f"{type(value).__name__} {str(value)[:30]!r}"
        return CheckpointError(f"{config_path}: {key} is {got}, not {want}: fix config.json")

    nested = cfg.get("eagle_config")
    if nested is not None and not isinstance(nested, dict):
        raise bad("eagle_config", nested, "an object")
    for key, value in (
        (
            "eagle_config.eagle_aux_hidden_state_layer_ids",
            (nested or {}).get("eagle_aux_hidden_state_layer_ids"),
        ),
        ("eagle_aux_hidden_state_layer_ids", cfg.get("eagle_aux_hidden_state_layer_ids")),
        *((key, _key_value(cfg, key)) for key in OTHER_ID_KEYS),
    ):
        if value is not None and not _is_ids(value):
            raise bad(key, value, "a list of whole numbers")
    width = cfg.get("num_aux_hidden_states")
    if width is not None and not (isinstance(width, int) and not isinstance(width, bool)):
        raise bad("num_aux_hidden_states", width, "a whole number")
    target = cfg.get("target_hidden_size")
    if target is not None and not (
        isinstance(target, int) and 0 < target <= DIM_CAPS["hidden_size"]
    ):
        raise bad("target_hidden_size", target, f"a whole number in 1..{DIM_CAPS['hidden_size']}")
    if cfg.get("speculators_config") is not None and not isinstance(
        cfg["speculators_config"], dict
    ):
        raise bad("speculators_config", cfg["speculators_config"], "an object")
    types = layer_cfg.get("layer_types")
    if types is not None and not (
        isinstance(types, list) and all(isinstance(t, str) for t in types)
    ):
        raise bad("layer_types", types, "a list of strings")
    theta = layer_cfg.get("rope_theta")
    if theta is not None and (not isinstance(theta, int | float) or isinstance(theta, bool)):
        raise bad("rope_theta", theta, "a number")
    for key in ("rope_scaling", "rope_parameters"):
        if layer_cfg.get(key) is not None and not isinstance(layer_cfg[key], dict):
            raise bad(key, layer_cfg[key], "an object")


def _canonical_name(raw: str) -> str | None:
    """The canonical name for a name on disk (as SGLang 0.5.23 `models/llama_eagle3.py` maps
    them), or None for tensors to drop."""
    name = raw
    for prefix in ("draft_model.", "model."):
        name = name.removeprefix(prefix)
    if name.startswith("verifier_") or name.endswith("rotary_emb.inv_freq"):
        return None
    if name.startswith("midlayer."):
        name = "layers.0." + name.removeprefix("midlayer.")
    name = re.sub(r"aux_norm_(low|mid|high)", lambda m: f"fc_norm.{_AUX_NORMS[m[1]]}", name)
    return "d2t" if name == "draft_id_to_target_id" else name  # vLLM's buffer name


def _sources(
    raw: dict[str, _Raw], q_out: int, kv_out: int
) -> tuple[dict[str, _Source], list[CheckpointProblem]]:
    """Canonical name -> source for every kept tensor, splitting fused qkv and gate_up rows."""
    sources: dict[str, _Source] = {}
    problems: list[CheckpointProblem] = []

    def add(name: str, src: _Source) -> None:
        if name in sources:
            data = {"tensor": src.raw, "other": sources[name].raw, "name": name}
            problems.append(CheckpointProblem(ProblemCode.DUPLICATE_TENSOR, data))
        sources[name] = src

    for raw_name, info in raw.items():
        name = _canonical_name(raw_name)
        if name is None:
            continue
        rows = info.shape[0] if info.shape else 0
        if re.search(r"self_attn\.qkv_proj\.(weight|bias)$", name):
            if rows != q_out + 2 * kv_out:
                data = {"tensor": raw_name, "rows": rows, "q": q_out, "kv": kv_out}
                problems.append(CheckpointProblem(ProblemCode.QKV_ROWS, data))
                continue
            spans = (("q_proj", 0, q_out), ("k_proj", q_out, q_out + kv_out))
            for part, start, stop in (*spans, ("v_proj", q_out + kv_out, rows)):
                add(name.replace("qkv_proj", part), _Source(raw_name, (start, stop)))
        elif re.search(r"mlp\.gate_up_proj\.weight$", name):
            if rows % 2:
                data = {"tensor": raw_name, "rows": rows}
                problems.append(CheckpointProblem(ProblemCode.GATE_UP_ROWS, data))
                continue
            add(name.replace("gate_up_proj", "gate_proj"), _Source(raw_name, (0, rows // 2)))
            add(name.replace("gate_up_proj", "up_proj"), _Source(raw_name, (rows // 2, rows)))
        else:
            add(name, _Source(raw_name))
    return sources, problems


def _piece_shape(shape: list[int], rows: tuple[int, int] | None) -> list[int]:
    """The shape of a whole tensor, or of a row range of it."""
    return list(shape) if rows is None else [rows[1] - rows[0], *shape[1:]]


def _rope(layer_cfg: dict) -> tuple[float, dict | None]:
    """rope_theta (default 10000) and scaling, from legacy `rope_scaling` or `rope_parameters`."""
    params = layer_cfg.get("rope_parameters") or {}
    theta = layer_cfg.get("rope_theta") or params.get("rope_theta") or 10000.0
    scaling = dict(layer_cfg.get("rope_scaling") or params)
    scaling.pop("rope_theta", None)
    if "type" in scaling and "rope_type" not in scaling:
        scaling["rope_type"] = scaling.pop("type")
    if scaling.get("rope_type", "default") == "default":
        return float(theta), None
    return float(theta), scaling


def _aux_ids(cfg: dict) -> tuple[tuple[int, ...] | None, str, bool, list[int] | None]:
    """Aux layer ids, where they were found, use_aux_hidden_state, and shadowed top-level ids."""
    nested = cfg.get("eagle_config")
    nested = nested if isinstance(nested, dict) else {}
    top = cfg.get("eagle_aux_hidden_state_layer_ids")
    use_aux = bool(nested.get("use_aux_hidden_state", True))
    if nested.get("eagle_aux_hidden_state_layer_ids") is not None:
        return tuple(nested["eagle_aux_hidden_state_layer_ids"]), "eagle_config", use_aux, top
    if top is not None:
        return tuple(top), "top-level", use_aux, None
    return None, "missing", use_aux, None


def _key_value(cfg: dict, key: str) -> object:
    """The value at a dotted key ('dflash_config.layer_ids'), None when absent or not inside an
    object."""
    value: object = cfg
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _other_id_keys(cfg: dict) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """The other layer-id keys vLLM reads (spec.OTHER_ID_KEYS) that this config sets."""
    found = ((key, _key_value(cfg, key)) for key in OTHER_ID_KEYS)
    return tuple((key, tuple(ids)) for key, ids in found if isinstance(ids, list))


def _build_spec(
    cfg: dict,
    layer_cfg: dict,
    form: CheckpointFormat,
    dims: dict,
    tensors: dict[str, tuple[list[int], str]],
    dropped: list[str],
) -> DraftSpec:
    """The DraftSpec from config keys (format-specific meanings) and the tensors present."""
    ht = cfg.get("target_hidden_size") or dims["hidden_size"]
    ids, location, use_aux, shadowed = _aux_ids(cfg)
    fc_shape = tensors.get("fc.weight", ([], ""))[0]
    if len(fc_shape) == 2 and fc_shape[1] and fc_shape[1] % ht == 0:
        num_aux = fc_shape[1] // ht
    else:  # no usable fc: trust the ids, else the usual 3 (the fc problem is reported)
        num_aux = len(ids) if ids else 3
    theta, scaling = _rope(layer_cfg)
    sliding = "sliding_attention" in (layer_cfg.get("layer_types") or [])
    norm_output = cfg.get("norm_output")
    feedback_post_norm, norm_before_lm_head = form.config.norm_flags(norm_output)
    float_sizes: dict[str, int] = {}
    for shape, dtype in tensors.values():
        if dtype in _FLOAT_DTYPES:
            float_sizes[dtype] = float_sizes.get(dtype, 0) + math.prod(shape)
    config_dtype = cfg.get("torch_dtype") or cfg.get("dtype")
    extra = {
        "config_dtype": config_dtype,
        "dropped_tensors": dropped,
        # which transformers wrote the config: trainers.trainer_hints reads these
        "transformers_version": cfg.get("transformers_version"),
        "config_keys": [k for k in _WRITER_KEYS if k in cfg],
    }
    verifier = (cfg.get("speculators_config") or {}).get("verifier") or {}
    if verifier.get("architectures"):
        extra["verifier_architectures"] = list(verifier["architectures"])
    default_dtype = config_dtype or "float32"
    proposals = (cfg.get("speculators_config") or {}).get("proposal_methods") or [{}]
    if "speculative_tokens" in proposals[0]:
        extra["speculative_tokens"] = proposals[0]["speculative_tokens"]
    return DraftSpec(
        format=form.name,
        **dims,
        target_hidden_size=ht,
        draft_vocab_size=cfg.get("draft_vocab_size") or dims["vocab_size"],
        num_aux=num_aux,
        rms_norm_eps=float(layer_cfg.get("rms_norm_eps") or 1e-5),
        hidden_act=layer_cfg.get("hidden_act") or "silu",
        rope_theta=theta,
        rope_scaling=scaling,
        max_position_embeddings=layer_cfg.get("max_position_embeddings") or 2048,
        sliding_window=layer_cfg.get("sliding_window") if sliding else None,
        attention_bias=bool(layer_cfg.get("attention_bias", False)),
        qk_norm=form.config.qk_norm(layer_cfg),
        aux_layer_ids=ids,
        aux_ids_location=location,
        use_aux_hidden_state=use_aux,
        dual_top_level_ids=tuple(shadowed) if shadowed is not None else None,
        other_id_keys=_other_id_keys(cfg),
        num_aux_hidden_states=cfg.get("num_aux_hidden_states"),
        norm_before_residual_key=nbr
        if isinstance(nbr := cfg.get("norm_before_residual"), bool)
        else None,
        norm_before_residual=bool(cfg.get("norm_before_residual", False)),
        norm_before_fc=bool(cfg.get("norm_before_fc", False)),
        fc_norm=bool(cfg.get("fc_norm", False)),
        feedback_post_norm=feedback_post_norm,
        norm_before_lm_head=norm_before_lm_head,
        norm_output_key=norm_output,
        has_d2t="d2t" in tensors,
        has_t2d="t2d" in tensors,
        has_embed="embed_tokens.weight" in tensors,
        has_lm_head="lm_head.weight" in tensors,
        dtype=max(float_sizes, key=float_sizes.__getitem__) if float_sizes else default_dtype,
        architectures=tuple(cfg.get("architectures") or ()),
        verifier=((cfg.get("speculators_config") or {}).get("verifier") or {}).get("name_or_path"),
        extra=extra,
    )


def _problems(
    spec: DraftSpec,
    cfg: dict,
    tensors: dict[str, tuple[list[int], str]],
    sources: dict[str, _Source],
) -> list[CheckpointProblem]:
    """Each thing a server would get wrong or silently ignore in this checkpoint."""
    problems = []

    def problem(code: ProblemCode, **data: Any) -> None:
        problems.append(CheckpointProblem(code, data))

    expected = expected_shapes(spec)
    on_disk = {c: s.raw for c, s in sources.items()}
    for name, (shape, dtype) in tensors.items():
        if name not in expected:
            problem(ProblemCode.UNKNOWN_TENSOR, tensor=on_disk[name], shape=list(shape))
        elif name == "fc.weight" and len(shape) == 2 and shape[1] % spec.target_hidden_size:
            width, target_width = shape[1], spec.target_hidden_size
            problem(
                ProblemCode.FC_WIDTH,
                shape=list(shape),
                width=width,
                target_hidden_size=target_width,
            )
        elif tuple(shape) != expected[name]:
            problem(
                ProblemCode.SHAPE_MISMATCH,
                tensor=on_disk[name],
                shape=list(shape),
                expected=list(expected[name]),
            )
        elif name == "d2t" and dtype not in ("int64", "int32"):
            problem(ProblemCode.D2T_DTYPE, dtype=dtype)
    required = [n for n in expected if n not in OPTIONAL_TENSORS and n != "lm_head.weight"]
    for name in required:
        if name not in tensors:
            problem(ProblemCode.MISSING_TENSOR, tensor=name, expected=list(expected[name]))
    held = _layer_indices(tensors)
    if held and held == set(range(len(held))) and spec.num_layers > len(held):
        # whole layers past the weights': vLLM 0.32.0 llama_eagle3.py builds range(
        # num_hidden_layers) layers and its load_weights returns nothing, so none is checked
        untrained = spec.num_layers - len(held)
        depth = {"configured": spec.num_layers, "layers": len(held), "untrained": untrained}
        problem(ProblemCode.UNTRAINED_LAYERS, **depth)
    if "lm_head.weight" not in tensors:
        problem(ProblemCode.LM_HEAD_MISSING)
    ids = spec.aux_layer_ids
    if ids is not None and len(ids) != spec.num_aux:
        problem(ProblemCode.AUX_IDS_COUNT, count=len(ids), ids=list(ids), num_aux=spec.num_aux)
    top = spec.dual_top_level_ids
    # SGLang 0.5.23 captures the nested list (model_executor/model_runner_components/
    # spec_aux_hidden_state.py reads eagle_config["eagle_aux_hidden_state_layer_ids"]); vLLM
    # 0.33 reads the top-level list first (v1/worker/gpu_model_runner.py
    # `_get_eagle3_aux_layers_from_config`). A dual-key config names the same taps in each
    # engine's numbering: SGLang's id i (output of layer i) is vLLM's i + 1 (input of layer i + 1).
    # Both gather the states in layer order, whatever the list's order: vLLM 0.32.0
    # model_executor/models/interfaces.py keeps tuple(sorted(set(layers))) and appends in its
    # layer walk (_maybe_add_hidden_state); SGLang's models/llama.py forward appends where
    # `i in layers_to_capture`, walking the layers. So two lists name other states only as sets.
    if ids is not None and top is not None:
        named = sorted(set(top))
        if named not in (sorted(set(ids)), sorted({i + 1 for i in ids})):
            problem(ProblemCode.AUX_IDS_TWO_LISTS, ids=list(ids), top=list(top))
    # A list out of layer order is no problem of the checkpoint: the engines gather in layer
    # order, and whether training did is its trainer's (trainers.Trainer.ascending). A layer
    # named twice is captured once.
    if ids is not None and len(set(ids)) != len(ids):
        problem(ProblemCode.AUX_IDS_ORDER, ids=list(ids))
    # SpecForge 0.2.0 algorithms/model_providers.py resolve_eagle_capture_layers: exactly three
    # ints; training/capture_contract.py: unique. A negative id is no problem here: it is the
    # serving edit SGLang 0.5.22+ reads as the embedding output for Llama (the layout fix
    # writes it).
    specforge_ids_ok = ids is None or (len(ids) == 3 and len(set(ids)) == 3)
    form = FORMAT_TABLE[spec.format]
    if form.trained_on_three_ids and not specforge_ids_ok:
        assert ids is not None
        problem(ProblemCode.SPECFORGE_IDS, ids=list(ids))
    if not spec.use_aux_hidden_state:
        problem(ProblemCode.AUX_CAPTURE_OFF)
    if spec.draft_vocab_size < spec.vocab_size and not spec.has_d2t:
        problem(
            ProblemCode.D2T_MISSING,
            draft_vocab_size=spec.draft_vocab_size,
            vocab_size=spec.vocab_size,
        )
    if spec.has_d2t and spec.draft_vocab_size == spec.vocab_size:  # SpecForge 0.2's exports
        problem(ProblemCode.D2T_SAME_VOCAB, vocab_size=spec.vocab_size)
    if spec.target_hidden_size != spec.hidden_size and not spec.has_embed:
        problem(
            ProblemCode.EMBED_WIDTH,
            target_hidden_size=spec.target_hidden_size,
            hidden_size=spec.hidden_size,
        )
    return problems + form.config.problems(spec, cfg)


def _all_finite(t: torch.Tensor) -> bool:
    """No NaN/Inf in t; aminmax is one pass without tensor-sized temporaries (isfinite has them)."""
    import torch

    if t.numel() == 0:
        return True
    if t.element_size() == 1:
        t = t.float()  # CPU has no aminmax for float8
    lo, hi = torch.aminmax(t)
    return bool(torch.isfinite(lo) & torch.isfinite(hi))


def _d2t_problems(d2t: torch.Tensor, spec: DraftSpec) -> list[CheckpointProblem]:
    """Problems that need d2t's values: target ids out of range, or an identity mapping."""
    import torch

    target_ids = d2t + torch.arange(d2t.shape[0], device=d2t.device)
    if bool(((target_ids < 0) | (target_ids >= spec.vocab_size)).any()):
        data = {"vocab_size": spec.vocab_size}
        return [CheckpointProblem(ProblemCode.D2T_OUT_OF_RANGE, data)]
    if spec.draft_vocab_size < spec.vocab_size and not bool(d2t.any()):
        return [CheckpointProblem(ProblemCode.D2T_ALL_ZERO)]
    return []


def _read_tensors(raw: dict[str, _Raw], names: set[str]) -> dict[str, torch.Tensor]:
    """The named on-disk tensors, each file opened once; memory-mapped copy-on-write, so data
    pages are read when first touched and in-place edits never reach the file."""
    from safetensors import safe_open

    out = {}
    for file in sorted({raw[n].file for n in names}):
        wanted = [n for n in names if raw[n].file == file]
        if file.suffix == ".bin":
            sd = _load_bin(file)
            out.update({n: sd[n] for n in wanted})
        else:
            with safe_open(file, framework="pt") as f:
                out.update({n: f.get_tensor(n) for n in wanted})
    return out


# ---------------------------------------------------------------------------------------------
# Save


def _write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """Write a temp file, then rename it over `path`: tensors that `load` memory-mapped from the
    old file stay valid (overwriting it in place would crash them with SIGBUS)."""
    tmp = path.with_name(path.name + ".tmp")
    write(tmp)
    os.replace(tmp, path)


def _write_safetensors(disk: dict[str, torch.Tensor], out: Path, shards: int) -> list[str]:
    """model.safetensors, or `shards` size-balanced files plus the index; the names written."""
    from safetensors.torch import save_file

    disk = {n: t.contiguous() for n, t in disk.items()}
    meta = {"format": "pt"}
    if shards == 1:
        _write_atomically(out / SAFETENSORS, lambda tmp: save_file(disk, tmp, metadata=meta))
        return [SAFETENSORS]
    if shards > len(disk):
        raise ValueError(f"shards={shards} is more than the {len(disk)} tensors")
    groups: list[dict[str, torch.Tensor]] = [{} for _ in range(shards)]
    sizes = [0] * shards
    for name in sorted(disk, key=lambda n: -disk[n].nbytes):  # largest into the lightest shard
        i = sizes.index(min(sizes))
        groups[i][name] = disk[name]
        sizes[i] += disk[name].nbytes
    weight_map = {}
    for i, group in enumerate(groups, 1):
        fname = f"model-{i:05d}-of-{shards:05d}.safetensors"
        _write_atomically(out / fname, functools.partial(save_file, group, metadata=meta))
        weight_map.update(dict.fromkeys(group, fname))
    index = {"metadata": {"total_size": sum(sizes)}, "weight_map": dict(sorted(weight_map.items()))}
    (out / INDEX).write_text(json.dumps(index, indent=2) + "\n")
    return [*dict.fromkeys(weight_map.values()), INDEX]
