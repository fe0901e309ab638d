"""Where a process's CPU goes per message, from a py-spy collapsed-stack file.

Each stack is assigned to the first category (innermost frame outwards) whose pattern one of
its frames matches; a category's share of the samples, times the process's CPU µs per
message (measured by the bench that made the profile), is that category's µs per message.
Idle samples (a thread waiting in ``epoll``/``select``/a lock, which py-spy's non-idle mode
mostly drops) are counted apart and not scaled.

    .venv/bin/python bench/profile_groups.py /tmp/p/broker.txt --preset broker --us 20.8
    .venv/bin/python bench/profile_groups.py /tmp/p/bookie.txt --preset bookie --us 5.8

The last output line is one JSON object: ``{category: us_per_message}`` (or shares when
``--us`` is not given).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import read_collapsed

# (category, pattern over "function (path:line)"), innermost match wins; order only breaks
# ties between patterns matching the same frame.
BROKER: list[tuple[str, str]] = [
    ("gc", r"^<gc>|\(gc\)|garbage"),
    ("frame decoding (decode_command, protobuf parse)", r"decode_command|protocol/commands\.py"),
    (
        "SEND checks (checksum, check_entry, policies)",
        r"check_entry|admit_send|crc32c|checksum_matches|policies/",
    ),
    ("SEND handling (connection)", r"\bon_send \(|_handle_send\b"),
    (
        "receipts (encode, on_published)",
        r"on_published|encode_send_receipt|send_receipts|_sends_done",
    ),
    ("topic publish (_submit, complete_ready)", r"topics/persistent\.py|topics/producer\.py"),
    (
        "managed ledger add",
        r"storage/managed_adapter\.py:(19\d|2[0-3]\d)|ledger/managed_ledger\.py"
        r"|ledger/rollover\.py",
    ),
    ("ledger handle (add, outbox, acks)", r"bookkeeper/write_handle\.py"),
    ("bookie client + gRPC stream", r"bookie/client\.py|bookie/wire\.py|grpc"),
    (
        "dispatch (cursor reads, MESSAGE frames)",
        r"dispatch/|subscription\.py|encode_message|send_messages|cursor\.py|ledger/cache\.py"
        r"|ledger/reads\.py|ledger/read_ahead\.py|storage/managed_adapter\.py",
    ),
    ("acks (ACK command, ack state)", r"_on_ack|_handle_ack|protocol/acks\.py|ackstate\.py"),
    (
        "connection output (flush, transport.write)",
        r"_flush_out|write_command|write_frames|\bwrite \(.*connection\.py",
    ),
    ("frame loop (data_received)", r"data_received|_handle_frame|next_command|receive_data"),
    ("event loop (asyncio, uvloop)", r"asyncio/|uvloop|selectors\.py|_run_once|run_forever"),
]

BOOKIE: list[tuple[str, str]] = [
    ("gc", r"^<gc>|\(gc\)|garbage"),
    ("journal thread (pack, write, fdatasync)", r"journal\.py"),
    ("write cache / ledger storage", r"write_cache\.py|ledger_storage\.py|entry_log\.py|index\.py"),
    ("wire decoding/encoding", r"wire\.py"),
    ("add handling (server, core)", r"server\.py|core\.py"),
    ("gRPC (aio stream)", r"grpc"),
    ("event loop (asyncio, uvloop)", r"asyncio/|uvloop|selectors\.py|_run_once|run_forever"),
]

# A stack whose innermost Python frame is the loop's ``run`` or a thread's ``run`` is work in
# C below it (uvloop's callbacks and socket syscalls, gRPC's C core and its poller thread):
# py-spy without --native sees no deeper.
NATIVE = "native: uvloop, socket syscalls, gRPC C core (innermost frame Runner.run/Thread.run)"
NATIVE_RE = re.compile(r"^(Runner\.run|Thread\.run|run_forever) ")

IDLE = re.compile(r"epoll|select \(|\bwait \(|_wait_for_tstate_lock|acquire|futex|poll \(")

PRESETS = {"broker": BROKER, "bookie": BOOKIE}


def group(path: str, cats: list[tuple[str, str]]) -> tuple[dict[str, int], int, int]:
    pats = [(name, re.compile(p)) for name, p in cats]
    counts: dict[str, int] = {name: 0 for name, _ in cats}
    counts["other"] = 0
    counts[NATIVE] = 0
    idle = total = 0
    for frames, n in read_collapsed(path):
        if frames and IDLE.search(frames[-1]):
            idle += n
            continue
        total += n
        if frames and NATIVE_RE.search(frames[-1]):
            counts[NATIVE] += n
            continue
        got = "other"
        for frame in reversed(frames):
            for name, pat in pats:
                if pat.search(frame):
                    got = name
                    break
            if got != "other":
                break
        counts[got] += n
    return counts, total, idle


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("collapsed", help="py-spy raw (collapsed) output")
    p.add_argument("--preset", choices=sorted(PRESETS), default="broker")
    p.add_argument("--us", type=float, help="the process's CPU µs per message")
    args = p.parse_args()
    counts, total, idle = group(args.collapsed, PRESETS[args.preset])
    total = total or 1
    out: dict[str, float] = {}
    print(f"# {args.collapsed}: {total} busy samples, {idle} idle samples (not scaled)")
    for name, n in sorted(counts.items(), key=lambda kv: -kv[1]):
        share = n / total
        value = share * args.us if args.us is not None else share
        out[name] = round(value, 2 if args.us is not None else 4)
        unit = "µs/msg" if args.us is not None else ""
        print(f"{100 * share:5.1f}%  {value:7.2f} {unit}  {name}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
