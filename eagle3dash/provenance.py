"""Trainer run folders: which checkpoint of a run to read, and the run's provenance card.

The shapes, read from the released wheels:

- SpecForge 0.2.0 (training/checkpoint.py CheckpointManager): `{run_id}-step{N}/` holding
  `training_state.pt` (rank 0's shared payload) and `training_state_rank{r}.pt`; links
  `{run_id}-latest` and `{run_id}-best` beside them, and `{run_id}.best_meta.json` =
  {run_id, step, score, metric, metrics}, metric "eval/simulated_acc_len" by default. The payload
  (training/controller.py save_checkpoint) holds draft_state_dict, global_step, epoch, strategy,
  run_id and the resume contract (algorithms/common/providers.py bind_runtime), whose
  `specforge_model_provenance` is a tuple of (key, value) pairs (training/provenance.py
  _compute_model_resume_provenance): target_model = ("directory-stat-v2", path, files) with
  ("sha256", name, size, digest) for each JSON file, target_revision, capture_layers (None for
  offline runs). A step folder has no config.json: `specforge export --to sglang` (cli.py) writes
  one from a separately given `--draft-config`.
- speculators 0.9.0 (train/checkpointer.py, train/config/artifacts.py): `run.yaml` and
  `train_command.txt` in the run folder, `{epoch}/` from save_pretrained (config.json +
  model.safetensors), `{epoch}/val_metrics.json` for improved epochs, a `checkpoint_best` link to
  the best epoch; run.yaml's `verifier` group names the target (verifier_name_or_path).

- NeMo AutoModel 0.7.0 (recipes/llm/train_eagle3.py save_checkpoint, components/checkpoint/
  checkpointing.py, lifecycle.py): under the recipe's `output_dir`, `checkpoints/` (its
  `_build_checkpointer` default) holds `epoch_{E}_step_{S}/` with `model/consolidated/` (the
  exported draft: config.json + safetensors), `config.yaml` (the recipe snapshot, yaml.dump block
  style: `recipe_args.aux_layer_ids`, `target_model_name_or_path`, `cached_target_path`,
  `target_model_backend`), `losses.json` ({val_loss, val_accuracy} when an epoch's eval ran) and
  `eagle_meta.pt`; pointers `LATEST` and `LOWEST_VAL` (a link, or `NAME.txt` holding the path)
  beside the step folders, and `.incomplete` in a step an interrupted save left.

`training_state.pt` is read with torch.load(weights_only=True) only: a payload that needs any
other pickle global is refused, and nothing in it runs.
"""

from __future__ import annotations

import json
import math
import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeGuard

from eagle3dash.errors import InputError

SPECFORGE_STATE = "training_state.pt"
_SPECFORGE_STEP = re.compile(r"(?P<run>.+)-step(?P<step>\d+)")
_PROVENANCE_KEY = "specforge_model_provenance"  # algorithms/common/providers.py
_NEMO_STEP = re.compile(r"epoch_(?P<epoch>\d+)_step_(?P<step>\d+)")
_NEMO_EXPORT = ("model", "consolidated")  # a NeMo step's exported draft, below the step folder
# serve_vllm.py's copy of the export for vLLM, below it (_VLLM_EXPORT_DIRNAME)
_NEMO_VLLM_EXPORT = "vllm_export"
_NEMO_INCOMPLETE = ".incomplete"  # components/checkpoint/utils.py: a save cut short
_NEMO_CHECKPOINTS = "checkpoints"  # recipes/llm/train_eagle3.py: output_dir / "checkpoints"
_NEMO_POINTERS = {"LOWEST_VAL": "best", "LATEST": "latest"}  # checkpoint/lifecycle.py
_SPECULATORS_EPOCH = re.compile(r"\d+|checkpoint_best|epoch\d+_(?:end|step\d+)")


class RunFolderError(InputError):
    """A run folder that cannot be read; the message names the file, the problem and the fix."""


@dataclass(frozen=True)
class TrainingMetrics:
    """A trainer's own acceptance numbers, converted to eagle3dash's definition."""

    source: str  # the file and keys they came from
    per_position: list[float]  # P(draft token k accepted), k = 0.., token-weighted
    accept_length: float  # 1 (the bonus token) + sum(per_position)
    trainer_value: float | None  # the trainer's own headline number, as it reports it
    trainer_name: str  # what the trainer calls that number
    conversion: str  # how the trainer's numbers became ours, in one sentence
    # SpecForge's eval/acceptance_rate_i as P(position k accepted) under sampled verification
    # (temperature 1: min(p, q) per step), beside the greedy per_position; None when not recorded
    sampled_per_position: list[float] | None = None


@dataclass
class Provenance:
    """What a run folder records about how its draft was made: the provenance card."""

    trainer: str  # a trainers.TRAINERS key: "specforge" (0.2), "speculators", "nemo-automodel"
    trainer_version: str | None
    run_folder: str
    checkpoint: str  # the step or epoch folder read
    chosen_by: str  # "best" | "latest" | "given"
    step: int | None = None
    epoch: int | None = None
    strategy: str | None = None  # SpecForge's algorithm name (eagle3, dflash, ...)
    target_path: str | None = None
    target_revision: str | None = None
    target_config_sha256: str | None = None
    target_files: dict[str, str] = field(default_factory=dict)  # target JSON file -> sha256
    capture_layers: tuple[int, ...] | None = None  # ids the run's capture used (online runs)
    capture_record: str | None = None  # the file and key capture_layers were read from
    chat_template: str | None = None
    best_metric: str | None = None
    best_score: float | None = None
    metrics: TrainingMetrics | None = None
    has_model_config: bool = True  # the checkpoint folder holds config.json + weights
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON-ready dict of every field."""
        d = asdict(self)
        d["capture_layers"] = list(self.capture_layers) if self.capture_layers else None
        return d


# ---------------------------------------------------------------------------------------------
# Metrics conversions


def specforge_metrics(metrics: dict, source: str) -> TrainingMetrics | None:
    """SpecForge's eval metrics (eval/evaluator.py) in eagle3dash's definition.

    `eval/per_position_acc` is the per-step accuracy given the earlier steps were right, over the
    eval set's tokens, and `eval/simulated_acc_len` = a0 + a0*a1 + ... leaves the bonus token out.
    `eval/acceptance_rate_{i}` is step i's expected acceptance under sampling, token-weighted
    (algorithms/eagle3/model.py _compute_loss_and_acceptance_rate): chained the same way.
    """
    acc = metrics.get("eval/per_position_acc")
    if not isinstance(acc, list) or not acc or not all(_number(a) for a in acc):
        return None
    per_position, cumulative = [], 1.0
    for a in acc:
        cumulative *= float(a)
        per_position.append(cumulative)
    value = metrics.get("eval/simulated_acc_len")
    rates = [metrics.get(f"eval/acceptance_rate_{i}") for i in range(len(acc))]
    sampled = None
    finite = [float(r) for r in rates if _number(r)]
    if len(finite) == len(acc):
        sampled, chained = [], 1.0
        for r in finite:
            chained *= r
            sampled.append(chained)
    return TrainingMetrics(
        source=source,
        per_position=per_position,
        accept_length=1.0 + sum(per_position),
        trainer_value=float(value) if _number(value) else None,
        trainer_name="eval/simulated_acc_len",
        conversion=(
            "position k accepted = product of eval/per_position_acc[0..k] (token-weighted over "
            "the eval set); accept length = 1 (the bonus token, which SpecForge's "
            "simulated_acc_len leaves out) + their sum"
        ),
        sampled_per_position=sampled,
    )


def speculators_metrics(metrics: dict, source: str) -> TrainingMetrics | None:
    """speculators' val_metrics.json (models/eagle3/metrics.py, train/utils.py) in our definition.

    `full_acc_{k}_epoch` is the share of tokens whose steps 0..k were all right (token-weighted
    sums over the validation set), which is exactly P(position k accepted).
    """
    found = {
        int(m[1]): float(v)
        for k, v in metrics.items()
        if (m := re.fullmatch(r"full_acc_(\d+)(?:_epoch)?", k)) and _number(v)
    }
    if not found or sorted(found) != list(range(len(found))):
        return None
    per_position = [found[k] for k in range(len(found))]
    return TrainingMetrics(
        source=source,
        per_position=per_position,
        accept_length=1.0 + sum(per_position),
        trainer_value=None,
        trainer_name="full_acc_k",
        conversion=(
            "position k accepted = full_acc_k (tokens whose draft steps 0..k were all right, "
            "token-weighted); accept length = 1 (the bonus token) + their sum; cond_acc_k is "
            "the same given step k-1 was right"
        ),
    )


def _number(x: object) -> TypeGuard[int | float]:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


# ---------------------------------------------------------------------------------------------
# Finding a run's checkpoint


def is_run_folder(path: str | Path) -> bool:
    """Whether `path` is a SpecForge 0.2 run or step folder (or its training_state.pt), a
    speculators 0.9 run folder, or a NeMo AutoModel run, step or consolidated export folder."""
    p = Path(path).expanduser()
    if p.name == SPECFORGE_STATE and p.is_file():
        return True
    if not p.is_dir():
        return False
    if (p / SPECFORGE_STATE).is_file() or _is_speculators(p) or _speculators_epoch(p):
        return True
    return (
        bool(_specforge_steps(p)) or _nemo_step_of(p) is not None or bool(_nemo_steps(_nemo_run(p)))
    )


def _specforge_steps(root: Path) -> dict[int, Path]:
    """Step number -> `{run_id}-step{N}` folder holding training_state.pt."""
    out = {}
    for d in root.iterdir():
        m = _SPECFORGE_STEP.fullmatch(d.name)
        if m and d.is_dir() and not d.is_symlink() and (d / SPECFORGE_STATE).is_file():
            out[int(m["step"])] = d
    return out


def _nemo_step_of(folder: Path) -> Path | None:
    """The NeMo step folder that `folder` is (or a pointer such as LATEST links to), or holds as
    its model/consolidated export or serve_vllm.py's copy of it."""
    real = folder.resolve()
    for below in ((), _NEMO_EXPORT, (*_NEMO_EXPORT, _NEMO_VLLM_EXPORT)):
        if len(real.parts) <= len(below) or real.parts[len(real.parts) - len(below) :] != below:
            continue
        step = real.parents[len(below) - 1] if below else real
        if _NEMO_STEP.fullmatch(step.name) and (step / "model").is_dir():
            return step
    return None


def nemo_exports(path: str | Path) -> list[Path]:
    """The draft folders of the NeMo AutoModel step that `path` is or lies in: its
    model/consolidated export, then serve_vllm.py's copy of it (the same tensors under vLLM's
    names) where written; [] for any other folder."""
    folder = Path(path).expanduser()
    step = _nemo_step_of(folder) if folder.is_dir() else None
    if step is None:
        return []
    export = step.joinpath(*_NEMO_EXPORT)
    return [d for d in (export, export / _NEMO_VLLM_EXPORT) if d.is_dir()]


def _nemo_run(folder: Path) -> Path:
    """The folder holding a NeMo run's step folders: `folder`'s `checkpoints/` when `folder` is
    the recipe's output_dir, else `folder` itself."""
    checkpoints = folder / _NEMO_CHECKPOINTS
    return checkpoints if checkpoints.is_dir() and _nemo_steps(checkpoints) else folder


def _nemo_steps(root: Path) -> dict[int, Path]:
    """Step number -> complete `epoch_{E}_step_{S}` folder of a NeMo AutoModel run."""
    return {
        int(m["step"]): d
        for d in root.iterdir()
        if (m := _NEMO_STEP.fullmatch(d.name))
        and d.is_dir()
        and not d.is_symlink()
        and (d / "model").is_dir()
        and not (d / _NEMO_INCOMPLETE).exists()
    }


def _nemo_pointer(root: Path, name: str) -> Path | None:
    """The step a NeMo run's pointer names (lifecycle.py `_update_checkpoint_pointer`: a link,
    or NAME.txt holding the path relative to the run folder)."""
    link, text = root / name, root / f"{name}.txt"
    target = str(link.readlink()) if link.is_symlink() else None
    if target is None and text.is_file():
        target = text.read_text(errors="replace").strip()
    return (root / target).resolve() if target else None


def _is_speculators(root: Path) -> bool:
    """A speculators run folder: run.yaml or train_command.txt beside its epochs. A folder with a
    config.json of its own is a checkpoint: an epoch folder, which holds its own copy of
    train_command.txt (train/checkpointer.py `_copy_train_command`), a copy of one, or a
    `--dry-run` draft (train/cli.py)."""
    marked = (root / "run.yaml").is_file() or (root / "train_command.txt").is_file()
    return marked and not (root / "config.json").is_file()


def _speculators_epoch(folder: Path) -> bool:
    """An `{epoch}/` folder of a speculators run, or a link to one: `checkpoint_best`
    (train/checkpointer.py) and `epoch{N}_end` / `epoch{N}_step{S}` (train/trainer.py
    maybe_save_checkpoint), as links or as folders when archived with links followed."""
    named = any(_SPECULATORS_EPOCH.fullmatch(p.name) for p in (folder, folder.resolve()))
    return named and (folder / "config.json").is_file() and _is_speculators(folder.parent)


def read_run_folder(path: str | Path) -> Provenance:
    """The provenance card of a run or step folder (the best checkpoint, else the latest)."""
    root = Path(path).expanduser().absolute()
    if root.name == SPECFORGE_STATE and root.is_file():  # a step's state file: its step folder
        root = root.parent
    if (root / SPECFORGE_STATE).is_file():
        return _specforge(root.parent, root, "given")
    steps = _specforge_steps(root) if root.is_dir() else {}
    if steps:
        for which in ("best", "latest"):
            links = sorted(root.glob(f"*-{which}"))
            if len(links) > 1:
                raise RunFolderError(
                    f"{root}: holds {len(links)} runs ({', '.join(p.name for p in links)}); "
                    "give one run's step folder"
                )
            if links and (links[0] / SPECFORGE_STATE).is_file():
                return _specforge(root, links[0].resolve(), which)
        return _specforge(root, steps[max(steps)], "latest")
    if root.is_dir() and _is_speculators(root):
        return _speculators(root)
    if root.is_dir() and _speculators_epoch(root):
        return _speculators(root.parent, root)
    step = _nemo_step_of(root) if root.is_dir() else None
    if step is not None:
        card = _nemo(step.parent, step, _NEMO_POINTERS.get(root.name, "given"))
        if root.resolve().name == _NEMO_VLLM_EXPORT:  # the copy vLLM serves is the one read
            card.checkpoint = str(root)
        return card
    root = _nemo_run(root) if root.is_dir() else root
    nemo = _nemo_steps(root) if root.is_dir() else {}
    if nemo:
        chosen = {d.resolve(): d for d in nemo.values()}
        for pointer, which in _NEMO_POINTERS.items():
            target = _nemo_pointer(root, pointer)
            if target in chosen:
                return _nemo(root, chosen[target], which)
        return _nemo(root, nemo[max(nemo)], "latest")
    raise RunFolderError(
        f"{root}: not a SpecForge run folder ({{run_id}}-step{{N}}/{SPECFORGE_STATE}), a "
        "speculators run folder (run.yaml, {epoch}/model.safetensors) nor a NeMo AutoModel run "
        "folder (output_dir/checkpoints/epoch_{E}_step_{S}/model/consolidated)"
    )


def run_checkpoints(path: str | Path) -> tuple[dict[int, Path], Path | None]:
    """Every checkpoint of a SpecForge 0.2 run (by step) or speculators 0.9 run (by epoch), and
    the one the trainer chose as best by its validation metric (None: it chose none)."""
    root = Path(path).expanduser().absolute()
    steps = _specforge_steps(root) if root.is_dir() else {}
    if not steps and root.is_dir() and _is_speculators(root):
        steps = {int(d.name): d for d in root.iterdir() if d.name.isdigit() and d.is_dir()}
    if not steps and root.is_dir():
        exports = {s: d.joinpath(*_NEMO_EXPORT) for s, d in _nemo_steps(_nemo_run(root)).items()}
        steps = {s: d for s, d in exports.items() if (d / "config.json").is_file()}
    if not steps:
        raise RunFolderError(
            f"{root}: no checkpoints found: neither SpecForge {{run_id}}-step{{N}} folders, "
            "speculators {epoch} folders nor NeMo AutoModel epoch_{E}_step_{S} folders; give the "
            "run folder, or the checkpoints one by one"
        )
    card = read_run_folder(root)
    best = Path(card.checkpoint).resolve() if card.chosen_by == "best" else None
    return dict(sorted(steps.items())), best


def load_training_state(path: Path) -> dict:
    """training_state.pt loaded with torch.load(weights_only=True): no pickle code runs."""
    import pickle

    import torch

    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:  # weights_only met a global it does not allow
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise RunFolderError(
            f"{path}: refused: it needs more than plain tensors and containers to load "
            f"(torch.load weights_only=True says: {first[:160]}); eagle3dash never runs pickle "
            "code, so export the run with `specforge export --to sglang` where you trust it"
        ) from None
    except Exception as e:  # a truncated or foreign file: torch raises many kinds
        raise RunFolderError(
            f"{path}: cannot be read as a SpecForge training state ({type(e).__name__}); copy "
            "it again from the run"
        ) from None
    if not isinstance(state, dict):
        raise RunFolderError(f"{path}: holds a {type(state).__name__}, not SpecForge's state dict")
    return state


def _pairs(value: object) -> dict:
    """A mapping stored as a mapping or as (key, value) pairs (SpecForge's resume contract)."""
    if isinstance(value, dict):
        return value
    if isinstance(value, list | tuple):
        return {
            p[0]: p[1]
            for p in value
            if isinstance(p, list | tuple) and len(p) == 2 and isinstance(p[0], str)
        }
    return {}


def _json_digests(identity: object) -> dict[str, str]:
    """JSON file name -> sha256 in a SpecForge "directory-stat-v2" source identity
    (training/provenance.py hashes the target folder's JSON files: config, tokenizer, template)."""
    if not isinstance(identity, list | tuple) or len(identity) < 3:
        return {}
    records = identity[2] if isinstance(identity[2], list | tuple) else ()
    return {
        str(r[1]): str(r[3])
        for r in records
        if isinstance(r, list | tuple) and len(r) == 4 and r[0] == "sha256"
    }


def json_digests(folder: str | Path | None) -> dict[str, str]:
    """The sha256 of each JSON file at the top of a local target folder, as SpecForge records."""
    import hashlib

    path = Path(folder).expanduser() if folder else None
    if path is None or not path.is_dir():
        return {}
    return {
        f.name: hashlib.sha256(f.read_bytes()).hexdigest()
        for f in sorted(path.iterdir())
        if f.name.endswith(".json") and f.is_file()
    }


def _specforge(run: Path, step_dir: Path, chosen_by: str) -> Provenance:
    state = load_training_state(step_dir / SPECFORGE_STATE)
    prov = _pairs(state.get(_PROVENANCE_KEY))
    target = prov.get("target_model")
    target_path = str(target[1]) if isinstance(target, list | tuple) and len(target) > 1 else None
    layers = prov.get("capture_layers")
    m = _SPECFORGE_STEP.fullmatch(step_dir.name)
    run_id = state.get("run_id") or (m["run"] if m else None)
    card = Provenance(
        trainer="specforge",
        trainer_version=">= 0.2",
        run_folder=str(run),
        checkpoint=str(step_dir),
        chosen_by=chosen_by,
        step=_int(state.get("global_step")) or (int(m["step"]) if m else None),
        epoch=_int(state.get("epoch")),
        strategy=state.get("strategy") if isinstance(state.get("strategy"), str) else None,
        target_path=target_path,
        target_revision=_str(prov.get("target_revision")),
        target_config_sha256=_json_digests(target).get("config.json"),
        target_files=_json_digests(target),
        capture_layers=tuple(int(i) for i in layers) if isinstance(layers, list | tuple) else None,
        capture_record=None if layers is None else f"{SPECFORGE_STATE} {_PROVENANCE_KEY}",
        has_model_config=(step_dir / "config.json").is_file(),
    )
    if layers is None and prov:
        card.notes.append("no capture layers recorded: an offline run (features made beforehand)")
    meta_path = run / f"{run_id}.best_meta.json"
    if meta_path.is_file():
        meta = _json(meta_path)
        card.best_metric = _str(meta.get("metric"))
        card.best_score = float(meta["score"]) if _number(meta.get("score")) else None
        metrics = meta.get("metrics")
        if isinstance(metrics, dict):
            card.metrics = specforge_metrics(
                metrics, f"{meta_path.name} (best step {meta.get('step')})"
            )
    return card


def _speculators(root: Path, given: Path | None = None) -> Provenance:
    epochs = {
        int(d.name): d
        for d in root.iterdir()
        if d.name.isdigit() and d.is_dir() and not d.is_symlink()
    }
    best = root / "checkpoint_best"  # a link, or a folder when archived with links followed
    if given is not None:
        chosen, by = given, "given"
    elif best.is_dir():
        chosen, by = best.resolve(), "best"
    elif epochs:
        chosen, by = epochs[max(epochs)], "latest"
    else:
        raise RunFolderError(
            f"{root}: a speculators run folder without any {{epoch}}/ checkpoint; "
            "wait for the first epoch to finish or give another run"
        )
    run_yaml = _run_yaml(root / "run.yaml")
    # `--save-best` deletes run.yaml (train/checkpointer.py cleanup_keep_only_best): then the
    # flags of the recorded command say what the run was given
    flags = {} if run_yaml else _train_command_flags(root / "train_command.txt")
    layers, record = _speculators_ids(run_yaml, flags)
    epoch = chosen.resolve().name
    card = Provenance(
        trainer="speculators",
        trainer_version=_train_command_version(root / "train_command.txt"),
        run_folder=str(root),
        checkpoint=str(chosen),
        chosen_by=by,
        epoch=int(epoch) if epoch.isdigit() else None,
        strategy=_str(_yaml_value(run_yaml, "speculator_type") or _flag(flags, "speculator_type")),
        target_path=_str(
            _yaml_value(run_yaml, "verifier_name_or_path") or _flag(flags, "verifier_name_or_path")
        ),
        capture_layers=layers,
        capture_record=None if layers is None else record,
        chat_template=_str(_yaml_value(run_yaml, "chat_template")),
        has_model_config=(chosen / "config.json").is_file(),
    )
    metrics_path = chosen / "val_metrics.json"
    if metrics_path.is_file():
        metrics = _json(metrics_path)
        card.best_metric = "loss_epoch" if "loss_epoch" in metrics else None
        card.best_score = (
            float(metrics["loss_epoch"]) if _number(metrics.get("loss_epoch")) else None
        )
        card.metrics = speculators_metrics(metrics, f"{chosen.name}/val_metrics.json")
    return card


def _nemo(run: Path, step: Path, chosen_by: str) -> Provenance:
    """The card of a NeMo AutoModel step folder: its config.yaml's target and capture ids
    (recipes/llm/train_eagle3.py: the colocated, SGLang and vLLM targets take
    `recipe_args.aux_layer_ids`, else eagle/target.py default_eagle3_aux_layer_ids; an offline
    run's ids are its cache's manifest.json `aux_layer_ids`), and losses.json."""
    m = _NEMO_STEP.fullmatch(step.name)
    export = step.joinpath(*_NEMO_EXPORT)
    recipe = _yaml_section(_run_yaml(step / "config.yaml"), "recipe_args")
    card = Provenance(
        trainer="nemo-automodel",
        trainer_version=None,  # nothing in a checkpoint records NeMo AutoModel's release
        run_folder=str(run),
        checkpoint=str(export),
        chosen_by=chosen_by,
        step=int(m["step"]) if m else None,
        epoch=int(m["epoch"]) if m else None,
        target_path=_str(_yaml_value(recipe, "target_model_name_or_path")),
        has_model_config=(export / "config.json").is_file(),
    )
    cache = _str(_yaml_value(recipe, "cached_target_path"))
    backend = _str(_yaml_value(recipe, "target_model_backend")) or "colocated"
    ids = _ints(_yaml_value(recipe, "aux_layer_ids"))
    if cache is not None:
        manifest = Path(cache).expanduser() / "manifest.json"
        ids = _ints(_json(manifest).get("aux_layer_ids")) if manifest.is_file() else None
        record = f"the offline cache's {manifest} aux_layer_ids"
        if ids is None:
            card.notes.append(
                f"an offline run: its capture ids are in {manifest} (aux_layer_ids), which is "
                "not readable here, so the training ids are assumed"
            )
    elif backend == "remote":
        ids, record = None, ""
        card.notes.append(
            "a remote target: its capture ids were the target server's --aux-layer-ids, which "
            "the run does not record, so the training ids are assumed"
        )
    else:
        record = "config.yaml recipe_args.aux_layer_ids"
        if ids is None:
            where = "sets no" if (step / "config.yaml").is_file() else "is missing, so no"
            card.notes.append(
                f"config.yaml {where} recipe_args.aux_layer_ids: NeMo AutoModel's default "
                "[1, N//2-1, N-4] applies (eagle/target.py), so the training ids are assumed"
            )
    card.capture_layers, card.capture_record = ids, record if ids is not None else None
    losses_path = step / "losses.json"
    losses = _json(losses_path) if losses_path.is_file() else {}
    if _number(losses.get("val_loss")):
        # LOWEST_VAL ranks checkpoints by val_loss (components/checkpoint/utils.py
        # read_checkpoint_metric); val_accuracy is top-1 pooled over the TTT steps and tau_sim
        # (the accept length with the bonus token, eagle/core.py) is logged, never saved
        card.best_metric, card.best_score = "val_loss", float(losses["val_loss"])
        card.notes.append(
            "losses.json holds val_loss and val_accuracy (top-1 pooled over the draft steps, not "
            "an acceptance); NeMo AutoModel logs its accept length (val_tau_sim, bonus token "
            "included) to the training log and W&B only, so no trainer acceptance is shown"
        )
    if not card.has_model_config:
        card.notes.append("the step holds no consolidated export (model/consolidated/)")
    return card


def _yaml_section(text: str, key: str) -> str:
    """The block under a top-level `key:` of a block-style YAML text ('' when absent)."""
    m = re.search(rf"^{re.escape(key)}:[ \t]*\n((?:[ \t]+.*\n?|\n)*)", text, re.M)
    return m[1] if m else ""


def _train_command_version(path: Path) -> str | None:
    """The speculators version in train_command.txt's header (`# speculators: 0.9.0`)."""
    if not path.is_file():
        return None
    m = re.search(r"^# speculators: (\S+)", path.read_text(errors="replace"), re.M)
    return m[1] if m else None


def _speculators_ids(
    run_yaml: str, flags: dict[str, list[str]]
) -> tuple[tuple[int, ...] | None, str]:
    """The run's target layer ids and where they were read: run.yaml's, else the command's."""
    if run_yaml:
        return _ints(_yaml_value(run_yaml, "target_layer_ids")), "run.yaml target_layer_ids"
    ids = flags.get("target_layer_ids") or ["none"]
    layers = tuple(map(int, ids)) if all(i.isdigit() for i in ids) else None
    return layers, "train_command.txt --target-layer-ids"


def _train_command_flags(path: Path) -> dict[str, list[str]]:
    """The flags of the command in train_command.txt (train/utils.py save_train_command: `# `
    header lines, then the argv shlex-joined), by dest (`--target-layer-ids 1 2` ->
    target_layer_ids: ["1", "2"]); the last occurrence wins, as in argparse."""
    if not path.is_file():
        return {}
    lines = path.read_text(errors="replace").splitlines()
    command = next((line for line in reversed(lines) if line and not line.startswith("#")), "")
    try:
        words = shlex.split(command)
    except ValueError:  # an unbalanced quote: a hand-edited or cut file
        return {}
    flags: dict[str, list[str]] = {}
    values: list[str] = []
    for word in words:
        if word.startswith("--"):
            name, equals, value = word[2:].partition("=")
            values = flags[name.replace("-", "_")] = [value] if equals else []
        else:
            values.append(word)
    return flags


def _flag(flags: dict[str, list[str]], dest: str) -> str | None:
    """A one-valued flag's value."""
    given = flags.get(dest)
    return given[-1] if given else None


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise RunFolderError(f"{path}: not valid JSON ({e}); copy it again from the run") from e
    if not isinstance(data, dict):
        raise RunFolderError(f"{path}: holds a JSON {type(data).__name__}, expected an object")
    return data


def _run_yaml(path: Path) -> str:
    """run.yaml's text ('' when absent)."""
    try:
        return path.read_text(encoding="utf-8") if path.is_file() else ""
    except (OSError, UnicodeDecodeError) as e:
        raise RunFolderError(f"{path}: unreadable ({e}); copy it again from the run") from e


def _yaml_value(text: str, key: str) -> Any:
    """One key's value in run.yaml as speculators writes it (train/config/artifacts.py:
    yaml.safe_dump, block style): a scalar on the key's line, or `- item` lines below it."""
    m = re.search(rf"^([ \t]*){re.escape(key)}:[ \t]*(.*)$", text, re.M)
    if m is None:
        return None
    if m[2].strip():
        return _yaml_scalar(m[2])
    items = []
    for line in text[m.end() + 1 :].splitlines():
        item = re.fullmatch(rf"{m[1]}[ \t]*- (.+)", line)
        if item is None:
            break
        items.append(_yaml_scalar(item[1]))
    return items or None


def _yaml_scalar(text: str) -> Any:
    """A plain YAML scalar or flow list: JSON where it parses, else the unquoted text."""
    text = text.strip()
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None if text in ("null", "~") else text.strip("'\"")


def _int(x: object) -> int | None:
    return x if isinstance(x, int) and not isinstance(x, bool) else None


def _str(x: object) -> str | None:
    return x if isinstance(x, str) and x else None


def _ints(x: object) -> tuple[int, ...] | None:
    if isinstance(x, list | tuple) and all(isinstance(i, int) for i in x):
        return tuple(x)
    return None


def no_model_message(card: Provenance) -> str:
    """Why a run's checkpoint cannot be read as a draft, and what makes it readable."""
    if card.trainer == "nemo-automodel":
        step = Path(card.checkpoint).parent.parent
        return (
            f"{step}: a NeMo AutoModel checkpoint without a consolidated export (no "
            f"{card.checkpoint}/config.json): consolidate it first (bash {step}/model/"
            "consolidate.sh, or train with checkpoint.save_consolidated), then give the run or "
            "that folder again"
        )
    return (
        f"{card.checkpoint}: a SpecForge training checkpoint (training_state.pt, no config.json): "
        f"export it first: specforge export --to sglang --checkpoint {card.checkpoint} "
        "--draft-config <the draft config.json the run trained with> --output-dir <new folder>; "
        "or give the draft's config.json (--draft-config) to read the draft from the state dict"
    )


def materialize(checkpoint: str | Path, draft_config: str | Path) -> Path:
    """A model folder (the given draft config + the step's draft weights) for a SpecForge step
    folder without config.json, so the draft can be inspected and evaluated from its state dict.

    What `specforge export --to sglang` writes for LlamaForCausalLMEagle3 (export/to_sglang.py:
    the identity weight map, embeddings left out), without running SpecForge. The folder lies
    under the temp folder, named by the inputs' content, and is reused while they are unchanged.
    """
    import hashlib
    import os
    import shutil
    import tempfile

    from safetensors.torch import save_file

    card = read_run_folder(checkpoint)
    state_path = Path(card.checkpoint) / SPECFORGE_STATE
    config = Path(draft_config).expanduser()
    if not config.is_file():
        raise RunFolderError(f"{config}: no such draft config file; give the draft's config.json")
    config_text = config.read_bytes()
    _json(config)  # a readable JSON object, or one line saying why not
    stat = state_path.stat()
    key = hashlib.sha256(
        f"{state_path.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode() + config_text
    ).hexdigest()[:16]
    out = Path(tempfile.gettempdir()) / "eagle3dash-exports" / key
    if (out / "model.safetensors").is_file():
        return out
    weights = load_training_state(state_path).get("draft_state_dict")
    if not isinstance(weights, dict) or not weights:
        raise RunFolderError(f"{state_path}: no draft_state_dict; is this a SpecForge 0.2 run?")
    import torch

    tensors = {
        k: v.contiguous()
        for k, v in weights.items()
        if isinstance(v, torch.Tensor) and "embed" not in k.lower()
    }
    staging = out.with_name(f"{key}.{os.getpid()}.tmp")
    staging.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(staging / "model.safetensors"), metadata={"format": "pt"})
    (staging / "config.json").write_bytes(config_text)
    if out.exists():
        shutil.rmtree(out)  # an earlier export cut short
    os.replace(staging, out)
    return out
