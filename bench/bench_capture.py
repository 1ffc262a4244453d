"""Benchmark: an SGLang capture at Kimi width against a bare orjson.loads of the same reply.

A local HTTP server on 127.0.0.1 plays SGLang: /generate with return_hidden_states answers with a
[2048][21504] hidden-states block (3 taps x 7168, Kimi-K2.5's aux width) written once to a temp
file as SGLang writes it (orjson, bf16 values as JSON numbers, ~18 bytes a number); every other
route answers small JSON. Each round, in fresh interpreters (so peak RSS is that operation's):
- "eagle3dash capture": `capture_from_sglang` of one 2,039-token prompt (2,048 tokens with the
  completion), the reply read as it arrives by `states_json.StatesReader`, then `save_capture`
  to safetensors; the time of the capture and of the save, and the process's peak RSS (VmHWM);
- "bare orjson.loads": the reply's bytes read from the file, then `orjson.loads` of them alone
  (the lower bound on parsing this JSON, with nothing converted); its time and peak RSS.
The figures are medians over `--repeats` rounds (default 5), the two operations interleaved; the
time ratio is the median of the rounds' ratios. MB are 10^6 bytes.
Goals: capture time <= 1.3x the bare parse; capture peak RSS <= 3x the float32 block (176 MB).
Usage: python bench/bench_capture.py [--repeats N] [--rows R] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
import torch

ROOT = Path(__file__).resolve().parent.parent
TAPS, HIDDEN = 3, 7168  # Kimi-K2.5: 3 aux taps of 7168
REFERENCE_TAIL = 8  # engine.REFERENCE_TAIL: the completion is 1 + 8 tokens


def write_reply(path: Path, rows: int, width: int) -> int:
    """A /generate reply with a [rows][width] prefill block, as SGLang (orjson) writes it."""
    g = torch.Generator().manual_seed(0)
    meta_head = orjson.dumps(
        {
            "id": "bench",
            "finish_reason": {"type": "length", "length": 1},
            "prompt_tokens": rows,
            "completion_tokens": 1,
            "cached_tokens": 0,
        }
    )[:-1]
    with open(path, "wb") as f:
        f.write(b'{"text":"","output_ids":[7],"meta_info":' + meta_head + b',"hidden_states":[[')
        for start in range(0, rows, 64):
            n = min(64, rows - start)
            # bf16 values, as a bf16 target returns them, written as orjson writes a float
            x = (torch.randn(n, width, generator=g) * 0.005).bfloat16().double().numpy()
            text = orjson.dumps(x, option=orjson.OPT_SERIALIZE_NUMPY)[1:-1]
            f.write((b"," if start else b"") + text)
        f.write(b']],"e2e_latency":0.5}}')
        return f.tell()


def serve(reply: Path, rows: int) -> ThreadingHTTPServer:
    """The stand-in SGLang server on 127.0.0.1, in a thread of this process."""
    info = {
        "model_path": "moonshotai/Kimi-K2.5",
        "version": "0.5.23",
        "speculative_algorithm": "EAGLE3",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
        "enable_return_hidden_states": True,
    }

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # like uvicorn: no 40 ms delayed-ACK stall per reply

        def log_message(self, format: str, *args: object) -> None:
            pass

        def _send(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._send(orjson.dumps(info if self.path.endswith("server_info") else {}))

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            request = orjson.loads(body) if body else {}
            if self.path != "/generate":
                self._send(b"{}")
            elif request.get("return_hidden_states"):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(reply.stat().st_size))
                self.end_headers()
                with open(reply, "rb") as f:
                    self.connection.sendfile(f)
            else:
                n = request["sampling_params"]["max_new_tokens"]
                meta = {"prompt_tokens": rows, "completion_tokens": n, "spec_verify_ct": n}
                self._send(orjson.dumps({"text": "", "output_ids": [7] * n, "meta_info": meta}))

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# VmHWM, not ru_maxrss: Linux carries the parent's peak RSS across fork+exec into ru_maxrss.
PEAK = """
def peak_mb():
    kb = next(int(ln.split()[1]) for ln in open("/proc/self/status") if ln.startswith("VmHWM"))
    return kb * 1024 / 1e6
"""

CAPTURE = (
    PEAK
    + """
import sys, tempfile, time
sys.path.insert(0, {root!r})
from eagle3dash.capture import save_capture
from eagle3dash.engines.sglang.capture import capture_from_sglang
from eagle3dash.layout import Tap
from eagle3dash.engines.sglang.client import SGLangClient
rss_imports = peak_mb()
client = SGLangClient({url!r}, timeout=600)
t0 = time.perf_counter()
cap = capture_from_sglang(client, [[5] * {prompt}], (Tap(1), Tap(29), Tap(57)), 1, warn=[],
                          hidden_size={hidden})
t1 = time.perf_counter()
with tempfile.TemporaryDirectory() as out:
    save_capture(cap, out)
    t2 = time.perf_counter()
assert len(cap.sequences[0]) == {rows} and cap.hidden_size == {hidden}
print(t1 - t0, t2 - t1, rss_imports, peak_mb())
"""
)

BARE = (
    PEAK
    + """
import time, orjson
data = open({reply!r}, "rb").read()
rss_imports = peak_mb()
t0 = time.perf_counter()
body = orjson.loads(data)
t1 = time.perf_counter()
assert len(body["meta_info"]["hidden_states"][0]) == {rows}
print(t1 - t0, 0.0, rss_imports, peak_mb())
"""
)


def measure(code: str) -> dict:
    """One fresh interpreter: the operation's seconds, the save's, RSS after imports, peak RSS."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"a measured operation failed:\n{out.stderr}")
    op_s, save_s, rss_imports, peak = map(float, out.stdout.split())
    return {"s": op_s, "save_s": save_s, "rss_after_imports_mb": rss_imports, "peak_rss_mb": peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds of both operations")
    parser.add_argument("--rows", type=int, default=2048, help="tokens in the prefill block")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    width = TAPS * HIDDEN
    block_mb = args.rows * width * 4 / 1e6
    with tempfile.TemporaryDirectory(prefix="bench_capture_") as tmp:
        reply = Path(tmp) / "reply.json"
        size = write_reply(reply, args.rows, width)
        server = serve(reply, args.rows)
        url = f"http://127.0.0.1:{server.server_address[1]}"
        fields = {"root": str(ROOT), "url": url, "reply": str(reply), "rows": args.rows}
        prompt = args.rows - 1 - REFERENCE_TAIL
        ops = {
            "eagle3dash capture": CAPTURE.format(prompt=prompt, hidden=HIDDEN, **fields),
            "bare orjson.loads": BARE.format(**fields),
        }
        samples: dict[str, list[dict]] = {name: [] for name in ops}
        for _ in range(args.repeats):
            for name, code in ops.items():
                samples[name].append(measure(code))
        server.shutdown()
    rows = {
        n: {k: statistics.median(s[k] for s in runs) for k in runs[0]}
        for n, runs in samples.items()
    }
    cap, bare = rows["eagle3dash capture"], rows["bare orjson.loads"]
    pairs = zip(samples["eagle3dash capture"], samples["bare orjson.loads"], strict=True)
    result = {
        "block": f"[{args.rows}][{width}] float32",
        "block_mb": block_mb,
        "reply_mb": size / 1e6,
        "bytes_per_number": size / (args.rows * width),
        "repeats": args.repeats,
        "operations": rows,
        "time_ratio": statistics.median(c["s"] / b["s"] for c, b in pairs),  # per round
        "capture_peak_rss_over_block": cap["peak_rss_mb"] / block_mb,
        "bare_peak_rss_over_block": bare["peak_rss_mb"] / block_mb,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(
        f"reply: {result['block']} block, {block_mb:.0f} MB as float32, {size / 1e6:.0f} MB of "
        f"JSON ({result['bytes_per_number']:.1f} bytes a number); medians of {args.repeats} rounds"
    )
    print(f"{'operation':<22}{'time s':>9}{'save s':>9}{'RSS after imports':>19}{'peak RSS':>10}")
    for name, r in rows.items():
        print(
            f"{name:<22}{r['s']:>9.2f}{r['save_s']:>9.2f}{r['rss_after_imports_mb']:>16.0f} MB"
            f"{r['peak_rss_mb']:>7.0f} MB"
        )
    print(
        f"capture / bare parse: {result['time_ratio']:.2f}x the time (goal <= 1.3x); capture peak "
        f"RSS {result['capture_peak_rss_over_block']:.2f}x the float32 block (goal <= 3x), bare "
        f"parse {result['bare_peak_rss_over_block']:.2f}x"
    )


if __name__ == "__main__":
    main()
