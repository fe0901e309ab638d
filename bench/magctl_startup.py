"""Cold start of ``magctl``: the target is under 150 ms for ``--help`` and
``version --client`` on this machine.

Runs each command ``--runs`` times as a fresh process (after one warm-up that fills the OS
page cache, which is what "cold" means for an interpreter start: no Python state is kept)
and prints min / median / max wall milliseconds, next to two yardsticks: a bare interpreter
(``python -c pass``) and the import of the package's own client (``import
magnetar.client._client``, what a tool built on the asyncio client would pay), plus
``import magnetar.client`` (lazy since magctl: names load on first use). The last line is a
JSON object with every median and whether the target was met. Numbers depend on the
machine's load: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

TARGET_MS = 150.0


def _time(cmd: list[str], runs: int) -> list[float]:
    subprocess.run(cmd, capture_output=True, check=False)  # warm-up: page cache
    out = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=False)
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    magctl = shutil.which("magctl", path=os.path.dirname(sys.executable)) or ""
    base = [magctl] if magctl else [sys.executable, "-m", "magnetar.client.magctl"]
    py = sys.executable
    cases = {
        "magctl --help": [*base, "--help"],
        "magctl version --client": [*base, "version", "--client"],
        "python -c pass": [py, "-c", "pass"],
        "import magnetar.client": [py, "-c", "import magnetar.client"],
        "import magnetar.client._client": [py, "-c", "import magnetar.client._client"],
    }
    medians = {}
    print(f"load average: {os.getloadavg()[0]:.2f}; {args.runs} runs each; milliseconds")
    print(f"{'command':34} {'min':>8} {'median':>8} {'max':>8}")
    for name, cmd in cases.items():
        ms = _time(cmd, args.runs)
        medians[name] = round(statistics.median(ms), 1)
        print(f"{name:34} {min(ms):8.1f} {statistics.median(ms):8.1f} {max(ms):8.1f}")
    met = all(medians[k] < TARGET_MS for k in ("magctl --help", "magctl version --client"))
    print(json.dumps({"medians_ms": medians, "target_ms": TARGET_MS, "target_met": met}))


if __name__ == "__main__":
    main()
