"""Benchmark: `inspect` (config + safetensors header) against full loads of a Kimi-K2.5-sized draft.

The draft is SpecForge-format, bf16, with its embedding (as `export --to hf` writes it): ~4.3 GB.
Its data region is a sparse hole made with `truncate`, so the file costs no disk; loading it still
reads every byte. The file is read once before measuring, so every operation finds it in the page
cache (no disk I/O: load times are a lower bound, and the order of the runs does not matter). Each
operation runs in a fresh subprocess: time of the operation alone, time of its imports (torch for
the loads), and peak RSS (VmHWM) of the process. The full-read baseline is safetensors' `load_file`
with `backend="pread"`: the default mmap backend is lazy and would read nothing. eagle3dash `load()`
memory-maps the file and touches every byte in its NaN/Inf check, so its peak RSS counts the
file's page-cache pages. The operations run in turn, `--repeats` rounds (default 5) so that machine
load hits them alike; the figures and the ratios are medians over the rounds.
Usage: python bench/bench_inspect.py [--repeats N] [--json]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from eagle3dash.checkpoint import SAFETENSORS, save  # noqa: E402
from eagle3dash.spec import DraftSpec, expected_shapes  # noqa: E402

KIMI_DRAFT = DraftSpec(
    format="specforge",
    hidden_size=7168,
    target_hidden_size=7168,
    intermediate_size=18432,
    num_layers=1,
    num_heads=64,
    num_kv_heads=8,
    head_dim=112,
    vocab_size=163840,
    draft_vocab_size=32000,
    aux_layer_ids=(1, 29, 57),
    aux_ids_location="eagle_config",
    has_d2t=True,
    has_t2d=True,
    has_embed=True,
    dtype="bfloat16",
)

# Each snippet runs in its own interpreter; {path} is the checkpoint directory.
OPERATIONS = {
    "eagle3dash inspect()": (
        "from eagle3dash.checkpoint import inspect",
        "inspect({path!r})",
    ),
    "safetensors load_file()": (
        "import torch; from safetensors.torch import load_file",
        "load_file({path!r} + '/model.safetensors', backend='pread')",
    ),
    "eagle3dash load()": (
        "import torch; from eagle3dash.checkpoint import load",
        "load({path!r})",
    ),
}

# VmHWM, not ru_maxrss: Linux carries the parent's peak RSS across fork+exec into ru_maxrss.
RUNNER = """
import sys, time
def peak_kb():
    return next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("VmHWM"))
sys.path.insert(0, {root!r})
t0 = time.perf_counter()
{imports}
t1 = time.perf_counter()
rss_imports = peak_kb()
{op}
t2 = time.perf_counter()
print(t1 - t0, t2 - t1, rss_imports, peak_kb())
"""


def write_sparse_draft(directory: Path, spec: DraftSpec) -> int:
    """config.json plus a model.safetensors with a real header over a sparse data hole."""
    save(spec, {}, directory, spec.format)  # writes config.json; the weights file is replaced
    header, offset = {}, 0
    for name, shape in expected_shapes(spec).items():
        code, size = {"d2t": ("I64", 8), "t2d": ("BOOL", 1)}.get(name, ("BF16", 2))
        nbytes = math.prod(shape) * size
        disk_name = name.replace("layers.0.", "midlayer.")  # SpecForge's names
        header[disk_name] = {
            "dtype": code,
            "shape": list(shape),
            "data_offsets": [offset, offset + nbytes],
        }
        offset += nbytes
    text = json.dumps(header).encode()
    total = 8 + len(text) + offset
    with open(directory / SAFETENSORS, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        f.truncate(total)
    return total


def warm_page_cache(path: Path) -> None:
    """Read the file once so that no measured run pays for populating the page cache."""
    with open(path, "rb") as f:
        while f.read(64 << 20):
            pass


def measure(directory: Path, imports: str, op: str) -> dict:
    """Import time, operation time and peak RSS of a fresh interpreter running one operation."""
    code = RUNNER.format(root=str(ROOT), imports=imports, op=op.format(path=str(directory)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    import_s, op_s, rss_imports_kb, peak_kb = out.stdout.split()
    return {
        "import_s": float(import_s),
        "op_s": float(op_s),
        "rss_after_imports_mb": int(rss_imports_kb) / 1024,
        "peak_rss_mb": int(peak_kb) / 1024,
    }


def medians(samples: list[dict]) -> dict:
    """Each measured figure's median over the rounds."""
    return {key: statistics.median(s[key] for s in samples) for key in samples[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds of every operation")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    samples: dict[str, list[dict]] = {name: [] for name in OPERATIONS}
    with tempfile.TemporaryDirectory(prefix="bench_inspect_") as tmp:
        directory = Path(tmp)
        size = write_sparse_draft(directory, KIMI_DRAFT)
        disk = sum(f.stat().st_blocks * 512 for f in directory.iterdir())
        warm_page_cache(directory / SAFETENSORS)
        for _ in range(args.repeats):  # interleaved: each round runs every operation once
            for name, snippet in OPERATIONS.items():
                samples[name].append(measure(directory, *snippet))
    rows = {name: medians(runs) for name, runs in samples.items()}
    base = rows["eagle3dash inspect()"]
    result = {
        "draft": "Kimi-K2.5-sized EAGLE-3 draft, SpecForge format, bf16, with embed_tokens",
        "file_bytes": size,
        "disk_bytes": disk,
        "repeats": args.repeats,
        "operations": rows,  # medians over the rounds
        "samples": samples,
        "ratios_vs_inspect": {  # ratios of the medians
            name: {
                "time": row["op_s"] / base["op_s"],
                "peak_rss": row["peak_rss_mb"] / base["peak_rss_mb"],
            }
            for name, row in rows.items()
            if row is not base
        },
    }
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
        return
    print(f"{result['draft']}")
    print(f"model.safetensors: {size / 1e9:.2f} GB apparent, {disk / 1e6:.2f} MB on disk (sparse)")
    print(f"median of {args.repeats} rounds, the operations in turn; ratios of the medians")
    print(f"{'operation':<26}{'op time':>11}{'imports':>10}{'RSS imports':>13}{'peak RSS':>11}")
    for name, r in rows.items():
        print(
            f"{name:<26}{r['op_s']:>10.4f}s{r['import_s']:>9.2f}s"
            f"{r['rss_after_imports_mb']:>10.0f} MB{r['peak_rss_mb']:>8.0f} MB"
        )
    for name, ratio in result["ratios_vs_inspect"].items():
        print(
            f"{name} / inspect(): {ratio['time']:,.0f}x the time, "
            f"{ratio['peak_rss']:.1f}x the peak RSS"
        )
    print("Page cache warm, data region a sparse hole: load times are a lower bound (no disk I/O).")


if __name__ == "__main__":
    main()
