"""The serving-engine seam's SGLang adapter (`engine.EngineAdapter`): SGLang's client
(`client.py`), a benchmark's requests on one pooled async session, and the serving capture
(`capture.py`). With those two modules it is the only door to the SGLang client.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from eagle3dash.engines.seam import (
    SGLANG,
    BenchRequests,
    CaptureRequest,
    GenerateResult,
    ServedRequests,
    ServerReport,
)
from eagle3dash.engines.sglang.client import SGLangClient
from eagle3dash.http_client import EndpointError

if TYPE_CHECKING:
    from eagle3dash.capture import Capture

T = TypeVar("T")


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to its end, also when called from inside an event loop (a notebook):
    then on a private loop in a thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


class SGLangEngine:
    """The SGLang adapter: the client, and SGLang's id-to-tap rules for the server's release
    (`sglang_rules`, through the report's `rules_engine`)."""

    name = SGLANG

    def __init__(self, url: str, timeout: float = 60.0, retries: int = 3) -> None:
        self.client = SGLangClient(url, timeout=timeout, retries=retries)
        self.url = self.client.url

    def probe(self) -> ServerReport:
        """The server's report."""
        return self.client.probe()

    def generate_ids(
        self, input_ids: list[int], max_new_tokens: int, temperature: float = 0.0
    ) -> GenerateResult:
        """POST /generate from a token-id prompt."""
        return self.client.generate(
            input_ids=input_ids, max_new_tokens=max_new_tokens, temperature=temperature
        )

    def serve_requests(self, requests: BenchRequests) -> ServedRequests:
        """POST /generate for each prompt (text or input_ids, ignore_eos) on one async session
        of `concurrency` connections, the warm-up requests alongside one another first."""
        return run_coroutine(self._serve(requests))

    async def _serve(self, requests: BenchRequests) -> ServedRequests:
        client, prompts = self.client, requests.prompts
        sem = asyncio.Semaphore(requests.concurrency)
        async with client.async_client(max_connections=requests.concurrency) as session:

            async def send(prompt: str | list[int]) -> GenerateResult:
                text, ids = (prompt, None) if isinstance(prompt, str) else (None, prompt)
                async with sem:
                    return await client.agenerate(
                        input_ids=ids,
                        text=text,
                        max_new_tokens=requests.max_new_tokens,
                        temperature=requests.temperature,
                        ignore_eos=True,
                        session=session,
                    )

            # Warm-up is not measured; a failure here (server down, not SGLang) ends the run
            # with its one clear message instead of N identical request errors.
            if requests.warmup:
                warm = (prompts[i % len(prompts)] for i in range(requests.warmup))
                await asyncio.gather(*(send(prompt) for prompt in warm))

            async def measured(prompt: str | list[int]) -> GenerateResult | EndpointError:
                try:
                    return requests.ended(await send(prompt))
                except EndpointError as exc:
                    return requests.ended(exc)

            start = time.perf_counter()
            answers = await asyncio.gather(*(measured(p) for p in prompts))
            wall = time.perf_counter() - start
        return ServedRequests(list(answers), wall)

    def capture(self, request: CaptureRequest) -> Capture:
        """The aux states from /generate's hidden states (`capture_from_sglang`)."""
        from eagle3dash.engines.sglang.capture import capture_from_sglang

        return capture_from_sglang(
            self.client,
            request.tokens,
            request.layout,
            max_new_tokens=request.max_new_tokens,
            hidden_size=request.hidden_size,
            report=request.report,
            progress=request.progress,
            warn=request.warn,
            served=request.served,
        )

    def close(self) -> None:
        """Close the client's connections."""
        self.client.close()
