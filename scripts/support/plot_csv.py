#!/usr/bin/env python3
"""A small SVG line plot of two columns of a CSV, with a second series on
the right axis; standard library only.

plot_csv.py IN.csv OUT.svg TITLE X_COLUMN Y_COLUMN [Y2_COLUMN]
"""
import csv
import sys

def main():
    src, dst, title, xcol, ycol = sys.argv[1:6]
    y2col = sys.argv[6] if len(sys.argv) > 6 else None
    rows = list(csv.DictReader(open(src)))
    xs = [float(r[xcol]) for r in rows]
    ys = [float(r[ycol]) for r in rows]
    y2s = [float(r[y2col]) for r in rows] if y2col else []
    w, h, left, right, top, bottom = 760, 360, 70, 90, 40, 50
    pw, ph = w - left - right, h - top - bottom
    xmax = max(xs) or 1
    ymax = (max(ys) or 1) * 1.1
    y2max = (max(y2s) or 1) * 1.1 if y2s else 1
    def px(x): return left + pw * x / xmax
    def py(y, m): return top + ph * (1 - y / m)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w/2}" y="22" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{left}" y1="{top+ph}" x2="{left+pw}" y2="{top+ph}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{top+ph}" stroke="black"/>']
    for i in range(6):
        y = ymax * i / 5
        out.append(f'<text x="{left-6}" y="{py(y, ymax)+4}" text-anchor="end">{y/1024:.0f} MiB</text>')
        out.append(f'<line x1="{left}" y1="{py(y, ymax)}" x2="{left+pw}" y2="{py(y, ymax)}" stroke="#ddd"/>')
        x = xmax * i / 5
        out.append(f'<text x="{px(x)}" y="{top+ph+18}" text-anchor="middle">{x:.0f} s</text>')
    pts = " ".join(f"{px(x):.1f},{py(y, ymax):.1f}" for x, y in zip(xs, ys))
    out.append(f'<polyline points="{pts}" fill="none" stroke="#1f77b4" stroke-width="2"/>')
    out.append(f'<text x="{left+8}" y="{top+14}" fill="#1f77b4">{ycol}</text>')
    if y2s:
        pts = " ".join(f"{px(x):.1f},{py(y, y2max):.1f}" for x, y in zip(xs, y2s))
        out.append(f'<polyline points="{pts}" fill="none" stroke="#ff7f0e" stroke-width="1.5" stroke-dasharray="4 3"/>')
        out.append(f'<line x1="{left+pw}" y1="{top}" x2="{left+pw}" y2="{top+ph}" stroke="black"/>')
        for i in range(6):
            y = y2max * i / 5
            out.append(f'<text x="{left+pw+6}" y="{py(y, y2max)+4}">{y/1e6:.1f} M</text>')
        out.append(f'<text x="{left+pw-8}" y="{top+14}" text-anchor="end" fill="#ff7f0e">{y2col} (right)</text>')
    out.append(f'<text x="{w/2}" y="{h-8}" text-anchor="middle">{xcol}</text>')
    out.append('</svg>')
    open(dst, "w").write("\n".join(out))

main()
