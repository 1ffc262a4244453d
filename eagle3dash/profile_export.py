"""The acceptance profile as one portable file: JSON (`profile_json`) and CSV (`profile_csv`).

Both read a diagnosis in its one JSON form (`Diagnosis.to_dict()`, what `diagnose --json` prints
and `runs.diagnosis_json` keeps) and return the text of the file, or None when the diagnosis has
no profile (`--no-profile`, or a run stored before the profile existed): the caller checks, nothing
is raised. The Run page offers both as downloads; `diagnose --profile-out PATH` writes them.

## JSON: one object

- `format`: always "eagle3dash-profile"; `version`: 1 (this layout of the file).
- `draft`: the draft checkpoint diagnosed, as given (the `draft` option: a folder or a file).
- `target`: the model the server serves (its `model_path`), or null when it did not say.
- `endpoint`: the SGLang endpoint measured (the `endpoint` option); `baseline`: the same target
  served without speculation, or null when none was given.
- `sglang_version`: the server's version, or null when it did not report one.
- `steps`: draft steps per round the sides were simulated at (the server's, when it says).
- `profile`: the diagnosis's `profile`, as stored (every number may be null: not measured):
  - `steps`: the draft steps of the profile.
  - `per_position`: `positions` (1, 2, ...) and, per position, `simulated_training`,
    `simulated_serving` (the standalone draft on each side's layout: the share of chains whose
    first k drafts are right) and `measured` (the endpoint: the share of verify rounds that
    accepted at least k drafts, from SGLang's spec_correct_drafts_histogram; null when the server
    predates it).
  - `per_category`: one row per prompt category: `category`, `prompts` (how many),
    `measured_accept_length` (the endpoint), `sim_accept_training`, `sim_accept_serving` (the
    standalone draft), `tok_s` (output tok/s on the endpoint), `baseline_tok_s`, `speedup` and
    `speedup_noise` (± 2 standard errors of both sides' per-request tok/s; with a baseline).
  - `prompt_format`: one row per format sent ("raw", "chat-template", "chat-template, thinking
    on", "chat-template, thinking off"): `format`, `prompts` (how many: every row is on the same
    first prompts, "raw" the benchmark's own requests on them), `measured_accept_length`,
    `sim_accept_serving`, `tok_s` (aggregate output tok/s), `accept_length_noise` (two standard
    errors of the per-request accept lengths).
  - `temperature`: one row per sampling temperature: `temperature`, `measured_accept_length`,
    `tok_s`, `accept_length_noise`, `prompts` (as for the prompt formats; temperature 0 is the
    benchmark's own requests; null in a profile stored before rows could stop early).
  - `steps_advice`: one row per `--speculative-num-steps` (topk 1, draft tokens = steps + 1):
    `num_steps`, `predicted_accept_length`, `predicted_tok_s`, `source` ("measured": from the
    server's histogram; "simulated": from the standalone draft), `tok_s_noise` (± two standard
    errors of the measured per-request tok/s, scaled to the prediction; null when not known).
  - `recommended`: the setting to run, `num_steps`, `predicted_accept_length`,
    `predicted_tok_s`; the server's `current_num_steps` and its `current_tok_s`; `flags`, the
    SGLang flag line to use; `fastest_num_steps`, its `gain` over the served setting and the
    gain's interval `gain_low`..`gain_high` (± two standard errors of the per-request tok/s);
    `changes`: whether the gain is at least 5% with its lower bound above 0 (else the setting to
    run is the served one).
  - `step_costs`: the costs the prediction uses, in seconds: `verify_s` (one verify forward),
    `draft_step_s` (one draft step), `request_fixed_s` (a request's fixed cost); `source`
    ("baseline": the verify cost is the baseline's per-token time; without a baseline there are
    no costs and no predicted tok/s).
  - `not_profiled`: the parts that could not be measured: `part` (one of the part names above),
    `reason`, `option` (the diagnosis option that enables it, or null), `action` (what to do),
    `error` (the error that stopped it, or null).

## CSV: long form, one value a line

Header `part,row,metric,value`. `part` names the profile's part as in the JSON; `row` says which
row of it; `metric` is the field; `value` is the number or text, empty for null. Lines come in
the JSON's order:

- `profile,,steps,4`: the profile's draft steps.
- `per_position,<position>,<simulated_training|simulated_serving|measured>,<share>`, position by
  position; a list that is null (no histogram) gives empty values at every position.
- `per_category,<category>,<field>,<value>` for each field of the row but `category`.
- `prompt_format,<format>,<field>,<value>`; `temperature,<temperature>,<field>,<value>`;
  `steps_advice,<num_steps>,<field>,<value>` (the same way).
- `recommended,,<field>,<value>` and `step_costs,,<field>,<value>` (one row each, no row key).
- `not_profiled,<part>,<reason|option|action|error>,<text>`.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping
from typing import Any

FORMAT = "eagle3dash-profile"
VERSION = 1
CSV_HEADER = ("part", "row", "metric", "value")
PER_POSITION_LISTS = ("simulated_training", "simulated_serving", "measured")
# The list parts and the field that names each of their rows.
ROW_KEYS = (
    ("per_category", "category"),
    ("prompt_format", "format"),
    ("temperature", "temperature"),
    ("steps_advice", "num_steps"),
)


def profile_json(diagnosis: Mapping[str, Any]) -> str | None:
    """The portable profile file (JSON), or None when the diagnosis has no profile."""
    profile = diagnosis.get("profile")
    if not profile:
        return None
    options = diagnosis.get("options") or {}
    server = diagnosis.get("server") or {}
    return json.dumps(
        {
            "format": FORMAT,
            "version": VERSION,
            "draft": options.get("draft"),
            "target": server.get("model_path"),
            "endpoint": options.get("endpoint") or server.get("url"),
            "baseline": options.get("baseline"),
            "sglang_version": server.get("version"),
            "steps": diagnosis.get("steps"),
            "profile": profile,
        },
        indent=2,
    )


def profile_csv(diagnosis: Mapping[str, Any]) -> str | None:
    """The profile in long CSV rows (part,row,metric,value), or None without a profile."""
    profile = diagnosis.get("profile")
    if not profile:
        return None
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_HEADER)
    writer.writerow(("profile", "", "steps", _cell(profile.get("steps"))))
    per_position = profile.get("per_position") or {}
    positions = per_position.get("positions") or []
    for i, position in enumerate(positions):
        for name in PER_POSITION_LISTS:
            values = per_position.get(name) or []
            value = values[i] if i < len(values) else None
            writer.writerow(("per_position", _cell(position), name, _cell(value)))
    for part, key in ROW_KEYS:
        for row in profile.get(part) or []:
            for metric, value in row.items():
                if metric != key:
                    writer.writerow((part, _cell(row.get(key)), metric, _cell(value)))
    for part in ("recommended", "step_costs"):
        for metric, value in (profile.get(part) or {}).items():
            writer.writerow((part, "", metric, _cell(value)))
    for item in profile.get("not_profiled") or []:
        for metric in ("reason", "option", "action", "error"):
            writer.writerow(
                ("not_profiled", _cell(item.get("part")), metric, _cell(item.get(metric)))
            )
    return out.getvalue()


def _cell(value: Any) -> str:
    """A CSV cell: empty for null (or NaN), the number or text as JSON writes it otherwise."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
