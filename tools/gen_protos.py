"""Regenerate the committed protobuf/gRPC modules from daemons/spur_hpc/proto/*.proto.

Run: python tools/gen_protos.py [--check]. With --check it exits 1 when the committed files drift. Without it,
it also runs tools/gen_module_utils.py, whose copies include slurm.proto's text for the Ansible modules
(collection/plugins/module_utils/spur_slurm_proto.py): commit that file with the generated modules.
"""

import argparse
import pathlib
import shutil
import subprocess
import sys
import tempfile

from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parents[1] / "daemons"
PROTO_DIR = ROOT / "spur_hpc" / "proto"
PROTOS = ["slurm.proto", "raft_internal.proto"]


def generate(out_dir: pathlib.Path) -> list[pathlib.Path]:
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    args = ["protoc", f"-I{ROOT}", f"-I{include}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}"]
    args += [f"spur_hpc/proto/{name}" for name in PROTOS]
    if protoc.main(args) != 0:
        sys.exit("protoc failed")
    return sorted((out_dir / "spur_hpc" / "proto").glob("*_pb2*.py"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare with the committed files, write nothing")
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        drift = []
        for generated in generate(pathlib.Path(tmp)):
            target = PROTO_DIR / generated.name
            if opts.check:
                if not target.exists() or target.read_bytes() != generated.read_bytes():
                    drift.append(target.name)
            else:
                shutil.copyfile(generated, target)
        if drift:
            print(
                "generated protobuf modules drift from the .proto files: "
                + ", ".join(drift)
                + "; run: python tools/gen_protos.py",
                file=sys.stderr,
            )
            return 1
    if not opts.check:
        return subprocess.run([sys.executable, str(ROOT.parent / "tools" / "gen_module_utils.py")]).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
