"""`python -m snodo_guest.build APP -o OUT.wasm --wit SNODO_WIT`: builds a Snodo tool
component from the module APP (in the current directory) with componentize-py.

The WIT is assembled in a temporary directory: Snodo's packages (`--wit`, the `wit/` of a
Snodo checkout) and, when they can be found, the WASI 0.2 packages `wasi:http` needs, under
one world that includes `snodo:tasks/executor@0.5.0` and imports
`wasi:http/outgoing-handler` (so `snodo_guest.http` can send). The WASI packages come from
`--wasi-wit DIR`, `$SNODO_WASI_WIT`, the JavaScript SDK's jco package beside `--wit` when it
is installed, or the `wasip2` crate the Rust SDK beside `--wit` depends on (found with
`cargo metadata`). Without them the component is built against `executor` alone, and
`snodo_guest.http` refuses to send.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

WASI = "0.2.12"
WORLD = f"""package snodo:py-guest;

world tool {{
  include snodo:tasks/executor@0.5.0;
  import wasi:http/outgoing-handler@{WASI};
}}
"""


def wasi_wit(snodo_wit, given):
    """The directory holding WASI's packages as `*.wit` files or package directories."""
    for candidate in (given, os.environ.get("SNODO_WASI_WIT")):
        if candidate:
            return Path(candidate)
    checkout = Path(snodo_wit).resolve().parent
    # The same WASI release the JavaScript SDK's toolchain ships, when it is installed.
    jco = checkout / "guest-sdk-js" / "node_modules" / "@bytecodealliance" / "jco" / "lib" / "wit" / "builtin" / WASI
    if (jco / "wasi-http").is_dir():
        return jco
    manifest = checkout / "guest-sdk" / "Cargo.toml"
    if not manifest.is_file() or shutil.which("cargo") is None:
        return None
    try:
        out = subprocess.run(["cargo", "metadata", "--format-version", "1", "--manifest-path", str(manifest)],
                             capture_output=True, text=True, check=True).stdout
    except subprocess.CalledProcessError:
        return None
    for package in json.loads(out)["packages"]:
        if package["name"] == "wasip2":
            deps = Path(package["manifest_path"]).parent / "wit" / "deps"
            if deps.is_dir():
                return deps
    return None


def assemble(snodo_wit, wasi, into):
    """Writes the WIT to build against into `into`; returns the world's name."""
    snodo_wit = Path(snodo_wit)
    deps = into / "deps"
    shutil.copytree(snodo_wit / "deps", deps)
    (deps / "snodo-tasks").mkdir()
    for f in snodo_wit.glob("*.wit"):
        shutil.copy(f, deps / "snodo-tasks" / f.name)
    for entry in sorted(Path(wasi).iterdir()):
        target = deps / f"wasi-{entry.stem}"
        if entry.is_dir():
            shutil.copytree(entry, target)
        elif entry.suffix == ".wit":
            target.mkdir()
            shutil.copy(entry, target / entry.name)
    (into / "guest.wit").write_text(WORLD)
    return "tool"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m snodo_guest.build", description=__doc__.split("\n\n")[0])
    p.add_argument("app", help="the app's module name (app for app.py)")
    p.add_argument("-o", "--out", required=True, help="the component to write")
    p.add_argument("--wit", required=True, help="Snodo's WIT directory (wit/ in a Snodo checkout)")
    p.add_argument("--wasi-wit", help="WASI 0.2 WIT packages (default: found as described above)")
    p.add_argument("--componentize-py", default=os.environ.get("COMPONENTIZE_PY", "componentize-py"))
    args = p.parse_args(argv)
    sdk = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="snodo-py-build-") as tmp:
        wasi = wasi_wit(args.wit, args.wasi_wit)
        if wasi is None:
            print("snodo_guest.build: no WASI WIT found; building without outbound HTTP", file=sys.stderr)
            wit, world = args.wit, "executor"
        else:
            wit, world = Path(tmp) / "wit", None
            wit.mkdir()
            world = assemble(args.wit, wasi, wit)
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        run = subprocess.run([args.componentize_py, "-d", str(wit), "-w", world, "componentize", args.app,
                              "-p", str(sdk), "-p", ".", "-o", args.out], env=env)
    return run.returncode


if __name__ == "__main__":
    sys.exit(main())
