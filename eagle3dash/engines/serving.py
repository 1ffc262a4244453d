"""Which serving engine a server is, as far as the rules go: the engine, its release and, on
vLLM, its model runner (`ServingEngine`). Below the rules' protocol and every room's answers,
which all take one; above each room's `rules.py`, whose releases it reads."""

from __future__ import annotations

from dataclasses import dataclass, replace

from eagle3dash.engines.sglang import rules as sglang_rules
from eagle3dash.engines.vllm import rules as vllm_rules

ENGINES = ("sglang", "vllm")


@dataclass(frozen=True)
class ServingEngine:
    """An engine, its release (None: unknown, the newest read is assumed) and, for vLLM, its
    model runner."""

    name: str = "sglang"  # one of ENGINES
    version: str | None = None
    runner: str | None = None  # vLLM: "v1" | "v2"; None: not known, see readings()

    def __post_init__(self) -> None:
        if self.name not in ENGINES:
            raise ValueError(f"unknown serving engine {self.name!r}: use one of {ENGINES}")
        if self.name == "vllm" and self.runner is not None:
            vllm_rules.check_runner(self.runner)
            if self.runner not in vllm_rules.runners_of(self.rules_version()):
                raise ValueError(
                    f"vLLM {self.rules_version()} has no {self.runner.upper()} model runner "
                    f"(it has {', '.join(vllm_rules.runners_of(self.rules_version()))}): give "
                    "an earlier release for V1"
                )

    def rules_version(self) -> str:
        """The release whose rules apply: the given one, else the newest read (on vLLM, the
        newest read that has the runner given: a V1 server is 0.33.0 at the latest)."""
        if self.version:
            return self.version
        if self.name == "sglang":
            return sglang_rules.DEFAULT_SGLANG_VERSION
        having = [
            v
            for v in vllm_rules.KNOWN_VLLM_VERSIONS
            if self.runner is None or self.runner in vllm_rules.runners_of(v)
        ]
        return having[-1] if having else vllm_rules.DEFAULT_VLLM_VERSION

    def vllm_runner(self) -> str:
        """vLLM's model runner: the known one, else the release's only one, else V2 (the
        default); where the runner is not known, `readings` gives every runner instead."""
        if self.runner is not None:
            return self.runner
        return vllm_rules.runners_of(self.rules_version())[-1]

    def readings(self) -> tuple[ServingEngine, ...]:
        """The engines this server may be: itself, or, on vLLM with the runner not known, one
        per runner its release has (each a reading of the rules, as a trainer's are)."""
        if self.name != "vllm" or self.runner is not None:
            return (self,)
        return tuple(replace(self, runner=r) for r in vllm_rules.runners_of(self.rules_version()))

    def stand_in(self) -> str | None:
        """The release whose rules stand in for this one when it was not read (a release newer
        than the newest read, or between those read on vLLM); None when its own rules apply."""
        version = self.rules_version()
        if self.name == "sglang":
            newer = sglang_rules.stand_in_note(version) is not None
            return sglang_rules.DEFAULT_SGLANG_VERSION if newer else None
        used = vllm_rules.rules_release(version)
        return None if used == version else used

    def label(self) -> str:
        """'SGLang 0.5.23', 'vLLM 0.33.0 (V2 runner)', 'vLLM 0.32.0 (runner not known)', 'vLLM
        0.35.0 (V2 runner; 0.34.0's rules stand in)'."""
        stand_in = self.stand_in()
        rules = f"{stand_in}'s rules stand in" if stand_in else ""
        if self.name == "sglang":
            return f"SGLang {self.rules_version()}" + (f" ({rules})" if rules else "")
        known = len(self.readings()) == 1
        runner = f"{self.vllm_runner().upper()} runner" if known else "runner not known"
        return f"vLLM {self.rules_version()} ({runner}{'; ' + rules if rules else ''})"


SGLANG = ServingEngine("sglang")
