"""Test and demo helpers, never product features: the SGLang API double and tiny-model builders.

- `sglang_double`: an HTTP server that answers like SGLang 0.5.23 (`python -m eagle3dash double`),
  over the engine in `sglang_double_engine` (the tiny target, its draft, the server's info).
- `vllm_double`: the same engine behind vLLM 0.33's endpoints.
- `double_maths`: the sampling and verification both doubles share.
- `tiny`: a random tiny Llama target and the byte-level tokenizer tiny targets use.
- `tensors`: random-weight drafts whose forward stays numerically sane.
"""
