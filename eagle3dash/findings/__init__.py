"""Findings: rules over a checkpoint, a server, the layouts and the measurements.

Each rule is a small function `rule(e: Evidence) -> list[Finding]` whose docstring cites its
SGLang source (file, PR or issue). A rule returns nothing when the evidence it needs is missing:
missing evidence is not a problem found. `diagnose` runs every rule and sorts the findings by
severity, then by the order of `RULES`.
"""

from __future__ import annotations

from collections.abc import Callable

from eagle3dash.findings.checkpoint_rules import (
    rule_checkpoint_problems,
    rule_d2t_missing,
    rule_eagle31_ignored,
    rule_lm_head_missing,
    rule_norm_before_residual,
    rule_unknown_tensors,
    rule_weights_not_finite,
)
from eagle3dash.findings.core import SEVERITIES, Evidence, Finding
from eagle3dash.findings.layout_rules import (
    beside_observed_causes,
    rule_aux_ids_not_read,
    rule_capture_rule_version,
    rule_detected_layout,
    rule_final_state_id,
    rule_gpt_oss_boundary_version,
    rule_layout_mismatch,
    rule_server_feeds_other_taps,
    rule_vllm_ids_not_read,
    rule_vllm_no_ids,
)
from eagle3dash.findings.measurement_rules import (
    rule_fp8_kv_cache,
    rule_low_acceptance,
    rule_measured_above_simulated,
    rule_measured_below_simulated,
    rule_random_token_prompts,
    rule_slower_than_baseline,
    rule_training_serving_gap,
    slowdown_causes,
)
from eagle3dash.findings.profile_rules import (
    rule_category_far_below,
    rule_num_steps_advice,
    rule_prompt_format_gap,
)
from eagle3dash.findings.server_rules import (
    rule_algorithm_eagle,
    rule_disaggregated,
    rule_draft_differs,
    rule_draft_quantized,
    rule_draft_tokens_capped,
    rule_draft_window_ignored,
    rule_engine_release_not_read,
    rule_hidden_states_last_only,
    rule_hidden_states_off,
    rule_hidden_states_truncated,
    rule_no_speculation,
    rule_server_claims_implausible,
    rule_spec_v2_tree,
    rule_speculative_adaptive,
    rule_vllm_draft_quantization,
)
from eagle3dash.findings.training_rules import (
    rule_draft_for_another_target,
    rule_ids_beyond_target,
    rule_record_ids_differ,
    rule_training_readings,
)

__all__ = ["RULES", "SEVERITIES", "Evidence", "Finding", "diagnose"]

# The order decides how findings of equal severity are listed.
RULES: tuple[Callable[[Evidence], list[Finding]], ...] = (
    rule_weights_not_finite,
    rule_vllm_ids_not_read,
    rule_vllm_no_ids,
    rule_final_state_id,
    rule_gpt_oss_boundary_version,
    rule_layout_mismatch,
    rule_server_feeds_other_taps,
    rule_detected_layout,
    rule_draft_for_another_target,
    rule_record_ids_differ,
    rule_training_readings,
    rule_algorithm_eagle,
    rule_no_speculation,
    rule_server_claims_implausible,
    rule_draft_differs,
    rule_aux_ids_not_read,
    rule_capture_rule_version,
    rule_lm_head_missing,
    rule_unknown_tensors,
    rule_d2t_missing,
    rule_norm_before_residual,
    rule_eagle31_ignored,
    rule_draft_tokens_capped,
    rule_spec_v2_tree,
    rule_speculative_adaptive,
    rule_draft_quantized,
    rule_vllm_draft_quantization,
    rule_draft_window_ignored,
    rule_random_token_prompts,
    rule_disaggregated,
    rule_measured_above_simulated,
    rule_measured_below_simulated,
    rule_hidden_states_off,
    rule_hidden_states_last_only,
    rule_checkpoint_problems,
    rule_ids_beyond_target,
    rule_hidden_states_truncated,
    rule_prompt_format_gap,
    rule_fp8_kv_cache,
    rule_engine_release_not_read,
)


# Rules that read the other rules' findings (to cite what explains what they see); they run
# after RULES and list after their findings of the same severity.
SUMMARY_RULES: tuple[Callable[[Evidence, list[Finding]], list[Finding]], ...] = (
    rule_training_serving_gap,
    rule_slower_than_baseline,
    rule_low_acceptance,
    rule_category_far_below,
    rule_num_steps_advice,
)


def diagnose(evidence: Evidence) -> list[Finding]:
    """Run every rule; a critical slowdown's causes made critical (`slowdown_causes`), an
    unsettled layout difference a note beside an observed cause (`beside_observed_causes`); findings
    sorted by severity, then by the order of RULES (so the root cause, the first critical one, is
    what explains the rest)."""
    found: list[tuple[int, int, Finding]] = []
    for r, rule in enumerate(RULES):
        found += [(r, k, finding) for k, finding in enumerate(rule(evidence))]
    first = [f for *_, f in found]
    for r, summary in enumerate(SUMMARY_RULES, start=len(RULES)):
        found += [(r, k, finding) for k, finding in enumerate(summary(evidence, first))]
    weighed = beside_observed_causes(slowdown_causes([f for *_, f in found]))
    order = sorted(zip(found, weighed, strict=True), key=lambda x: (-x[1].severity.rank, *x[0][:2]))
    return [f for _, f in order]
