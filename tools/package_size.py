"""Print tapegrad's size in lines, per folder (``make lint`` runs it).

    python tools/package_size.py
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "tapegrad"


def sizes(root: Path = ROOT) -> dict[str, int]:
    """Lines of the ``*.py`` files directly in each folder of the package, by folder."""
    out: dict[str, int] = {}
    for p in sorted(root.rglob("*.py")):
        folder = p.parent.relative_to(root.parent).as_posix()
        out[folder] = out.get(folder, 0) + len(p.read_text().splitlines())
    return out


def main() -> None:
    s = sizes()
    for folder, n in s.items():
        print(f"{folder:<24} {n:>6} lines")
    print(f"{'package':<24} {sum(s.values()):>6} lines")


if __name__ == "__main__":
    main()
