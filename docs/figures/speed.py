"""Draw the headline speed figure (``docs/img/speed.png``) from ``docs/figures/speed.csv``.

``make docs`` runs it before building the site; README and the speed page show the picture, and their
tables come from the same file (the site's by ``docs/hooks/generated.py``, README's checked by
``tests/test_docs.py``). Each row is ppo_dict's throughput over sb3's, the median of interleaved rounds
with their range; the rows and their runs are in perf_log.md.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "img" / "speed.png"


def draw(rows: list[dict[str, str]], out: Path) -> None:
    machines = list(dict.fromkeys(row["where"] for row in rows))
    colours = dict(zip(machines, ("#3b6ea8", "#d08b2c", "#5a9e5a", "#8c5aa8")))
    fig, ax = plt.subplots(figsize=(9, 0.42 * len(rows) + 1.9), dpi=110)
    y = list(range(len(rows)))[::-1]
    for yi, row in zip(y, rows):
        ratio, low, high = float(row["ratio"]), float(row["low"]), float(row["high"])
        ax.barh(yi, ratio, color=colours[row["where"]], height=0.62)
        ax.errorbar(ratio, yi, xerr=[[ratio - low], [high - ratio]], color="#222222", capsize=3, linewidth=1)
        ax.text(high + 0.04, yi, f"{ratio:.2f}x", va="center", fontsize=9)
    ax.axvline(1.0, color="#aa2222", linestyle="--", linewidth=1)
    ax.text(1.0, len(rows) - 0.35, " sb3 = 1", color="#aa2222", fontsize=9, va="bottom")
    ax.set_yticks(y)
    ax.set_yticklabels([row["workload"] for row in rows], fontsize=9)
    ax.set_xlim(0, max(float(row["high"]) for row in rows) + 0.45)
    ax.set_ylim(-0.6, len(rows) - 0.1)
    ax.set_xlabel("throughput, ppo_dict / sb3 (median of interleaved rounds; bars: the range)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=colours[m]) for m in machines]
    fig.legend(handles, machines, loc="lower center", ncol=len(machines), fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    # no timestamp or version in the file: the same rows give the same bytes
    fig.savefig(out, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str]) -> int:
    with open(HERE / "speed.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    out = Path(argv[0]) if argv else OUT
    draw(rows, out)
    print(f"wrote {out} ({len(rows)} rows of {HERE / 'speed.csv'})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
