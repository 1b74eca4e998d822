#!/usr/bin/env python3
"""plot_table.py: a grouped bar chart (SVG, no dependencies) of a table in a
Markdown page, so that a plot shows exactly the figures the page prints.

    contrib/bench/plot_table.py docs/benchmarks.md fuse-scale \\
        "objfs GB/s" "curl GB/s" "rclone 1.60 GB/s" > docs/benchmarks-fuse-scale.svg

The table is the first one after the line `<!-- plot: NAME -->`. Rows whose
first cell is a number are the groups (x axis); the named columns are the
bars; an empty cell draws no bar.
"""
import sys

COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd"]


def read_table(path, name):
    lines = open(path, encoding="utf-8").read().splitlines()
    start = lines.index("<!-- plot: %s -->" % name) + 1
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            if rows:
                break
            continue
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[0], [r for r in rows[2:] if r[0].replace(",", "").isdigit()]


def number(cell):
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return None


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    path, name, cols = sys.argv[1], sys.argv[2], sys.argv[3:]
    head, rows = read_table(path, name)
    idx = [head.index(c) for c in cols]
    vmax = max(number(r[i]) or 0 for r in rows for i in idx)
    w, h, left, bottom, top = 640, 320, 50, 40, 40
    pw, ph = w - left - 10, h - bottom - top
    gw = pw / len(rows)
    bw = gw * 0.8 / len(cols)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="12">' % (w, h),
           '<rect width="100%" height="100%" fill="white"/>']
    step = 10 if vmax > 20 else 5 if vmax > 5 else 1
    y = 0
    while y <= vmax:
        py = top + ph - ph * y / vmax
        out.append('<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#ddd"/>'
                   % (left, w - 10, py, py))
        out.append('<text x="%d" y="%.1f" text-anchor="end">%g</text>'
                   % (left - 4, py + 4, y))
        y += step
    for g, r in enumerate(rows):
        x0 = left + g * gw + gw * 0.1
        for k, i in enumerate(idx):
            v = number(r[i])
            if v is None:
                continue
            bh = ph * v / vmax
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s">'
                       '<title>%s: %s</title></rect>'
                       % (x0 + k * bw, top + ph - bh, bw - 1, bh,
                          COLOURS[k % len(COLOURS)], cols[k], r[i]))
        out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>'
                   % (left + g * gw + gw / 2, top + ph + 16, r[0]))
    out.append('<text x="%.1f" y="%d" text-anchor="middle">%s</text>'
               % (left + pw / 2, h - 6, head[0]))
    for k, c in enumerate(cols):
        out.append('<rect x="%d" y="12" width="10" height="10" fill="%s"/>'
                   '<text x="%d" y="21">%s</text>'
                   % (left + k * 150, COLOURS[k % len(COLOURS)], left + k * 150 + 14, c))
    out.append("</svg>")
    print("\n".join(out))


if __name__ == "__main__":
    main()
