#!/usr/bin/env python3
"""The overload benchmark's plot, as an SVG; standard library only.

plot_overload.py ON.csv OFF.csv DEGRADE_FROM DEGRADE_TO OUT.svg

Top: each class's p99 latency (ms) per second, with overload protection
(solid) and without (dashed). Bottom: requests shed per second, by class,
with protection. The degraded period is shaded.
"""
import csv
import sys

COLORS = {"enterprise": "#1f77b4", "free": "#d62728"}


def load(path):
    series = {}
    for r in csv.DictReader(open(path)):
        series.setdefault(r["class"], []).append(
            (int(r["second"]), float(r["p99_ms"]), int(r["shed"])))
    return series


def panel(out, top, height, width, left, xmax, ymax, title, ylabel, lines, shade):
    def px(x):
        return left + width * x / xmax

    def py(y):
        return top + height * (1 - min(y, ymax) / ymax)

    a, b = shade
    out.append(f'<rect x="{px(a):.1f}" y="{top}" width="{px(b) - px(a):.1f}" height="{height}" fill="#f3e3c3"/>')
    out.append(f'<text x="{px(a) + 4:.1f}" y="{top + 14}" fill="#8a6d3b">upstream degraded</text>')
    out.append(f'<line x1="{left}" y1="{top + height}" x2="{left + width}" y2="{top + height}" stroke="black"/>')
    out.append(f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top + height}" stroke="black"/>')
    out.append(f'<text x="{left + width / 2}" y="{top - 8}" text-anchor="middle" font-size="14">{title}</text>')
    out.append(f'<text x="16" y="{top + height / 2}" transform="rotate(-90 16 {top + height / 2})" text-anchor="middle">{ylabel}</text>')
    for i in range(6):
        y = ymax * i / 5
        out.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.0f}</text>')
        out.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{left + width}" y2="{py(y):.1f}" stroke="#eee"/>')
    for s in range(0, int(xmax) + 1, 5):
        out.append(f'<text x="{px(s):.1f}" y="{top + height + 16}" text-anchor="middle">{s}</text>')
    for label, color, dash, points in lines:
        pts = " ".join(f"{px(x + 0.5):.1f},{py(y):.1f}" for x, y in points)
        extra = ' stroke-dasharray="6 4"' if dash else ""
        out.append(f'<polyline points="{pts}" fill="none" stroke="{color}" stroke-width="2"{extra}/>')
    x = left + 8
    for label, color, dash, _ in lines:
        extra = ' stroke-dasharray="6 4"' if dash else ""
        y = top + 30 + 16 * lines.index((label, color, dash, _))
        out.append(f'<line x1="{x + width - 230}" y1="{y - 4}" x2="{x + width - 205}" y2="{y - 4}" stroke="{color}" stroke-width="2"{extra}/>')
        out.append(f'<text x="{x + width - 200}" y="{y}">{label}</text>')


def main():
    on_path, off_path, a, b, dst = sys.argv[1:6]
    on, off = load(on_path), load(off_path)
    xmax = max(s for pts in on.values() for s, _, _ in pts) + 1
    w, left, width = 820, 70, 700
    p99max = max(p for d in (on, off) for pts in d.values() for _, p, _ in pts) * 1.1 or 1
    shedmax = max(1, max(sh for pts in on.values() for _, _, sh in pts)) * 1.1
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="600" font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>']
    lines = []
    for cls in ("enterprise", "free"):
        lines.append((f"{cls}, protection on", COLORS[cls], False, [(s, p) for s, p, _ in on.get(cls, [])]))
        lines.append((f"{cls}, protection off", COLORS[cls], True, [(s, p) for s, p, _ in off.get(cls, [])]))
    panel(out, 40, 280, width, left, xmax, p99max, "p99 latency of admitted requests, per second", "ms", lines, (float(a), float(b)))
    shed = [(f"{cls} shed/s (protection on)", COLORS[cls], False, [(s, sh) for s, _, sh in on.get(cls, [])])
            for cls in ("enterprise", "free")]
    panel(out, 370, 180, width, left, xmax, shedmax, "requests shed per second", "shed/s", shed, (float(a), float(b)))
    out.append(f'<text x="{left + width / 2}" y="590" text-anchor="middle">seconds</text>')
    out.append("</svg>")
    open(dst, "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
