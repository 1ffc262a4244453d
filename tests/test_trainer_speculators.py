"""speculators 0.9.0 for real: the files a real `speculators train` wrote on this CPU
(tests/trainerlane/speculators.py, the `speculators_run` fixture), read as a user gives them.

Every entry a user could paste (the run folder, an epoch folder, the `checkpoint_best` and
`epoch{N}_end` links, a `--save-best` run and its epoch) reads back the same training side: the
ids the lane passed to speculators, `--target-layer-ids 1 2 3`, in vLLM's numbering (id k = the
residual stream after k blocks), Tap(1), Tap(2), Tap(3) of the 4-block demo target. The expected
values are those literals, never the tool's own rules.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from eagle3dash.provenance import read_run_folder, run_checkpoints
from tests.specs import run_cli

IDS = [1, 2, 3]  # the lane's --target-layer-ids
DEPTHS = [1, 2, 3]  # vLLM numbering: id k = Tap(k)

# (entry, the epoch it is): "best" is the epoch the trainer linked as checkpoint_best
ENTRIES = [
    ("run", "best"),
    ("run/0", 0),
    ("run/1", 1),
    ("run/checkpoint_best", "best"),
    ("run/epoch0_end", 0),
    ("best-run", "best"),
    ("best-run/checkpoint_best", "best"),
    ("best-run/{best}", "best"),
]


def _best(run: Path) -> int:
    """The epoch speculators linked as checkpoint_best (a relative link: train/checkpointer.py)."""
    return int(os.readlink(run / "checkpoint_best"))


def _entry(speculators_run: dict, entry: str) -> tuple[Path, Path]:
    """The entry's path and its run folder."""
    name, _, rest = entry.partition("/")
    run = speculators_run["best_run" if name == "best-run" else "run"]
    return run / rest.format(best=_best(run)) if rest else run, run


def test_the_runs_hold_what_speculators_0_9_writes(speculators_run) -> None:
    """The shapes the tool reads, as the trainer wrote them: a run folder with run.yaml, the
    command, epoch folders each with its own copy of the command, the links; a --save-best run
    keeps only the command and the best epoch."""
    run, best_run = speculators_run["run"], speculators_run["best_run"]
    assert {"run.yaml", "train_command.txt", "0", "1", "epoch0_end", "epoch1_end"} <= {
        p.name for p in run.iterdir()
    }
    assert (run / "checkpoint_best").is_symlink() and (run / "epoch1_end").readlink() == Path("1")
    for epoch in ("0", "1"):
        assert (run / epoch / "train_command.txt").read_text() == (
            run / "train_command.txt"
        ).read_text()
        config = json.loads((run / epoch / "config.json").read_text())
        assert config["eagle_aux_hidden_state_layer_ids"] == IDS
    command = (run / "train_command.txt").read_text().splitlines()
    assert "# speculators: 0.9.0" in command
    assert "--target-layer-ids 1 2 3" in command[-1]
    best = _best(best_run)
    assert {p.name for p in best_run.iterdir()} == {
        "train_command.txt",
        str(best),
        "checkpoint_best",
    }


@pytest.mark.parametrize(("entry", "epoch"), ENTRIES)
def test_every_entry_of_a_real_run_reads_the_ids_it_was_given(
    speculators_run, entry: str, epoch: int | str
) -> None:
    """inspect, layout and matrix on each entry: the draft's ids, the run's recorded ids and its
    target, and the training taps, Tap(1), Tap(2), Tap(3), the same for all (fails before: the
    epoch folders and links were refused as run folders without epochs, and a --save-best run,
    without run.yaml, showed no recorded ids nor target)."""
    path, run = _entry(speculators_run, entry)
    expected_epoch = _best(run) if epoch == "best" else epoch

    shown = run_cli("inspect", "--json", str(path))
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert report["aux_layer_ids"] == IDS
    card = report["provenance"]
    assert (card["trainer"], card["trainer_version"]) == ("speculators", "0.9.0")
    assert (card["capture_layers"], card["target_path"]) == (IDS, str(speculators_run["target"]))
    assert (card["epoch"], Path(card["run_folder"])) == (expected_epoch, run)

    shown = run_cli(
        "layout", "--draft", str(path), "--target-layers", "4", "--engine", "vllm",
        "--vllm-version", "0.32.0", "--json",
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    layout = json.loads(shown.stdout)
    assert [tap["depth"] for tap in layout["training"]] == DEPTHS
    # vLLM feeds slot j the stream after ids[j] blocks: what the draft was trained on
    assert [tap["depth"] for tap in layout["serving"]] == DEPTHS

    shown = run_cli("matrix", "--draft", str(path), "--target-layers", "4", "--json")
    assert shown.returncode == 0, shown.stderr
    training = json.loads(shown.stdout)["training"]
    assert [tap["depth"] for tap in training["layout"]] == DEPTHS
    assert training["trainer"] == "speculators"


def test_an_epoch_folder_and_its_links_are_read_as_that_epoch(speculators_run) -> None:
    """Each epoch folder holds its own copy of train_command.txt (train/checkpointer.py): it is
    still that epoch of its run, with the run's recorded ids (fails before: "a speculators run
    folder without any {epoch}/ checkpoint")."""
    run = speculators_run["run"]
    for entry, epoch in (("0", 0), ("epoch0_end", 0), ("checkpoint_best", _best(run))):
        card = read_run_folder(run / entry)
        assert (card.chosen_by, card.epoch, card.run_folder) == ("given", epoch, str(run))
        assert (card.capture_layers, card.capture_record) == (
            tuple(IDS),
            "run.yaml target_layer_ids",
        )


def test_a_save_best_run_keeps_its_ids_and_target_in_the_train_command(speculators_run) -> None:
    """--save-best deletes run.yaml (train/checkpointer.py cleanup_keep_only_best): the ids and
    the verifier come from train_command.txt's flags (fails before: none shown)."""
    best_run = speculators_run["best_run"]
    assert not (best_run / "run.yaml").exists()
    card = read_run_folder(best_run)
    assert (card.chosen_by, card.epoch) == ("best", _best(best_run))
    assert card.capture_layers == tuple(IDS)
    assert card.capture_record == "train_command.txt --target-layer-ids"
    assert (card.target_path, card.strategy) == (str(speculators_run["target"]), "eagle3")


def test_a_real_runs_checkpoints_are_its_epochs(speculators_run) -> None:
    """A sweep's list: every epoch folder, the trainer's best marked; a --save-best run has one."""
    run, best_run = speculators_run["run"], speculators_run["best_run"]
    assert run_checkpoints(run) == ({0: run / "0", 1: run / "1"}, (run / str(_best(run))))
    best = _best(best_run)
    assert run_checkpoints(best_run) == ({best: best_run / str(best)}, best_run / str(best))


def test_a_copy_of_the_best_epoch_is_read_as_a_checkpoint(speculators_run, tmp_path) -> None:
    """checkpoint_best copied out of its run to be served, with its own train_command.txt: a
    checkpoint with the ids it was trained on, not a run folder without epochs (fails before)."""
    copy = tmp_path / "draft"
    shutil.copytree(speculators_run["run"] / "checkpoint_best", copy)
    assert (copy / "train_command.txt").is_file()
    shown = run_cli("inspect", "--json", str(copy))
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert (report["aux_layer_ids"], report["path"]) == (IDS, str(copy))
