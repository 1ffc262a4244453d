"""The diagnosis, stage by stage: inspect, probe, capture, standalone evaluation, serve benchmark,
findings. Torch is imported only inside the stages that need it.

Both evaluations run on the same token sequences (the endpoint's own greedy completions), so they
differ only in the taps: the serving side gets the concatenated aux states SGLang really feeds the
draft; the training side gets the target's states at the training layout's taps, from a local
target (`--target`) or a training dump (`--train-states`, other sequences).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from eagle3dash.checkpoint import inspect
from eagle3dash.diagnosis.options import DiagnoseOptions
from eagle3dash.diagnosis.result import Diagnosis
from eagle3dash.errors import InputError
from eagle3dash.findings import Evidence, diagnose
from eagle3dash.layout import format_layout, parse_layout
from eagle3dash.prediction import predict_layouts
from eagle3dash.servebench import Prompt, load_prompts, run_bench
from eagle3dash.sglang import ServerReport, SGLangClient
from eagle3dash.sglang_rules import DEFAULT_SGLANG_VERSION

Progress = Callable[[float, str], None]


def _no_progress(fraction: float, message: str) -> None:
    pass


def target_depth(options: DiagnoseOptions, server: ServerReport) -> int:
    """Target depth N: the flag, else the local target's config, else the served model's config."""
    from eagle3dash.capture import num_target_layers

    if options.target_layers:
        return options.target_layers
    for path in (options.target, server.model_path):
        if path and (Path(path) / "config.json").is_file():
            return num_target_layers(path)
    raise InputError(
        f"cannot tell how many layers the target has: {server.model_path!r} is not a local "
        "checkpoint here; pass --target-layers N (or --target PATH)"
    )


def target_embedding(options: DiagnoseOptions, server: ServerReport):
    """The target's embedding matrix, read alone from a local checkpoint, or None."""
    from eagle3dash.capture import read_target_embedding

    for path in (options.target, server.model_path):
        if path and Path(path).is_dir():
            return read_target_embedding(path)
    return None


def local_tokenizer(*paths: str | None):
    """The first tokenizer that loads from a local copy among `paths` (never from a hub)."""
    from transformers import AutoTokenizer

    for path in paths:
        if not path:
            continue
        try:
            return AutoTokenizer.from_pretrained(path, local_files_only=True)
        except (OSError, ValueError):
            continue
    tried = ", ".join(repr(p) for p in paths if p) or "none"
    raise InputError(
        f"cannot tokenize the text prompts: no local tokenizer (tried {tried}); pass --target "
        "PATH (a local copy of the target, or just its tokenizer files) or give prompts as token "
        'ids ({"input_ids": [...]} lines)'
    )


def prompt_ids(prompts: list[Prompt], *tokenizer_paths: str | None) -> list[list[int]]:
    """Each prompt's token ids: its own, or its text through the target's local tokenizer, so
    the ids are the ones SGLang sees."""
    tokenizer = None
    out = []
    for prompt in prompts:
        if prompt.input_ids is not None:
            out.append(list(prompt.input_ids))
            continue
        tokenizer = tokenizer or local_tokenizer(*tokenizer_paths)
        out.append(list(tokenizer(prompt.text)["input_ids"]))
    return out


def run_diagnosis(options: DiagnoseOptions, progress: Progress | None = None) -> Diagnosis:
    """Run every stage against the endpoint and return the diagnosis with its findings."""
    import torch

    from eagle3dash.capture import capture_from_sglang, read_capture, save_capture
    from eagle3dash.detective import capture_all_taps, detect
    from eagle3dash.draft import evaluate_capture, load_draft

    progress = progress or _no_progress
    progress(0.0, "inspecting the checkpoint")
    report = inspect(options.draft)
    progress(0.05, f"probing {options.endpoint}")
    client = SGLangClient(options.endpoint, timeout=options.timeout)
    server = client.probe()
    depth = target_depth(options, server)
    served_arch = server.architectures[0] if server.architectures else None
    arch = options.arch or served_arch or server.model_type or "llama"
    override = parse_layout(options.training_layout) if options.training_layout else None
    layouts = predict_layouts(
        report.spec,
        depth,
        trainer=options.trainer,
        sglang_version=server.version or DEFAULT_SGLANG_VERSION,
        arch=arch,
        cuda_graph=not server.disable_cuda_graph,
        training_override=override,
    )
    diagnosis = Diagnosis(
        options=options,
        report=report,
        server=server,
        num_target_layers=depth,
        arch=arch,
        layouts=layouts,
        server_steps=server.speculative.num_steps if server.speculative else None,
    )
    training_layout = layouts.training.layout
    serving_layout = layouts.serving.layout

    prompts = load_prompts(options.prompts)[: options.num_prompts]
    if server.speculative and server.enable_return_hidden_states and not layouts.serving.error:
        progress(0.1, "capturing the aux states the server feeds the draft")
        capture = capture_from_sglang(
            client,
            prompt_ids(prompts, options.target, server.model_path),
            serving_layout,
            max_new_tokens=options.max_new_tokens,
            report=server,
            progress=lambda done, total: progress(0.1 + 0.3 * done / total, "capturing"),
            warn=diagnosis.warnings.append,
        )
        if options.capture_dir:
            save_capture(capture, options.capture_dir)
        embed = target_embedding(options, server)
        draft = load_draft(options.draft, options.device, getattr(torch, options.dtype), embed)
        layout_text = format_layout(serving_layout)
        progress(0.4, f"evaluating the draft on the serving layout [{layout_text}]")
        diagnosis.serving_eval = evaluate_capture(
            draft, capture, serving_layout, steps=options.steps, embed_weight=embed
        )
        training_capture = None
        if options.target:
            # Every tap at once: the training layout's, and the layout detective's candidates.
            progress(0.5, f"capturing every tap of the local target {options.target}")
            tokens = [seq.input_ids.tolist() for seq in capture.sequences]
            training_capture = capture_all_taps(options.target, tokens, device=options.device)
            for mine, theirs in zip(training_capture.sequences, capture.sequences, strict=True):
                mine.loss_mask = theirs.loss_mask  # score the same rows on both sides
            training_capture.meta["served_tokens"] = capture.meta.get("served_tokens")
        elif options.train_states:
            progress(0.5, f"reading the training dump {options.train_states}")
            training_capture = read_capture(
                options.train_states, layout=training_layout, num_target_layers=depth
            )
            diagnosis.warnings.append(
                "training-side states come from the training dump, so they cover other token "
                "sequences than the serving capture"
            )
        else:
            diagnosis.missing.append(
                "training-side evaluation: no target states at the training taps "
                f"[{format_layout(training_layout)}]; pass --target PATH (a local Hugging Face "
                "checkpoint of the target) or --train-states DIR (SpecForge data_*.ckpt or "
                "speculators hs_*.safetensors made with the training layout)"
            )
        if training_capture is not None:
            layout_text = format_layout(training_layout)
            progress(0.6, f"evaluating the draft on the training layout [{layout_text}]")
            diagnosis.training_eval = evaluate_capture(
                draft, training_capture, training_layout, steps=options.steps, embed_weight=embed
            )
        if options.target:
            progress(0.62, "layout detective: which taps does the draft perform best with?")
            diagnosis.detection = detect(
                options.draft,
                capture=training_capture,
                steps=options.steps,
                sides={"serving": capture},
                num_layers=depth,
                sglang_version=server.version or DEFAULT_SGLANG_VERSION,
                arch=arch,
                device=options.device,
                draft=draft,
            ).to_dict()
    elif not server.speculative:
        diagnosis.missing.append("standalone evaluation: the endpoint runs no speculative decoding")
    elif not server.enable_return_hidden_states:
        diagnosis.missing.append(
            "standalone evaluation on the serving states: restart the server with "
            "--enable-return-hidden-states so the states it feeds the draft can be captured"
        )
    else:
        diagnosis.missing.append(f"serving capture: {layouts.serving.error}")

    progress(0.7, f"benchmarking {options.endpoint}")
    bench_prompts = prompts

    def bench_progress(start: float, span: float) -> Callable[[int, int], None]:
        return lambda done, total: progress(start + span * done / total, "benchmarking")

    diagnosis.measured = run_bench(
        options.endpoint,
        bench_prompts,
        concurrency=options.concurrency,
        max_new_tokens=options.max_new_tokens,
        progress=bench_progress(0.7, 0.15 if options.baseline else 0.25),
    )
    if options.baseline:
        progress(0.85, f"benchmarking the baseline {options.baseline}")
        diagnosis.baseline = run_bench(
            options.baseline,
            bench_prompts,
            concurrency=options.concurrency,
            max_new_tokens=options.max_new_tokens,
            progress=bench_progress(0.85, 0.1),
        )
    else:
        diagnosis.missing.append(
            "speedup: pass --baseline URL (the same target served without speculation)"
        )

    diagnosis.findings = diagnose(
        Evidence(
            report=report,
            draft_path=options.draft,
            num_target_layers=depth,
            arch=arch,
            server=server,
            layouts=layouts,
            sglang_version=server.version,
            trainer=options.trainer,
            detection=diagnosis.detection,
            training_eval=diagnosis.training_eval,
            serving_eval=diagnosis.serving_eval,
            measured=diagnosis.measured,
            baseline=diagnosis.baseline,
        )
    )
    progress(1.0, "done")
    return diagnosis
