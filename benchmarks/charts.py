"""The handbook's charts of recorded runs, and the fonts their Chinese twins need.

    python benchmarks/charts.py METRICS_JSONL PNG TITLE [--language zh]

draws a run's reward curve (``critic/score/mean`` and ``reward/exact_match`` per step,
read from the ``metrics.jsonl`` that ``python -m reference_impl.rlhf`` writes) into
``PNG``. The library (``reference_impl``) only logs metrics; what the pages show is drawn
here, from the records in ``benchmarks/results/`` (``nox -s records -- NAME``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import font_manager  # noqa: E402

# Run as a script, this folder is on sys.path, not the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from reference_impl.rlhf.metrics import read_metrics  # noqa: E402

# Fonts with Han glyphs, the first one installed is used for Chinese labels.
CJK_FONTS = ("WenQuanYi Zen Hei", "Noto Sans CJK SC", "Source Han Sans SC", "SimHei")


def chinese_font_rc() -> dict[str, object]:
    """matplotlib settings that draw text with the first installed font of :data:`CJK_FONTS`.

    Raises:
        RuntimeError: when none of those fonts is installed.
    """
    installed = {font.name for font in font_manager.fontManager.ttflist}
    cjk = [name for name in CJK_FONTS if name in installed]
    if not cjk:
        raise RuntimeError(
            f"no font with Chinese glyphs: install one of {CJK_FONTS} "
            "(e.g. apt-get install fonts-wqy-zenhei)"
        )
    return {"font.family": "sans-serif", "font.sans-serif": [cjk[0], "DejaVu Sans"]}


def plot_reward_curve(path: str, out_png: str, title: str, language: str = "en") -> None:
    """Plot ``critic/score/mean`` and exact-match accuracy against the step into ``out_png``.

    ``path`` is a run's ``metrics.jsonl``; its step 0 (the format warm-up, no score) is
    left out. ``language="zh"`` labels the axis in Chinese (the metric names stay as they
    are logged) with the first installed font of :data:`CJK_FONTS`.

    Raises:
        RuntimeError: for ``language="zh"`` when none of those fonts is installed.
        ValueError: a line of ``path`` is not JSON (see ``read_metrics``).
    """
    fonts = chinese_font_rc() if language == "zh" else {}
    rows = [r for r in read_metrics(path) if "critic/score/mean" in r]
    steps = [r["step"] for r in rows]
    with matplotlib.rc_context(fonts):
        fig, ax = plt.subplots(figsize=(6, 3.5), dpi=100)
        ax.plot(steps, [r["critic/score/mean"] for r in rows], label="critic/score/mean")
        ax.plot(steps, [r["reward/exact_match"] for r in rows], label="reward/exact_match")
        ax.set_xlabel("训练步" if language == "zh" else "step")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right")
        ax.set_title(title)
        fig.tight_layout()
        fig.savefig(out_png)
        plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Draw a run's reward curve from metrics.jsonl.")
    parser.add_argument("metrics", help="a run's metrics.jsonl")
    parser.add_argument("png", help="the PNG to write")
    parser.add_argument("title")
    parser.add_argument("--language", choices=("en", "zh"), default="en")
    args = parser.parse_args(argv)
    plot_reward_curve(args.metrics, args.png, args.title, language=args.language)
    print(f"reward curve: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
