"""A child for tests/test_preloaded.py: prints what `python -m tests.preload_probe CODE` sees as
one JSON line, then exits with CODE (or sleeps until signalled when CODE is "wait", after
writing a partial line when it is "partial")."""

import json
import os
import sys
import time

if __name__ == "__main__":
    facts = {
        "argv": sys.argv[1:],
        "cwd": os.getcwd(),
        "probe_env": os.environ.get("PROBE_ENV"),
        "own_session": os.getsid(0) == os.getpid(),
        "stdin_empty": sys.stdin is None or sys.stdin.read() == "",
        "torch_loaded": "torch" in sys.modules,
    }
    print(json.dumps(facts), flush=True)
    print("to stderr", file=sys.stderr, flush=True)
    if sys.argv[1] == "wait":
        time.sleep(60)
    if sys.argv[1] == "partial":  # a line not ended, never flushed by the probe itself
        sys.stdout.write("a partial line")
        time.sleep(60)
    sys.exit(int(sys.argv[1]))
