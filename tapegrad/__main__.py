"""``python -m tapegrad``: the package's command line.

``python -m tapegrad warmup`` compiles the common kernels into the cache (with a progress bar);
``python -m tapegrad warmup SCRIPT [ARGS...]`` compiles those a program of yours meets (run it
with a small number of steps); ``python -m tapegrad info`` says which kernels and cache this
machine uses.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tapegrad")
    sub = parser.add_subparsers(dest="command", required=True)
    w = sub.add_parser("warmup", help="compile kernels into the cache now, not on first use")
    w.add_argument("script", nargs="?", help="a program to run once with waiting compilation")
    w.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    sub.add_parser("info", help="which kernels, threads and cache folder this machine uses")
    ns = parser.parse_args(argv)
    if ns.command == "warmup":
        from ._warmup import warmup  # noqa: PLC0415  # lazy: after the environment is set

        warmup(ns.script, ns.args)
        return 0
    from . import _kernels  # noqa: PLC0415  # lazy: after the environment is set
    from ._kernels import runtime  # noqa: PLC0415  # lazy: after the environment is set

    print(f"kernels: {_kernels.selection()}")
    if _kernels.numba() is not None:
        print(f"compilation: {runtime.mode()} (TAPEGRAD_COMPILE)")
        print(f"cache folder: {_kernels.cache_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
