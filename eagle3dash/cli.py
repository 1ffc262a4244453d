"""Command line: `python -m eagle3dash <command>`: the operations the app runs, for headless use.

Every command prints a short human report, or with --json one JSON object (a stable contract).
Unusable input exits 1 with a one-line message, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable

from eagle3dash.errors import InputError
from eagle3dash.layout import format_layout, parse_layout


class UsageError(InputError):
    """A bad combination of command-line arguments."""


def _print_json(obj: dict) -> None:
    json.dump(obj, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")


def _rows(pairs: list[tuple[str, object]]) -> str:
    width = max(len(k) for k, _ in pairs)
    return "\n".join(f"  {k:<{width}}  {v}" for k, v in pairs)


def cmd_inspect(args: argparse.Namespace) -> int:
    """Report a draft checkpoint from its config and safetensors headers."""
    from eagle3dash.checkpoint import inspect

    report = inspect(args.path)
    if args.json:
        _print_json(report.to_json())
        return 0
    s = report.spec
    ids = list(s.aux_layer_ids) if s.aux_layer_ids is not None else None
    print(f"{report.path}  ({s.format} format, {', '.join(report.files)})")
    print(
        _rows(
            [
                ("hidden (draft / target)", f"{s.hidden_size} / {s.target_hidden_size}"),
                ("layers", s.num_layers),
                ("heads / kv heads / head dim", f"{s.num_heads} / {s.num_kv_heads} / {s.head_dim}"),
                ("intermediate", s.intermediate_size),
                ("vocab (target / draft)", f"{s.vocab_size} / {s.draft_vocab_size}"),
                ("aux slots (fc input)", s.num_aux),
                ("aux layer ids", f"{ids} ({s.aux_ids_location})"),
                ("norm_before_residual", s.norm_before_residual),
                ("norm_before_fc / fc_norm", f"{s.norm_before_fc} / {s.fc_norm}"),
                ("norm_output in config", s.norm_output_key),
                ("d2t / t2d", f"{s.has_d2t} / {s.has_t2d}"),
                ("embed_tokens / lm_head", f"{s.has_embed} / {s.has_lm_head}"),
                ("dtype", s.dtype),
                ("parameters", f"{report.param_count:,}"),
            ]
        )
    )
    if report.problems:
        print(f"{len(report.problems)} problem(s):")
        for p in report.problems:
            print(f"  - {p}")
    else:
        print("no problems found")
    return 0


def cmd_layout(args: argparse.Namespace) -> int:
    """Training and serving layouts of a draft, and their diff."""
    from eagle3dash.checkpoint import inspect
    from eagle3dash.layout import compare, describe_tap

    spec = inspect(args.draft).spec
    override = parse_layout(args.training_layout) if args.training_layout else None
    try:
        result = compare(
            spec,
            args.target_layers,
            trainer=args.trainer,
            sglang_version=args.sglang_version,
            arch=args.arch,
            cuda_graph=not args.no_cuda_graph,
            training_override=override,
        )
    except ValueError as e:
        raise UsageError(str(e)) from e
    if args.json:
        _print_json(
            {
                "training": [t.to_dict() for t in result["training"].layout],
                "serving": [t.to_dict() for t in result["serving"].layout],
                "diff": result["diff"].to_dict(),
                "training_rule": result["training"].to_dict(),
                "serving_rule": result["serving"].to_dict(),
            }
        )
        return 0
    n = args.target_layers
    for side in ("training", "serving"):
        res = result[side]
        print(f"{side}: [{', '.join(str(t) for t in res.layout)}]")
        print(f"  rule: {res.rule}")
        if res.decode_layout is not None:
            print(f"  decode (CUDA-graph replays): [{', '.join(map(str, res.decode_layout))}]")
        for note in res.notes:
            print(f"  note: {note}")
        if res.error:
            print(f"  error: {res.error}")
    d = result["diff"]
    print(f"diff: {d.kind}: {d.summary}")
    for slot in d.to_dict()["slots"]:
        mark = "  " if slot["same"] else "!="
        a = describe_tap(parse_layout(slot["training"])[0], n) if slot["training"] else "-"
        b = describe_tap(parse_layout(slot["serving"])[0], n) if slot["serving"] else "-"
        print(f"  slot {slot['slot']}: {a:<24} {mark} {b}")
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    """Standalone draft evaluation over a capture under one layout."""
    import torch

    from eagle3dash.capture import read_capture
    from eagle3dash.checkpoint import load
    from eagle3dash.draft import build_draft, evaluate_capture

    layout = parse_layout(args.layout)
    dtype = getattr(torch, args.dtype)
    spec, tensors, _ = load(args.draft)
    if len(layout) != spec.num_aux:
        raise UsageError(
            f"--layout has {len(layout)} taps but the draft's fc takes {spec.num_aux} slots"
        )
    capture = read_capture(args.capture, layout=layout, num_target_layers=args.target_layers)
    draft = build_draft(spec, tensors, device=args.device, dtype=dtype)
    result = evaluate_capture(draft, capture, layout, steps=args.steps)
    if args.json:
        _print_json(result.to_dict())
        return 0
    print(
        f"layout [{format_layout(layout)}], {result.num_positions} positions, {result.steps} steps"
    )
    print("  step  accuracy  acceptance")
    for k, (acc, accept) in enumerate(zip(result.accuracy, result.acceptance, strict=True)):
        print(f"  {k:>4}  {acc:8.3f}  {accept:10.3f}")
    print(f"simulated accept length (chain, {result.steps} steps): {result.accept_length:.3f}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argparse tree of every command."""
    parser = argparse.ArgumentParser(
        prog="python -m eagle3dash",
        description="Why is an EAGLE-3 draft that looked good in training slow in serving?",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("inspect", help="report a draft checkpoint (config + headers only)")
    p.add_argument("path", help="checkpoint directory, its config.json, or a .safetensors file")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("layout", help="training vs serving layer layout of a draft")
    p.add_argument("--draft", required=True, help="draft checkpoint path")
    p.add_argument("--target-layers", type=int, required=True, help="target decoder layers N")
    p.add_argument("--trainer", help="specforge, specforge-sglang, speculators, eagle, hf-index")
    p.add_argument("--training-layout", help="taps the training data really used, e.g. 0,3,31")
    p.add_argument("--sglang-version", default="0.5.23", help="serving SGLang version")
    p.add_argument("--arch", default="llama", help="target architecture, e.g. llama, kimi")
    p.add_argument("--no-cuda-graph", action="store_true", help="server runs without CUDA graphs")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_layout)

    p = sub.add_parser("eval", help="standalone draft accuracy over a capture")
    p.add_argument("--draft", required=True, help="draft checkpoint path")
    p.add_argument("--capture", required=True, help="capture dir, SpecForge or speculators dump")
    p.add_argument(
        "--layout",
        required=True,
        help="taps fed to the fc slots, e.g. 0,3,31 (for a training dump, which records no ids: "
        "the taps it was made with)",
    )
    p.add_argument("--steps", type=int, default=5, help="chain draft steps S")
    p.add_argument("--target-layers", type=int, help="target depth N (for training dumps)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--dtype", default="float32", help="float32 or bfloat16")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_eval)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command; bad input becomes a one-line message and exit code 1."""
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return func(args)
    except (InputError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # output piped into `head`: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
