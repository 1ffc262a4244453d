"""Captures from an SGLang endpoint: the concatenated aux states the server really feeds its
draft, split into the serving layout's taps.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from eagle3dash.capture.format import Capture, CaptureError, Progress, Sequence, _as_id_list
from eagle3dash.engines.facts import target_arch
from eagle3dash.engines.seam import REFERENCE_TAIL, kept_completion
from eagle3dash.engines.sglang.rules import (
    DEFAULT_SGLANG_VERSION,
    HIDDEN_STATES_FIX,
    capture_layout,
    parse_version,
    version_text,
)
from eagle3dash.engines.sglang.states_json import states_width
from eagle3dash.layout import Layout, Tap, format_layout

if TYPE_CHECKING:
    from eagle3dash.engines.sglang.client import GenerateResult, ServerReport, SGLangClient


Warn = Callable[[str], None] | list[str] | None


def _warner(warn: Warn, sink: list[str]) -> Callable[[str], None]:
    """Every warning goes to `sink` (kept in the capture's meta) and to `warn`: a callable, a list
    to append to, or None for `warnings.warn`."""

    def emit(message: str) -> None:
        sink.append(message)
        if warn is None:
            warnings.warn(message, stacklevel=3)
        elif isinstance(warn, list):
            warn.append(message)
        else:
            warn(message)

    return emit


def _check_version(version: str | None, url: str, emit: Callable[[str], None]) -> None:
    fixed = version_text(HIDDEN_STATES_FIX)
    old = (
        f"SGLang before {fixed} truncates or misattributes the per-token hidden states of decode "
        "steps under speculative decoding (issue #26163); the prefill block used here is still "
        "right"
    )
    if version is None:
        emit(f"{url} does not report its version; if it is older than {fixed}: {old}")
        return
    try:
        parsed = parse_version(version)
    except ValueError as e:
        emit(f"{url}: {e}; {old}")
        return
    if parsed < HIDDEN_STATES_FIX:
        emit(f"{url} runs SGLang {version}: {old}")


def _flush(client: SGLangClient, tries: int = 5, wait: float = 0.5) -> None:
    """POST /flush_cache, retrying while SGLang refuses it because requests are in flight."""
    from eagle3dash.engines.sglang.client import EndpointError

    for attempt in range(tries):
        try:
            client.flush_cache()
            return
        except EndpointError as e:
            if e.status != 400 or attempt + 1 == tries:
                raise
            time.sleep(wait * 2**attempt)


def _aux_mode(report: ServerReport) -> str | None:
    """'eagle3' or 'aux-only' when the server returns concatenated aux states, else None."""
    spec = report.speculative
    if spec is not None and spec.algorithm.upper() == "EAGLE3":
        return "eagle3"
    if report.enable_return_aux_hidden_states:
        return "aux-only"
    return None


def _prefill_block(result: GenerateResult, n: int, url: str, cached: object) -> Tensor:
    """meta_info.hidden_states[0] as float32 [parts, n, W / parts], checked against the token
    count (the parts share the reader's one buffer: no copy)."""
    block = result.prefill_states
    if block is None:
        raise CaptureError(
            f"{url}: /generate with return_hidden_states answered without "
            "meta_info.hidden_states; is the server started with --enable-return-hidden-states?"
        )
    if block.shape[1] != n and cached == 0:  # nothing cached: the server itself dropped rows
        raise CaptureError(
            f"{url}: the prefill block has rows for {block.shape[1]} of {n} input tokens, none "
            "of them cached (cached_tokens=0): the server returns fewer hidden-state rows than "
            "the tokens it prefilled"
        )
    if block.shape[1] != n:
        raise CaptureError(
            f"{url}: the prefill block has rows for {block.shape[1]} of {n} input tokens "
            f"(cached_tokens={cached}): the radix cache served part of the prompt although it "
            "was flushed (a busy server?). Rerun when the server is idle, or start it with "
            "--disable-radix-cache"
        )
    return torch.from_numpy(block)


def _one_hidden_size_error(url: str, width: int, report: ServerReport) -> CaptureError:
    spec = report.speculative
    running = f"--speculative-algorithm {spec.algorithm}" if spec else "no speculative decoding"
    return CaptureError(
        f"{url}: the returned hidden states are {width} wide, one hidden size: SGLang returns the "
        "concatenated aux states the draft reads only while EAGLE-3 capture is active "
        f"(--speculative-algorithm EAGLE3), and this server runs {running}, so these are the "
        "final-normed states. With --speculative-algorithm EAGLE an EAGLE-3 draft gets "
        "width-H states and skips fc: restart with --speculative-algorithm EAGLE3"
    )


def _split_serving(
    block: Tensor, taps: Layout, report: ServerReport, hidden_size: int | None
) -> tuple[int, dict[Tap, Tensor]]:
    """The [parts, n, W / parts] block as the K taps, which SGLang concatenates in ascending layer
    order; each tap is one part (the reader cut W into K parts when K divides it)."""
    parts, K = int(block.shape[0]), len(taps)
    width = parts * int(block.shape[2])
    if _aux_mode(report) is None or (hidden_size is not None and width == hidden_size and K > 1):
        raise _one_hidden_size_error(report.url, width, report)
    if width % K:
        raise CaptureError(
            f"{report.url}: the aux block is {width} wide, not a multiple of the {K} taps of the "
            f"serving layout {format_layout(taps)}: the server captures another number of layers"
        )
    ht = width // K
    if hidden_size is not None and ht != hidden_size:
        raise CaptureError(
            f"{report.url}: the aux block is {width} wide = {width / hidden_size:g} hidden sizes "
            f"of {hidden_size}, but the serving layout {format_layout(taps)} has {K} taps"
        )
    assert parts == K  # the reader was asked for K parts, and K divides the width
    return ht, {tap: block[i] for i, tap in enumerate(taps)}


def _check_chunked_prefill(ids_list: list[list[int]], budget: int, report: ServerReport) -> None:
    """CaptureError when a capture sequence (prompt + `budget` new tokens) is longer than the
    server's chunked_prefill_size: SGLang prefills it in chunks and keeps the hidden-state rows of
    the last chunk only (batch_result_processor.py stores no rows for middle chunks, 0.5.23)."""
    chunk = report.chunked_prefill_size
    if chunk is None:
        return
    room = chunk - budget
    shorter = (
        f"Use prompts of at most {room} tokens (or fewer new tokens)"
        if room >= 1
        else "Ask for fewer new tokens"
    )
    for i, ids in enumerate(ids_list):
        if len(ids) + budget > chunk:
            raise CaptureError(
                f"{report.url}: prompt {i}: the capture sequence would be {len(ids) + budget} "
                f"tokens ({len(ids)} prompt + {budget} generated), more than the server's "
                f"chunked_prefill_size {chunk}: SGLang prefills it in chunks and returns the "
                f"hidden states of the last chunk only. {shorter}, or restart the server with "
                f"--chunked-prefill-size {len(ids) + budget} or more"
            )


def _prompt_ids(prompt: object, i: int) -> list[int]:
    if isinstance(prompt, str):
        raise CaptureError(
            f"prompt {i} is text: the capture needs token ids so the rows line up with tokens "
            "(pipeline.prompt_ids turns text into ids with the target's local tokenizer)"
        )
    ids = _as_id_list(prompt, i)
    if not ids:
        raise CaptureError(f"prompt {i} has no tokens")
    return [int(t) for t in ids]


def capture_from_sglang(
    client: SGLangClient,
    prompts: list[list[int]],
    serving_layout: Layout,
    max_new_tokens: int = 64,
    progress: Progress | None = None,
    warn: Warn = None,
    *,
    hidden_size: int | None = None,
    report: ServerReport | None = None,
    served: list[GenerateResult | None] | None = None,
) -> Capture:
    """The aux states an SGLang server really feeds its EAGLE-3 draft, for greedy completions.

    Per prompt (token ids, so the rows line up with known tokens):
    (a) a greedy completion of `max_new_tokens` -> tokens = prompt + completion; where `served`
        holds the prompt's answer from a greedy benchmark of these very ids (at least
        `max_new_tokens` tokens), that completion is kept and only the reference tail is
        generated after it (greedy: the same tokens one request would give), so the capture does
        not repeat the benchmark's requests;
    (b) /flush_cache (a radix-cache hit would drop or shift rows), then /generate on `tokens`
        with max_new_tokens=1 and return_hidden_states; meta_info.hidden_states[0], the prefill
        block [len(tokens), K*Ht], is split into the K taps of `serving_layout` in ascending
        layer order, the order SGLang concatenates them in (duplicates are captured once).
        The reply is read as it arrives (states_json.StatesReader): the block goes straight
        into one float32 buffer whose K column blocks are the taps (no nested lists kept, no
        copy per tap), and a reply larger than len(tokens) + 1 rows of
        states_width(K, hidden_size) numbers can take is refused (EndpointError TOO_LARGE).
    `serving_layout` is the layout this server captures (sglang_rules.serving_layout); the capture's
    taps are those taps, sorted. `hidden_size` (the target's, if known) tightens the width checks.

    References (the choice that makes the simulated accept length comparable to the measured
    one): over HTTP the target's greedy token is known only inside the completion, so
    target_ids[j] = tokens[j+1] (and target_ids[-1] = the token (b) generates, the target's
    greedy token after the last position) and loss_mask[j] = 1 for j >= len(prompt) + 1.
    The evaluation counts row t when loss_mask[t+2] is on, i.e. rows t >= len(prompt) - 1:
    exactly the positions a serving draft drafts from (the first round after prefill reads the
    last prompt position and the first sampled token), and every reference those rows read is a
    target-greedy completion token. In the prompt region target_ids are the prompt's own next
    tokens, not the target's; they are never counted. meta["measured_accept_length"] is
    sum(completion_tokens) / sum(spec_verify_ct) of the completions in (a), the server's accept
    length on these very sequences.

    Warns (through `warn`: a callable, a list, or None for warnings.warn; all warnings are kept
    in meta["warnings"]) when the server is older than 0.5.14 (issue #26163). Raises
    EndpointError when the server cannot return hidden states (restart hint in the message),
    and CaptureError, before any request, when a sequence would be longer than the server's
    chunked_prefill_size, and when the returned states are not aux states (no EAGLE-3 capture
    active).
    """
    if max_new_tokens < 1:
        raise CaptureError("max_new_tokens must be at least 1: the completion is the reference")
    taps = tuple(sorted(set(serving_layout)))
    if not taps:
        raise CaptureError("capture_from_sglang: empty serving layout")
    if any(t.post_norm for t in taps):
        raise CaptureError(
            f"serving layout {format_layout(taps)} has a post-norm tap: SGLang captures only "
            "pre-norm residual streams"
        )
    if not prompts:
        raise CaptureError("capture_from_sglang: no prompts")
    ids_list = [_prompt_ids(p, i) for i, p in enumerate(prompts)]
    said: list[str] = []
    emit = _warner(warn, said)
    report = report or client.probe()
    url = report.url
    _check_version(report.version, url, emit)
    if not report.enable_return_aux_hidden_states:
        report.require_hidden_states()  # EndpointError with the restart hint
    _check_chunked_prefill(ids_list, max_new_tokens + REFERENCE_TAIL, report)

    sequences: list[Sequence] = []
    prompt_lengths, completion_lengths = [], []
    completion_tokens, verify_ct = 0, 0
    ht_seen: int | None = None
    for i, ids in enumerate(ids_list):
        # REFERENCE_TAIL tokens past the budget give the last served rounds their references.
        first = kept_completion(served, i, max_new_tokens)
        if first is None:
            first = client.generate(
                input_ids=ids, max_new_tokens=max_new_tokens + REFERENCE_TAIL, temperature=0.0
            )
            tail: list[int] = []
        else:
            tail = [
                int(t)
                for t in client.generate(
                    input_ids=ids + [int(t) for t in first.output_ids],
                    max_new_tokens=REFERENCE_TAIL,
                    temperature=0.0,
                ).output_ids
            ]
        completion = [int(t) for t in first.output_ids]
        if not completion:
            raise CaptureError(f"{url}: prompt {i}: the server generated no tokens")
        completion_tokens += first.completion_tokens or len(completion)
        verify_ct += first.spec_verify_ct or 0
        completion += tail
        tokens = ids + completion
        _flush(client)
        second = client.generate(
            input_ids=tokens,
            max_new_tokens=1,
            temperature=0.0,
            return_hidden_states=True,
            states_parts=len(taps),
            states_width=states_width(len(taps), hidden_size),
        )
        cached = second.meta_info.get("cached_tokens")
        block = _prefill_block(second, len(tokens), url, cached)
        if isinstance(cached, int) and cached > 0:
            raise CaptureError(
                f"{url}: prompt {i}: {cached} of {len(tokens)} tokens came from the radix cache "
                "despite the flush (a busy server?), so the prefill rows are unreliable. Rerun "
                "when the server is idle, or start it with --disable-radix-cache"
            )
        ht, states = _split_serving(block, taps, report, hidden_size)
        if ht_seen is not None and ht != ht_seen:
            raise CaptureError(f"{url}: prompt {i}: hidden size {ht} differs from {ht_seen}")
        ht_seen = ht
        P, L = len(ids), len(tokens)
        target_ids = None
        if second.output_ids:
            target_ids = torch.tensor(tokens[1:] + [int(second.output_ids[0])], dtype=torch.int64)
        loss_mask = (torch.arange(L) >= P + 1).to(torch.int64)
        sequences.append(
            Sequence(
                input_ids=torch.tensor(tokens, dtype=torch.int64),
                states=states,
                target_ids=target_ids,
                loss_mask=loss_mask,
            )
        )
        prompt_lengths.append(P)
        completion_lengths.append(len(completion))
        if progress is not None:
            progress(i + 1, len(ids_list))

    spec = report.speculative
    assert ht_seen is not None
    return Capture(
        taps=taps,
        sequences=sequences,
        hidden_size=ht_seen,
        source=f"sglang:{url}",
        meta={
            "reader": "sglang",
            "url": url,
            "version": report.version,
            "model_path": report.model_path,
            "architectures": report.architectures,
            "aux_capture": _aux_mode(report),
            "speculative_algorithm": spec.algorithm if spec else None,
            "draft_model_path": spec.draft_model_path if spec else None,
            "num_steps": spec.num_steps if spec else None,
            "eagle_topk": spec.eagle_topk if spec else None,
            "num_draft_tokens": spec.num_draft_tokens if spec else None,
            "serving_layout": format_layout(taps),
            "max_new_tokens": max_new_tokens,
            "served_tokens": max_new_tokens,  # the budget serving rounds are replayed up to
            "prompt_lengths": prompt_lengths,
            "completion_lengths": completion_lengths,
            "completion_tokens": completion_tokens,
            "spec_verify_ct": verify_ct,
            "measured_accept_length": completion_tokens / verify_ct if verify_ct else None,
            "target_ids": "tokens[j+1] (target-greedy completion) and the greedy token after "
            "the last position; prompt region: the prompt's next tokens, never counted",
            "loss_mask": "1 at positions >= prompt length + 1: evaluation rows t >= prompt "
            "length - 1, the positions serving drafts from",
            "warnings": said,
        },
    )


def _check_aux_ids(ids: object, num_layers: int, url: str) -> tuple[int, ...] | None:
    """server_info return_aux_hidden_state_layer_ids as ids, or a CaptureError naming the bad
    ones: integers, >= 0, unique, < N (SGLang 0.5.23 checks the same at start,
    arg_groups/validation_hook.py and spec_aux_hidden_state.py)."""
    if ids is None:
        return None
    where = f"{url}: server_info return_aux_hidden_state_layer_ids {ids!r}"
    if not isinstance(ids, list) or not ids:
        raise CaptureError(f"{where} is not a non-empty list of layer ids")
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
        raise CaptureError(f"{where} holds something other than integers")
    if any(i < 0 for i in ids):
        raise CaptureError(f"{where} has negative ids: layer ids count from 0")
    if len(set(ids)) != len(ids):
        raise CaptureError(f"{where} repeats a layer: each layer is captured once")
    past = [i for i in ids if i >= num_layers]
    if past:
        raise CaptureError(
            f"{where}: {past} not below the target's {num_layers} layers (ids 0..{num_layers - 1})"
        )
    return tuple(ids)


def capture_aux_layers_from_sglang(
    client: SGLangClient,
    prompts: list[list[int]],
    num_target_layers: int,
    max_new_tokens: int = 64,
    progress: Progress | None = None,
    warn: Warn = None,
    *,
    hidden_size: int | None = None,
    arch: str | None = None,
) -> Capture:
    """`capture_from_sglang` for a 0.5.23 capture-only server (no draft loaded), started with
    `--enable-return-aux-hidden-states --speculative-algorithm EAGLE3
    [--return-aux-hidden-state-layer-ids ...]`.

    The taps come from the server's configured ids (server_info
    return_aux_hidden_state_layer_ids; none = SGLang's defaults) through SGLang's id rule for
    the target's architecture and version: capture-only mode hands the ids to the same
    set_eagle3_layers_to_capture as a draft's eagle_config ids (0.5.23
    model_runner_components/spec_aux_hidden_state.py, attention_backend_setup.py). The ids are
    checked (integers, >= 0, unique, < N) before any request; meta["layout_rule"] records the
    rule used. target_ids / loss_mask as in capture_from_sglang.
    """

    report = client.probe()
    if not report.enable_return_aux_hidden_states:
        raise CaptureError(
            f"{report.url} is not in aux capture mode (server_info enable_return_aux_hidden_states "
            "is false): start SGLang 0.5.23+ with --enable-return-aux-hidden-states "
            "--speculative-algorithm EAGLE3 --return-aux-hidden-state-layer-ids ..., or use "
            "capture_from_sglang on a server running the draft"
        )
    convention = report.aux_hidden_state_capture
    if convention is not None and convention.lower() != "eagle3":
        raise CaptureError(
            f"{report.url} captures aux states with the {convention} convention (server_info "
            "aux_hidden_state_capture), whose layer ids SGLang reads otherwise than EAGLE-3's: "
            "restart it with --speculative-algorithm EAGLE3"
        )
    ids = _check_aux_ids(report.return_aux_hidden_state_layer_ids, num_target_layers, report.url)
    family = target_arch(arch, report.architectures, report.model_type)
    try:
        result = capture_layout(
            num_target_layers, ids, report.version or DEFAULT_SGLANG_VERSION, family
        )
    except ValueError as e:
        raise CaptureError(f"{report.url}: {e}") from e
    if result.error:
        shown = list(ids) if ids else "(defaults)"
        raise CaptureError(f"{report.url}: aux layer ids {shown}: {result.error}")
    cap = capture_from_sglang(
        client,
        prompts,
        result.layout,
        max_new_tokens,
        progress,
        warn,
        hidden_size=hidden_size,
        report=report,
    )
    cap.meta["aux_layer_ids"] = list(ids) if ids else None
    cap.meta["layout_rule"] = result.rule
    return cap
