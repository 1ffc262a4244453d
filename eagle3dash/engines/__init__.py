"""The serving engines, one room each behind one seam (as vLLM keeps its platforms apart).

- `seam.py`: what a diagnosis knows about a server whichever engine serves it (`ServerReport`,
  `GenerateResult`, `BenchRequests`, `CaptureRequest`) and `EngineAdapter`, the protocol each
  engine's adapter implements.
- `facts.py`: the facts every engine shares (the id keys, the target architecture assumed, the
  observed id-to-tap mapping); below every room.
- `serving.py`: `ServingEngine` (an engine, its release and runner), over each room's `rules.py`.
- `protocol.py`: `EngineRules`, what the findings and the detective ask of the run's engine (the
  taps it feeds, its defaults, its fix, release facts).
- `rules.py`: `rules_for` (the room's `EngineRules` for a `ServingEngine`) and `words`; the
  dual-key fix.
- `endpoints.py`: which engine serves a URL, and its adapter.
- `sglang/`, `vllm/`: each engine's HTTP client, adapter, capture, rules by release, their
  answers to `EngineRules` (`protocol.py`) and words.

A third engine is one more room (a client, an adapter, its capture, its rules, protocol and
words) and one branch each in `rules.py` and `endpoints.py`. Nothing in this `__init__` imports
a room, so a room's modules import the seam without a cycle.
"""
