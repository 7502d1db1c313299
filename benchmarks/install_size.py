"""What the capture-only core install saves an agent's environment: installed size and start-up time.

Builds two fresh venvs from this checkout (packages from the index, as a user gets them):

- ``core``: ``pip install tracerl openai``, what an agent's environment gets now;
- ``before``: ``pip install 'tracerl[collector,pipeline]' openai pydantic``, the same set of
  packages as the core install brought before it was split by role.

and prints, side by side: site-packages size, and the wall time of an agent process with
capture on (``tracerl run -- python -c 'import openai'``: the launcher and the agent), and of
the agent process alone with the capture environment set, median of ``--repeat`` runs.

    python benchmarks/install_size.py
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from tracerl_testing.installs import AGENT_MODULES_ABSENT, importable, install_venv

from tracerl.schemas import environment as E

VENVS = {"before": ("tracerl[collector,pipeline]", "openai", "pydantic"), "core": ("tracerl", "openai")}
AGENT = "import openai, tracerl; tracerl.instrument()"


def folder_mib(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file() and not f.is_symlink()) / 2**20


def median_seconds(command: list[str], env: dict[str, str], repeat: int, cwd: Path) -> float:
    """Run outside the checkout: under ``python -c`` its tracerl/ folder would shadow the installed package."""
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run(command, env=env, check=True, capture_output=True, timeout=120, cwd=cwd)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--out", type=Path, default=None, help="where the venvs go (default: a temporary folder)")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="tracerl-install-size-"))
    figures = {}
    for name, requirements in VENVS.items():
        print(f"building {name}: pip install {' '.join(requirements)}", flush=True)
        python = install_venv(out / name, *requirements)
        data = out / f"{name}-data"
        env = {**os.environ, E.DATA_DIR_ENV: str(data)}
        launcher = [str(python.parent / "tracerl"), "run", "--", str(python), "-c", AGENT]
        agent = [str(python), "-c", AGENT]
        site = next((out / name / "lib").glob("python3*/site-packages"))
        figures[name] = {
            "MiB": folder_mib(site),
            "other parts": len(importable(python, AGENT_MODULES_ABSENT)),
            "tracerl run": median_seconds(launcher, env, args.repeat, out),
            "agent": median_seconds(agent, env, args.repeat, out),
        }
    print(f"\n| install | site-packages MiB | other parts' modules present (of {len(AGENT_MODULES_ABSENT)}) | `tracerl run` + agent, s | agent alone, s |")
    print("|---|---|---|---|---|")
    for name, f in figures.items():
        print(f"| {name} | {f['MiB']:.0f} | {f['other parts']} | {f['tracerl run']:.2f} | {f['agent']:.2f} |")
    before, core = figures["before"], figures["core"]
    print(f"\ncore / before: size {core['MiB'] / before['MiB']:.2f}x, tracerl run {core['tracerl run'] / before['tracerl run']:.2f}x, "
          f"agent alone {core['agent'] / before['agent']:.2f}x   (median of {args.repeat}; venvs in {out})")


if __name__ == "__main__":
    main()
