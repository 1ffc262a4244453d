"""The serving-engine seam's vLLM adapter (`seam.EngineAdapter`): vLLM's client (`client.py`), a
benchmark's requests with the server's /metrics counters read around them, and the serving
capture through a capture server (`capture.py`). With those two modules it is the only
door to the vLLM client.
"""

from __future__ import annotations

import concurrent.futures
import time
from typing import TYPE_CHECKING

from eagle3dash.engines.seam import (
    VLLM,
    BenchRequests,
    CaptureRequest,
    GenerateResult,
    ServedRequests,
    ServerReport,
    ServerWideAcceptance,
    no_hidden_states_on_vllm,
)
from eagle3dash.engines.vllm.client import SpecCounters, VLLMClient, acceptance_between
from eagle3dash.http_client import EndpointError

if TYPE_CHECKING:
    from eagle3dash.capture import Capture


class VLLMEngine:
    """The vLLM adapter: the client, and vLLM's id-to-tap rules for the server's release and
    model runner (`vllm_rules`, through the report's `rules_engine`). `capture_server`: the URL
    of a capture server of the same target (vLLM returns no hidden states from generate)."""

    name = VLLM

    def __init__(
        self,
        url: str,
        timeout: float = 60.0,
        retries: int = 3,
        *,
        capture_server: str | None = None,
    ) -> None:
        self.client = VLLMClient(url, timeout=timeout, retries=retries)
        self.url = self.client.url
        self.capture_server = capture_server
        self._model: str | None = None

    def probe(self) -> ServerReport:
        """The server's report (its served model name kept for the completions)."""
        report = self.client.probe()
        self._model = report.served_model_name
        return report

    def generate_ids(
        self, input_ids: list[int], max_new_tokens: int, temperature: float = 0.0
    ) -> GenerateResult:
        """POST /v1/completions from a token-id prompt (probing first for the model name)."""
        if self._model is None:
            self.probe()
        return self.client.generate(
            input_ids, self._model or "", max_new_tokens=max_new_tokens, temperature=temperature
        )

    def serve_requests(self, requests: BenchRequests) -> ServedRequests:
        """POST /v1/completions for each prompt on `concurrency` threads (a client each), the
        warm-up requests one after another first; the server's /metrics counters are read
        before and after the measured requests, for answers without per-request statistics."""
        report = self.probe()
        client, prompts = self.client, requests.prompts

        def send(prompt: str | list[int]) -> GenerateResult:
            with VLLMClient(self.url, timeout=client.timeout, retries=client.retries) as one:
                return one.generate(
                    prompt,
                    self._model or "",
                    max_new_tokens=requests.max_new_tokens,
                    temperature=requests.temperature,
                )

        for i in range(requests.warmup):
            send(prompts[i % len(prompts)])
        before = client.metrics()

        def measured(prompt: str | list[int]) -> GenerateResult | EndpointError:
            try:
                return requests.ended(send(prompt))
            except EndpointError as exc:
                return requests.ended(exc)

        start = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(requests.concurrency) as pool:
            answers = list(pool.map(measured, prompts))
        wall = time.perf_counter() - start
        after = client.metrics()
        if report.speculative is None:
            return ServedRequests(answers, wall)
        return ServedRequests(
            answers, wall, lambda: _server_wide(before, after, report.served_model_name)
        )

    def capture(self, request: CaptureRequest) -> Capture:
        """The states the capture server captures on the served completions
        (`capture_from_vllm`; the report, hidden size and warnings are not needed there)."""
        from eagle3dash.engines.vllm.capture import capture_from_vllm

        if self.capture_server is None:
            raise no_hidden_states_on_vllm(self.url)
        with VLLMClient(
            self.capture_server, timeout=self.client.timeout, retries=self.client.retries
        ) as capturing:
            return capture_from_vllm(
                self.client,
                capturing,
                request.tokens,
                request.layout,
                max_new_tokens=request.max_new_tokens,
                progress=request.progress,
                served=request.served,
            )

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()


def _server_wide(
    before: list[SpecCounters], after: list[SpecCounters], model_name: str | None
) -> ServerWideAcceptance:
    delta = acceptance_between(before, after, model_name)
    return ServerWideAcceptance(delta.mean_acceptance_length, delta.histogram)
