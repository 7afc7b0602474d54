"""Wheels for a GPU machine that reaches no package index: this project's runtime dependencies, and theirs,
at the versions installed here, for CPython 3.12 on x86-64 Linux, into .whl/ (ignored by git). Packages a
machine with PyTorch already holds (torch, torchvision, numpy, Pillow, ..., see PRESENT) are left out; so is
what `--skip` names. benchmarks/gpu_report.py says how the machine installs them.

    .venv/bin/python scripts/gpu_wheels.py [--skip NAME ...]
"""

import argparse
import subprocess
import sys
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
PRESENT = {
    canonicalize_name(name)
    for name in (
        "torch torchvision triton numpy scipy pillow pyarrow timm safetensors huggingface-hub pyyaml httpx "
        "httpcore h11 anyio idna certifi jinja2 markupsafe rich typer click prometheus-client fsspec "
        "packaging filelock tqdm requests urllib3 charset-normalizer typing-extensions setuptools aiohttp "
        "aiohappyeyeballs aiosignal attrs frozenlist multidict propcache yarl uvloop wrapt cloudpickle "
        "joblib regex six python-dateutil"
    ).split()
}
"""What an image with PyTorch and timm holds: the heavy packages, and those seen on the project's GPU
machine."""
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"]


def closure(requirements: list[str], present: set[str]) -> dict[str, str]:
    """name -> installed version of what `requirements` need on Python 3.12, and what that needs in turn
    (markers evaluated there, extras followed), not looking into what the machine already has."""
    environment = default_environment() | {"python_version": "3.12", "python_full_version": "3.12.3"}
    found: dict[str, str] = {}
    pending = [(Requirement(text), "") for text in requirements]
    while pending:
        requirement, extra = pending.pop()
        name = canonicalize_name(requirement.name)
        if requirement.marker is not None and not requirement.marker.evaluate(environment | {"extra": extra}):
            continue
        if name in present or (name in found and not requirement.extras):
            continue
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:  # needed on 3.12 only: the machine's pip will say
            print(f"not installed here: {requirement}", file=sys.stderr)
            continue
        for wanted in requirement.extras | {""}:
            pending += [(Requirement(text), wanted) for text in metadata.requires(name) or []]
    return found


def main() -> None:
    """Download the wheels of the closure less what the machine has."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--skip", nargs="*", default=[], help="more packages the machine already has")
    args = parser.parse_args()
    skip = PRESENT | {canonicalize_name(name) for name in args.skip}
    wanted = closure(metadata.requires("mad-arena") or [], skip)
    target = ROOT / ".whl"
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-d", str(target)]
    command += ["--python-version", "3.12", "--implementation", "cp"]
    command += [option for platform in PLATFORMS for option in ("--platform", platform)]
    subprocess.run(
        [*command, *(f"{name}=={version}" for name, version in sorted(wanted.items()))], check=True
    )
    size = sum(path.stat().st_size for path in target.glob("*.whl"))
    print(f"{len(wanted)} packages, {size / 2**20:.1f} MiB in {target}")


if __name__ == "__main__":
    main()
