"""Generate Python code from every ``.proto`` in the repository, or check it is fresh.

Usage: ``gen_proto.py OUT_ROOT`` writes generated files next to their .proto under OUT_ROOT;
``gen_proto.py OUT_ROOT --check REPO_ROOT`` generates into OUT_ROOT and fails if any committed
generated file in REPO_ROOT differs.
"""

from __future__ import annotations

import filecmp
import pathlib
import re
import sys

from grpc_tools import protoc

PROTOS = [
    # (folder holding the .proto, whether it defines gRPC services)
    ("bookie/proto", True),
    ("client/protocol/proto", False),
]


def generate(out_root: pathlib.Path) -> list[pathlib.Path]:
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    produced: list[pathlib.Path] = []
    for folder, grpc in PROTOS:
        src = pathlib.Path(folder)
        for proto in sorted(src.glob("*.proto")):
            out = out_root / folder
            out.mkdir(parents=True, exist_ok=True)
            args = [
                "protoc",
                f"-I{src}",
                f"-I{include}",
                f"--python_out={out}",
                f"--pyi_out={out}",
            ]
            if grpc:
                args.append(f"--grpc_python_out={out}")
            args.append(str(proto))
            if protoc.main(args) != 0:
                raise SystemExit(f"protoc failed for {proto}")
            stem = proto.stem
            siblings = [p.stem for p in src.glob("*.proto")]
            for suffix in ("_pb2.py", "_pb2.pyi") + (("_pb2_grpc.py",) if grpc else ()):
                path = out / f"{stem}{suffix}"
                # protoc emits absolute imports of the folder's other modules (a service's
                # messages, a .proto importing another); make them package-relative.
                text = path.read_text()
                for other in siblings:
                    text = re.sub(
                        rf"^import {other}_pb2 as",
                        f"from . import {other}_pb2 as",
                        text,
                        flags=re.M,
                    )
                path.write_text(text)
                produced.append(path.relative_to(out_root))
    return produced


def main(argv: list[str]) -> int:
    out_root = pathlib.Path(argv[1])
    produced = generate(out_root)
    if len(argv) >= 4 and argv[2] == "--check":
        repo = pathlib.Path(argv[3])
        stale = [
            p
            for p in produced
            if not (repo / p).exists() or not filecmp.cmp(out_root / p, repo / p, shallow=False)
        ]
        if stale:
            print("generated code is stale; run `make proto`:", *map(str, stale), sep="\n  ")
            return 1
        print(f"generated code is fresh ({len(produced)} files)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
