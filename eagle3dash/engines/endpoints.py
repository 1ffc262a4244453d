"""Which engine serves a URL (SGLang or vLLM), and its adapter behind the serving-engine seam:
the one place that chooses between `sglang_engine` and `vllm_engine`.

Asked in the order that tells them apart cheapest: `/v1/models` (both engines serve it; the model
card's `owned_by` is "sglang" or "vllm": SGLang 0.5.23 `entrypoints/openai/protocol.py`, vLLM
0.33.0 `entrypoints/serve/engine/protocol.py` `ModelCard`), then SGLang's `/server_info` (a JSON
with `model_path`) and vLLM's `/version` (a JSON with `version`, always served).
"""

from __future__ import annotations

from typing import Any

from eagle3dash.engines.seam import SGLANG, VLLM, EngineAdapter
from eagle3dash.engines.sglang.adapter import SGLangEngine
from eagle3dash.engines.vllm.adapter import VLLMEngine
from eagle3dash.http_client import EndpointError, HttpEndpoint, _describe_body


class _Asker(HttpEndpoint):
    ENGINE = "SGLang or vLLM"

    def ask(self, path: str) -> tuple[Any, str]:
        """The JSON at path (None when there is none) and a few words on what answered."""
        resp = self._request("GET", path)
        if resp.status_code >= 300:
            return None, f"GET {path} returned HTTP {resp.status_code}"
        try:
            return resp.json(), f"GET {path} returned {_describe_body(resp)}"
        except ValueError:
            return None, f"GET {path} returned {_describe_body(resp)}"


def _owner(models: Any) -> str | None:
    data = models.get("data") if isinstance(models, dict) else None
    card = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else {}
    owner = card.get("owned_by")
    return owner if owner in (SGLANG, VLLM) else None


def detect_engine(url: str, timeout: float = 60.0, retries: int = 3) -> str:
    """ "sglang" or "vllm" for the server at url; EndpointError (one line) for anything else."""
    with _Asker(url, timeout=timeout, retries=retries) as asker:
        models, said_models = asker.ask("/v1/models")
        owner = _owner(models)
        if owner is not None:
            return owner
        answers = [said_models]
        for path in ("/server_info", "/get_server_info"):
            info, said = asker.ask(path)
            if isinstance(info, dict) and "model_path" in info:
                return SGLANG
            if isinstance(info, dict) and "vllm_config" in info:
                return VLLM
            answers.append(said)
        version, said_version = asker.ask("/version")
        if isinstance(version, dict) and isinstance(version.get("version"), str):
            return VLLM
        answers.append(said_version)
        raise EndpointError(
            f"{asker.url} does not look like an SGLang or a vLLM server ({'; '.join(answers)}): "
            "check the URL and port",
            url=asker.url,
            kind=EndpointError.NOT_SGLANG,
        )


def engine_adapter(
    engine: str,
    url: str,
    timeout: float = 60.0,
    retries: int = 3,
    *,
    capture_server: str | None = None,
) -> EngineAdapter:
    """The adapter of `engine` ("sglang" or "vllm", known from an earlier probe) for url;
    `capture_server`: a vLLM capture server's URL (SGLang captures through its own endpoint)."""
    if engine == VLLM:
        return VLLMEngine(url, timeout, retries, capture_server=capture_server)
    return SGLangEngine(url, timeout, retries)


def open_engine(
    url: str, timeout: float = 60.0, retries: int = 3, *, capture_server: str | None = None
) -> EngineAdapter:
    """The adapter of the engine that serves url (detected by asking it)."""
    engine = detect_engine(url, timeout, retries)
    return engine_adapter(engine, url, timeout, retries, capture_server=capture_server)
