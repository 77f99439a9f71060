"""Write ``data/bench/budgetlab-simulated-llama-3.1-8b-h100.json``: a simulated ``vllm bench
serve --save-result --save-detailed`` file (budgetlab.serving.bench.make_example_bench).

Run from the repository root: ``.venv/bin/python tools/make_example_bench.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

from budgetlab.serving.bench import make_example_bench

if __name__ == "__main__":
    path = Path(__file__).resolve().parents[1] / "data" / "bench" / "budgetlab-simulated-llama-3.1-8b-h100.json"
    path.write_text(json.dumps(make_example_bench(), separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"wrote {path} ({path.stat().st_size:,} bytes)")
