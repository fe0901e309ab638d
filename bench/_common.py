"""Shared helpers of the end-to-end benchmarks (``bench/perf.py``, ``bench/run_all.py``).

Owns: starting and stopping a ``magnetar standalone`` process for a benchmark (free ports,
temporary data dir, readiness = HTTP health, SIGTERM then SIGKILL), process CPU accounting
from ``/proc``, percentiles, and py-spy profiling of server processes (raw collapsed stacks,
a top-N summary and a small self-contained flame-graph SVG renderer, so no external tool is
needed).

Must not know: any client API; broker or bookie internals (they are only processes here).
"""

from __future__ import annotations

import collections
import html
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def install_uvloop() -> None:
    """uvloop as the event loop policy where it is installed (as the servers run)."""
    try:
        import uvloop
    except ImportError:
        return
    uvloop.install()


def loadavg() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return round(one, 2), round(five, 2), round(fifteen, 2)


def proc_cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process (all threads); 0.0 if it is gone or unknown."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK
    except (OSError, IndexError, ValueError):
        return 0.0


def proc_runqueue_wait_s(pid: int | None) -> float:
    """Seconds the threads of ``pid`` spent runnable but waiting for a CPU (schedstat)."""
    if pid is None:
        return 0.0
    total_ns = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/schedstat") as f:
                total_ns += int(f.read().split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return total_ns / 1e9


def cpu_pressure_total_s() -> float | None:
    """PSI: total seconds during which some task waited for a CPU (None if unsupported)."""
    try:
        with open("/proc/pressure/cpu") as f:
            for line in f:
                if line.startswith("some "):
                    return int(line.rsplit("total=", 1)[1]) / 1e6
    except (OSError, ValueError, IndexError):
        pass
    return None


def child_pids(pid: int) -> list[int]:
    """Direct children of ``pid`` (every thread's children list), from /proc."""
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out.extend(int(x) for x in f.read().split())
    except OSError:
        pass
    return sorted(set(out))


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted sequence (nan when empty)."""
    if not sorted_values:
        return float("nan")
    idx = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[idx]


class StandaloneServer:
    """A ``magnetar standalone`` child process on free ports and a (temporary) data dir."""

    def __init__(
        self,
        data_dir: str | None = None,
        *,
        bookies: int = 1,
        extra_args: Sequence[str] = (),
        tls: bool = False,
    ) -> None:
        """``tls``: also serve ``pulsar+ssl://`` (``service_url_tls``) with a certificate from
        a fresh test CA (``trust_certs_file``); health checks stay on plain HTTP."""
        self._own_dir = data_dir is None
        self.extra_args = list(extra_args)
        self.data_dir = pathlib.Path(data_dir or tempfile.mkdtemp(prefix="magnetar-perf-"))
        self.port = free_port()
        self.tls = tls
        self.port_tls = free_port() if tls else -1
        self.trust_certs_file = ""
        self.web_port = free_port()
        self.bookie_port = free_port()
        self.bookies = bookies
        self.log_path = self.data_dir / "standalone.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def service_url(self) -> str:
        return f"pulsar://127.0.0.1:{self.port}"

    @property
    def service_url_tls(self) -> str:
        return f"pulsar+ssl://127.0.0.1:{self.port_tls}"

    def _write_tls_config(self) -> pathlib.Path:
        import trustme  # dev extra

        tls_dir = self.data_dir / "tls"
        tls_dir.mkdir(parents=True, exist_ok=True)
        ca = trustme.CA()
        cert = ca.issue_cert("localhost", "127.0.0.1")
        ca.cert_pem.write_to_path(str(tls_dir / "ca.pem"))
        cert.cert_chain_pems[0].write_to_path(str(tls_dir / "broker.pem"))
        cert.private_key_pem.write_to_path(str(tls_dir / "broker-key.pem"))
        self.trust_certs_file = str(tls_dir / "ca.pem")
        conf = self.data_dir / "tls-broker.conf"
        conf.write_text(
            f"broker_service_port_tls={self.port_tls}\n"
            f"tls_certificate_file_path={tls_dir / 'broker.pem'}\n"
            f"tls_key_file_path={tls_dir / 'broker-key.pem'}\n"
            f"tls_trust_certs_file_path={tls_dir / 'ca.pem'}\n"
        )
        return conf

    @property
    def web_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def bookie_pids(self) -> list[int]:
        return child_pids(self.proc.pid) if self.proc is not None else []

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "magnetar.broker.cli",
            "standalone",
            "--data-dir",
            str(self.data_dir / "data"),
            "--port",
            str(self.port),
            "--web-port",
            str(self.web_port),
            "--bookie-port",
            str(self.bookie_port),
            "--bookies",
            str(self.bookies),
            "--advertised-address",
            "127.0.0.1",
            "--log-level",
            "WARNING",
            *self.extra_args,
            *(["--config", str(self.data_dir / "tls-broker.conf")] if self.tls else []),
        ]

    def start(self, timeout_s: float = 60.0) -> StandaloneServer:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.tls:
            self._write_tls_config()
        with open(self.log_path, "ab") as log:
            # Same process group as the bench: killing the bench's group kills it too.
            self.proc = subprocess.Popen(self.command(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self.log_tail()
                self.stop()
                raise RuntimeError(f"standalone exited with {self.proc.returncode}:\n{tail}")
            if self.healthy():
                return self
            time.sleep(0.1)  # readiness polling interval, bounded by the deadline
        tail = self.log_tail()
        self.stop()
        raise TimeoutError(f"standalone not healthy within {timeout_s} s:\n{tail}")

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.web_url}/admin/v2/brokers/health", timeout=1) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            bookies = self.bookie_pids()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            for pid in bookies:  # they die with their parent; make sure of it
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def __enter__(self) -> StandaloneServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# ---------------------------------------------------------------------------------- profiling


def py_spy_path() -> str:
    return shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")


def start_py_spy(
    pid: int, out_raw: str, duration_s: float, *, rate_hz: int = 100, native: bool = False
) -> subprocess.Popen[bytes]:
    """``py-spy record`` of ``pid`` into collapsed-stack text (non-blocking unless native)."""
    cmd = [
        py_spy_path(),
        "record",
        "--pid",
        str(pid),
        "--duration",
        str(max(1, round(duration_s))),
        "--rate",
        str(rate_hz),
        "--format",
        "raw",
        "-o",
        out_raw,
    ]
    # --native cannot be combined with --nonblocking (py-spy must pause to unwind C stacks).
    cmd.append("--native" if native else "--nonblocking")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def read_collapsed(path: str) -> list[tuple[list[str], int]]:
    stacks: list[tuple[list[str], int]] = []
    with open(path, errors="replace") as f:
        for line in f:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if stack and count.isdigit():
                stacks.append((stack.split(";"), int(count)))
    return stacks


def _short(frame: str) -> str:
    """``func (path/to/module.py:123)`` -> ``func (module.py:123)``."""
    name, sep, where = frame.partition(" (")
    if not sep:
        return frame
    return f"{name} ({where.rsplit('/', 1)[-1]}"


def summarize_collapsed(path: str, top: int = 15) -> str:
    """Top frames by self and by inclusive samples, as text lines."""
    stacks = read_collapsed(path)
    total = sum(n for _, n in stacks) or 1
    self_counts: collections.Counter[str] = collections.Counter()
    incl: collections.Counter[str] = collections.Counter()
    for frames, n in stacks:
        short = [_short(f) for f in frames]
        self_counts[short[-1]] += n
        for f in set(short):
            incl[f] += n
    lines = [f"  {total} samples"]
    lines.append("  self:")
    lines += [f"    {100 * n / total:5.1f}%  {f}" for f, n in self_counts.most_common(top)]
    lines.append("  inclusive:")
    lines += [f"    {100 * n / total:5.1f}%  {f}" for f, n in incl.most_common(top)]
    return "\n".join(lines)


def collapsed_to_svg(path: str, svg_path: str, title: str, width: int = 1400) -> None:
    """Render collapsed stacks as a static icicle/flame graph SVG (hover shows the frame)."""
    stacks = read_collapsed(path)
    root: dict[str, object] = {"n": 0, "c": {}}
    for frames, n in stacks:
        node = root
        node["n"] = int(node["n"]) + n  # type: ignore[call-overload]
        for f in frames:
            children: dict[str, dict[str, object]] = node["c"]  # type: ignore[assignment]
            node = children.setdefault(f, {"n": 0, "c": {}})
            node["n"] = int(node["n"]) + n  # type: ignore[call-overload]
    total = int(root["n"]) or 1  # type: ignore[call-overload]
    row_h = 16
    rects: list[str] = []
    max_depth = [0]

    def walk(node: dict[str, object], x: float, depth: int) -> None:
        children: dict[str, dict[str, object]] = node["c"]  # type: ignore[assignment]
        for name, child in sorted(children.items()):
            n = int(child["n"])  # type: ignore[call-overload]
            w = n / total * width
            if w >= 0.3:
                max_depth[0] = max(max_depth[0], depth)
                label = html.escape(_short(name))
                pct = 100 * n / total
                hue = 20 + (hash(name.partition(" (")[0]) % 40)
                y = 24 + depth * row_h
                text = ""
                if w > 40:
                    chars = int(w / 7)
                    text = (
                        f'<text x="{x + 2:.1f}" y="{y + 12}" font-size="11">'
                        f"{html.escape(_short(name)[:chars])}</text>"
                    )
                rects.append(
                    f"<g><title>{label} ({n} samples, {pct:.2f}%)</title>"
                    f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row_h - 1}" '
                    f'fill="hsl({hue},85%,60%)"/>{text}</g>'
                )
                walk(child, x, depth + 1)
            x += w

    walk(root, 0.0, 0)
    height = 24 + (max_depth[0] + 2) * row_h
    svg = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'font-family="monospace"><text x="4" y="16" font-size="13">'
        f"{html.escape(title)} ({total} samples)</text>" + "".join(rects) + "</svg>"
    )
    pathlib.Path(svg_path).write_text(svg)
