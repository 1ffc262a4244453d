"""Captures on disk, and SpecForge / speculators training dumps read as captures."""

from __future__ import annotations

import gzip
import io
import json

import pytest
import torch
from safetensors.torch import save_file

from eagle3dash.capture import (
    Capture,
    CaptureError,
    Sequence,
    load_capture,
    read_capture,
    read_specforge_dump,
    read_speculators_dump,
    save_capture,
)
from eagle3dash.layout import Tap, parse_layout

HT = 8
TAPS = (Tap(0), Tap(2), Tap(3), Tap(4, post_norm=True))


def make_capture(lengths=(5, 7, 3), dtype=torch.float32, embed=True) -> Capture:
    gen = torch.Generator().manual_seed(0)
    seqs = []
    for i, n in enumerate(lengths):
        seqs.append(
            Sequence(
                input_ids=torch.randint(0, 50, (n,), generator=gen),
                states={t: torch.randn(n, HT, generator=gen).to(dtype) for t in TAPS},
                target_ids=torch.randint(0, 50, (n,), generator=gen) if i != 1 else None,
                loss_mask=(torch.arange(n) % 2).to(torch.int64) if i == 0 else None,
            )
        )
    return Capture(
        taps=TAPS,
        sequences=seqs,
        hidden_size=HT,
        source="test",
        meta={"note": "x"},
        embed_weight=torch.randn(50, HT, generator=gen) if embed else None,
    )


def test_round_trip_sharded_and_tap_subset(tmp_path):
    cap = make_capture()
    out = save_capture(cap, tmp_path / "cap", shard_bytes=200)
    manifest = json.loads((out / "capture.json").read_text())
    assert manifest["format"] == "eagle3dash-capture/1"
    assert manifest["num_sequences"] == 3 and manifest["hidden_size"] == HT
    assert manifest["dtype"] == "float32"
    assert len(manifest["shards"]) == 3  # one sequence per shard at this size
    assert manifest["taps"][3] == {"depth": 4, "post_norm": True}

    back = load_capture(out)
    assert back.taps == TAPS and back.source == "test" and back.meta == {"note": "x"}
    torch.testing.assert_close(back.embed_weight, cap.embed_weight)
    for a, b in zip(cap.sequences, back.sequences, strict=True):
        assert torch.equal(a.input_ids, b.input_ids)
        for t in TAPS:
            assert torch.equal(a.states[t], b.states[t])
        assert (a.target_ids is None) == (b.target_ids is None)
        if a.target_ids is not None:
            assert torch.equal(a.target_ids, b.target_ids)
        assert (a.loss_mask is None) == (b.loss_mask is None)

    sub = load_capture(out, taps=(Tap(3), Tap(0)), load_embed=False)
    assert sub.taps == (Tap(3), Tap(0)) and sub.embed_weight is None
    assert set(sub.sequences[1].states) == {Tap(0), Tap(3)}

    one_shard = save_capture(cap, tmp_path / "one")
    assert json.loads((one_shard / "capture.json").read_text())["shards"] == [
        "shard_00000.safetensors"
    ]
    with pytest.raises(CaptureError, match=r"no states at \[7\] \(after block 7\); it has \[0,"):
        load_capture(out, taps=(Tap(7),))


def test_bf16_round_trip(tmp_path):
    cap = make_capture(dtype=torch.bfloat16, embed=False)
    back = load_capture(save_capture(cap, tmp_path / "c"))
    assert back.sequences[0].states[Tap(2)].dtype == torch.bfloat16
    assert back.embed_weight is None


def test_views_of_one_buffer_are_saved_without_copies_and_overlaps_with_one(tmp_path):
    block = torch.arange(3 * 2 * 4, dtype=torch.float32).reshape(3, 2, 4)  # [taps, L, Ht]
    ids = torch.tensor([4, 9])
    views = Sequence(input_ids=ids, states={Tap(1): block[0], Tap(2): block[1], Tap(3): block[2]})
    # the same tensor at two taps overlaps itself: saved from a copy
    same = Sequence(input_ids=ids, states={Tap(1): block[0], Tap(2): block[0], Tap(3): block[2]})
    cap = Capture(taps=(Tap(1), Tap(2), Tap(3)), sequences=[views, same], hidden_size=4)
    back = load_capture(save_capture(cap, tmp_path / "c"))
    assert back.sequences[0].states[Tap(2)].tolist() == [
        [8.0, 9.0, 10.0, 11.0],
        [12.0, 13.0, 14.0, 15.0],
    ]
    assert back.sequences[1].states[Tap(2)].tolist() == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0, 7.0]]
    assert back.sequences[1].states[Tap(3)].tolist() == [
        [16.0, 17.0, 18.0, 19.0],
        [20.0, 21.0, 22.0, 23.0],
    ]


def test_aux_order_and_missing_tap():
    cap = make_capture()
    aux = cap.aux(1, parse_layout("3,0,4n"))
    s = cap.sequences[1].states
    assert aux.shape == (7, 3 * HT)
    assert torch.equal(aux, torch.cat([s[Tap(3)], s[Tap(0)], s[Tap(4, True)]], dim=-1))
    with pytest.raises(
        CaptureError, match=r"no states at \[1,4\] \(after block 1, after block 4\).*has \[0,"
    ):
        cap.aux(0, parse_layout("1,2,4"))


def test_corrupt_files(tmp_path):
    out = save_capture(make_capture(), tmp_path / "cap", shard_bytes=200)
    shard = out / "shard_00001.safetensors"
    shard.write_bytes(b"\x10\x00garbage" * 3)
    with pytest.raises(CaptureError, match="shard_00001.safetensors: cannot be read"):
        load_capture(out)
    (out / "capture.json").write_text("{not json")
    with pytest.raises(CaptureError, match="capture.json: cannot be read as JSON"):
        load_capture(out)
    (out / "capture.json").write_text(json.dumps({"format": "other/9"}))
    with pytest.raises(CaptureError, match="format is 'other/9'"):
        load_capture(out)
    with pytest.raises(CaptureError, match="no capture.json"):
        load_capture(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(CaptureError, match="neither an eagle3dash capture"):
        read_capture(empty)


def test_missing_shard_and_sequence(tmp_path):
    out = save_capture(make_capture(), tmp_path / "cap", shard_bytes=200)
    (out / "shard_00002.safetensors").unlink()
    with pytest.raises(CaptureError, match="shard_00002.safetensors: shard listed"):
        load_capture(out)
    m = json.loads((out / "capture.json").read_text())
    m["shards"] = m["shards"][:2]
    (out / "capture.json").write_text(json.dumps(m))
    with pytest.raises(CaptureError, match="sequence 2 .* is in no shard"):
        load_capture(out)


def _specforge_sample(n: int, a: int, seed: int) -> dict:
    gen = torch.Generator().manual_seed(seed)
    return {
        "input_ids": torch.randint(0, 50, (n,), generator=gen),
        "loss_mask": (torch.arange(n) > 1).to(torch.int64),
        "aux_hidden_state": torch.randn(1, n, a * HT, generator=gen).to(torch.bfloat16),
        "hidden_state": torch.randn(1, n, HT, generator=gen).to(torch.bfloat16),
    }


def test_specforge_dump(tmp_path):
    root = tmp_path / "dump"
    (root / "rows_0-2000").mkdir(parents=True)
    samples = [_specforge_sample(n, 3, i) for i, n in enumerate((6, 4, 9))]
    # written out of order, one compressed: the reader orders by the data_{idx} number
    torch.save(samples[2], root / "rows_0-2000" / "data_10.ckpt")
    torch.save(samples[0], root / "rows_0-2000" / "data_2.ckpt")
    buf = io.BytesIO()
    torch.save(samples[1], buf)
    with gzip.open(root / "rows_0-2000" / "data_3.ckpt.gz", "wb") as f:
        f.write(buf.getvalue())
    layout = parse_layout("2,12,22")
    cap = read_specforge_dump(root, layout, num_target_layers=24)
    assert cap.hidden_size == HT
    assert cap.taps == layout + (Tap(24, post_norm=True),)
    assert [len(s) for s in cap.sequences] == [6, 4, 9]
    for i, (s, raw) in enumerate(zip(cap.sequences, samples, strict=True)):
        assert torch.equal(s.input_ids, raw["input_ids"])
        assert torch.equal(s.loss_mask, raw["loss_mask"])
        assert torch.equal(cap.aux(i, layout), raw["aux_hidden_state"][0])
        assert torch.equal(s.states[Tap(12)], raw["aux_hidden_state"][0, :, HT : 2 * HT])
        assert torch.equal(s.states[Tap(24, True)], raw["hidden_state"][0])
    assert cap.meta["layout_assumed"] == "2,12,22"
    # dispatch, and a layout is required
    assert len(read_capture(root, layout).sequences) == 3
    with pytest.raises(CaptureError, match="pass the layout"):
        read_capture(root)
    with pytest.raises(CaptureError, match="not a multiple of the 5 taps"):
        read_specforge_dump(root, parse_layout("1,2,3,4,5"))
    # a dump read as a capture can be saved and loaded as one
    back = load_capture(save_capture(cap, tmp_path / "saved"), taps=layout)
    assert torch.equal(back.aux(2, layout), cap.aux(2, layout))


class Custom:
    def __init__(self):
        self.x = 1


def test_specforge_dump_refuses_pickles_and_corrupt(tmp_path):
    root = tmp_path / "dump"
    root.mkdir()
    torch.save(
        {"input_ids": torch.zeros(3, dtype=torch.int64), "meta": Custom()}, root / "data_0.ckpt"
    )
    with pytest.raises(CaptureError, match=r"data_0.ckpt.*weights_only"):
        read_specforge_dump(root, parse_layout("1,2,3"))
    (root / "data_0.ckpt").write_bytes(b"not a torch file")
    with pytest.raises(CaptureError, match="data_0.ckpt: cannot be read"):
        read_specforge_dump(root, parse_layout("1,2,3"))
    torch.save({"input_ids": torch.zeros(3, dtype=torch.int64)}, root / "data_0.ckpt")
    with pytest.raises(CaptureError, match="missing keys .*aux_hidden_state"):
        read_specforge_dump(root, parse_layout("1,2,3"))


def test_speculators_dump(tmp_path):
    root = tmp_path / "data" / "hidden_states"
    root.mkdir(parents=True)
    gen = torch.Generator().manual_seed(0)
    raw = []
    for i, n in enumerate((5, 8)):
        hs = torch.randn(n, 4, HT, generator=gen).to(torch.bfloat16)
        ids = torch.randint(0, 50, (n,), generator=gen)
        save_file({"hidden_states": hs, "token_ids": ids}, str(root / f"hs_{i}.safetensors"))
        raw.append((hs, ids))
    layout = parse_layout("2,16,29")
    cap = read_speculators_dump(tmp_path / "data", layout, num_target_layers=32)
    assert cap.taps == layout + (Tap(32),)
    assert cap.hidden_size == HT
    for s, (hs, ids) in zip(cap.sequences, raw, strict=True):
        assert torch.equal(s.input_ids, ids)
        assert torch.equal(s.states[Tap(16)], hs[:, 1])
        assert torch.equal(s.states[Tap(32)], hs[:, 3])  # final slot, pre-norm
        assert s.loss_mask is None
    assert torch.equal(cap.aux(1, layout), raw[1][0][:, :3].flatten(1))
    assert len(read_capture(tmp_path / "data", layout, 32).sequences) == 2
    with pytest.raises(CaptureError, match="number of layers"):
        read_capture(tmp_path / "data", layout)
    with pytest.raises(CaptureError, match="has 4 slots; layout 2,16 has 2 taps"):
        read_speculators_dump(root, parse_layout("2,16"), 32)
    (root / "hs_1.safetensors").write_bytes(b"\x00" * 20)
    with pytest.raises(CaptureError, match="hs_1.safetensors: cannot be read as safetensors"):
        read_speculators_dump(root, layout, 32)


@pytest.mark.parametrize(
    "patch, says",
    [
        ({"hidden_size": "32"}, "hidden_size is '32', not a whole number >= 1"),
        ({"num_sequences": -1}, "num_sequences is -1, not a whole number >= 0"),
        ({"taps": "0,1"}, "taps must be a list of {depth, post_norm} objects"),
        ({"shards": ["../../outside.safetensors"]}, "shards must be a list of file names beside"),
    ],
)
def test_a_manifest_field_of_the_wrong_type_names_it(tmp_path, patch, says) -> None:
    capture = Capture(
        taps=(Tap(1),),
        sequences=[Sequence(torch.tensor([1, 2]), {Tap(1): torch.zeros(2, 4)})],
        hidden_size=4,
    )
    path = save_capture(capture, tmp_path / "cap")
    manifest = json.loads((path / "capture.json").read_text())
    manifest.update(patch)
    (path / "capture.json").write_text(json.dumps(manifest))
    with pytest.raises(CaptureError) as err:
        load_capture(path)
    assert says in str(err.value)
