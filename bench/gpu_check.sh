#!/usr/bin/env bash
# The engine's GPU check, prepared for a lent GPU machine (run from the repo root):
# batched draft evaluation on CUDA in bf16 at Kimi-K2.5-like size (hidden 7168, 2k tokens, S=5),
# its tokens per second and its agreement with float32. Numbers go into docs/benchmarks.md.
set -euo pipefail
python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
python3 bench/bench_eval.py --skip-naive --device cuda --dtype bfloat16 --tokens 2048 --steps 5 \
  | tee "${OUT:-.}/gpu_eval.txt"
