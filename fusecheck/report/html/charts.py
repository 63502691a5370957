"""Inline SVG charts. Every chart has its axes: tick labels with their scale and a title on each axis, so a
24 000x gap never looks like 4x. Each `<svg>` carries `class="chart"` and `data-chart` (its kind) so that a
test can find them in the rendered page."""
from __future__ import annotations

import math

from fusecheck.report.html.page import COMPILED, EAGER, esc, g3, num

GRID, AXIS = "#eceff3", "#9aa3af"


def _open(kind: str, width: int, height: int) -> list[str]:
    return [f'<svg class="chart" data-chart="{kind}" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img">']


def _titles(x_title: str, y_title: str, left: int, top: int, w: float, h: float, height: int) -> str:
    out = ""
    if x_title:
        out += (f'<text class="axis-title" x="{left + w / 2:.1f}" y="{height - 3}" text-anchor="middle">'
                f'{esc(x_title)}</text>')
    if y_title:
        cy = top + h / 2
        out += (f'<text class="axis-title" x="11" y="{cy:.1f}" text-anchor="middle" '
                f'transform="rotate(-90 11 {cy:.1f})">{esc(y_title)}</text>')
    return out


def _decades(values: list[float]) -> tuple[float, float]:
    pos = [v for v in values if v is not None and v > 0 and math.isfinite(v)]
    if not pos:
        return -1.0, 1.0
    lo, hi = math.floor(math.log10(min(pos))), math.ceil(math.log10(max(pos)))
    return float(lo), float(hi if hi > lo else lo + 1)


def _decade_ticks(lo: float, hi: float, most: int = 7) -> list[int]:
    step = max(1, math.ceil((math.floor(hi) - math.ceil(lo) + 1) / most))
    return list(range(math.ceil(lo), math.floor(hi) + 1, step))


def _sci(d: int) -> str:
    return {0: "1", 1: "10", 2: "100", -1: "0.1", -2: "0.01"}.get(d, f"1e{d}")


def line_chart(series: list[tuple[str, str, list[float | None]]], labels: list[str], *, width: int = 360,
               height: int = 180, y_title: str = "", marks: list[str] | None = None, x_title: str = "",
               kind: str = "lines") -> str:
    """Lines on a log10 y axis over categorical x `labels`; `marks` colours the x labels (e.g. by verdict).
    Zeros and missing values leave a gap: a log axis has no place for them."""
    left, right, top, bottom = 62, 16, 10, 44 if x_title else 30
    w, h = width - left - right, height - top - bottom
    lo, hi = _decades([v for _, _, vals in series for v in vals if v is not None])
    lo, hi = lo - 0.2, hi + 0.1  # room for the points on the first and last decade
    n = max(1, len(labels) - 1)

    def x(i: int) -> float:
        return left + (w * i / n if len(labels) > 1 else w / 2)

    def y(v: float) -> float:
        return top + h * (hi - math.log10(v)) / (hi - lo)

    out = _open(kind, width, height)
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + h}" stroke="{AXIS}"/>'
               f'<line x1="{left}" x2="{left + w}" y1="{top + h}" y2="{top + h}" stroke="{AXIS}"/>')
    for d in _decade_ticks(lo, hi):
        yy = y(10.0 ** d)
        out.append(f'<line x1="{left}" x2="{left + w}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="{GRID}"/>'
                   f'<text class="tick" x="{left - 4}" y="{yy + 4:.1f}" text-anchor="end">{_sci(d)}</text>')
    every = max(1, math.ceil(len(labels) / max(1, w // 70)))
    for i, lab in enumerate(labels):
        if i % every == 0 or i == len(labels) - 1:
            color = f' style="fill:{marks[i]}"' if marks and marks[i] else ""
            anchor = "start" if i == 0 and len(labels) > 1 else "end" if i == len(labels) - 1 and i else "middle"
            out.append(f'<text class="tick" x="{x(i):.1f}" y="{top + h + 14}" text-anchor="{anchor}"{color}>'
                       f'<title>{esc(lab)}</title>{esc(lab if len(lab) <= 16 else "…" + lab[-15:])}</text>')
    out.append(_titles(x_title, y_title, left, top, w, h, height))
    for name, color, vals in series:
        segs, cur = [], []
        for i, v in enumerate(vals):
            if v is None or v <= 0 or not math.isfinite(v):
                if cur:
                    segs.append(cur)
                cur = []
                continue
            cur.append((x(i), y(v)))
        if cur:
            segs.append(cur)
        for seg in segs:
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" '
                       f'points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in seg)}"><title>{esc(name)}</title></polyline>')
            if len(labels) <= 60:
                out += [f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2.5" fill="{color}"/>' for a, b in seg]
    out.append("</svg>")
    return "".join(out)


def _times(r: float) -> str:
    """A ratio as a reader says it: 0.5×, 3.2×, 16 900×."""
    return f"{r:.2g}×" if r < 10 else f"{r:,.0f}×".replace(",", " ") if r < 1e7 else f"{r:.2g}×"


def ratio_chart(groups: list[tuple[str, float | None, float | None]], *, width: int = 360) -> str:
    """Per metric compiled ÷ eager on one log axis (1x: as accurate as eager), with both values written out:
    the bar's length is the gap in decades, so 24 000x is four decades, 2x a third of one."""
    left, right, top, row_h = 62, 86, 8, 22
    height = top + row_h * len(groups) + 40
    w = width - left - right
    ratios = []
    for _, e, c in groups:
        if e is not None and c is not None and math.isfinite(e) and math.isfinite(c) and e > 0 and c > 0:
            ratios.append(math.log10(c / e))
    lo = min([-1.0] + [math.floor(r) for r in ratios])
    hi = max([1.0] + [math.ceil(r) for r in ratios])
    lo, hi = max(lo, -6.0), min(hi, 12.0)

    def x(d: float) -> float:
        return left + w * (min(max(d, lo), hi) - lo) / (hi - lo)

    out = _open("ratios", width, height)
    bottom = top + row_h * len(groups)
    step = max(1, math.ceil((hi - lo + 1) / 6))   # ticks counted from 1x, so 1x is always labelled
    for d in [t for t in range(math.ceil(lo) - math.ceil(lo) % step, math.floor(hi) + 1, step) if t >= lo]:
        out.append(f'<line x1="{x(d):.1f}" x2="{x(d):.1f}" y1="{top}" y2="{bottom}" stroke="{GRID}"/>'
                   f'<text class="tick" x="{x(d):.1f}" y="{bottom + 13}" text-anchor="middle">{_sci(d)}×</text>')
    out.append(f'<line x1="{x(0):.1f}" x2="{x(0):.1f}" y1="{top - 2}" y2="{bottom}" stroke="#1d2330"/>'
               f'<line x1="{left}" x2="{left + w}" y1="{bottom}" y2="{bottom}" stroke="{AXIS}"/>')
    for k, (name, e, c) in enumerate(groups):
        y0 = top + k * row_h
        out.append(f'<text x="{left - 6}" y="{y0 + 15}" text-anchor="end">{esc(name)}</text>')
        tip = f"{name}: eager {g3(e)}, compiled {g3(c)}"
        if e is None or c is None or not (math.isfinite(e) and math.isfinite(c)):
            out.append(f'<text x="{x(0) + 4:.1f}" y="{y0 + 15}"><title>{esc(tip)}</title>'
                       f'eager {g3(e)} · compiled {g3(c)}</text>')
            continue
        if e == 0 or c == 0:
            text = "both exact" if e == c else ("eager exact, compiled not" if e == 0 else "compiled exact")
            d = 0.0 if e == c else (hi if e == 0 else lo)
        else:
            d = math.log10(c / e)
            text = _times(c / e)
        a, b = sorted((x(0), x(d)))
        color = COMPILED if d > 0 else EAGER
        out.append(f'<rect x="{a:.1f}" y="{y0 + 5}" width="{max(b - a, 1.5):.1f}" height="{row_h - 10}" '
                   f'fill="{color}" fill-opacity="0.8"><title>{esc(tip)}</title></rect>')
        out.append(f'<text x="{left + w + 6}" y="{y0 + 15}" style="fill:#1d2330">'
                   f'<title>{esc(tip)}</title>{esc(text)}</text>')
    out.append(_titles("compiled ÷ eager against the golden (log scale)", "", left, top, w, 0, height))
    out.append("</svg>")
    return "".join(out)


def octave_chart(octaves: dict, *, width: int = 360, height: int = 210) -> str:
    """The verdict's own per-magnitude data: for each binary octave of |golden|, eager's and compiled's largest
    |error| relative to the octave (log y) and, as grey bars on the right axis, how many elements it holds."""
    base = int(octaves.get("base") or 0)
    eager = {int(i): (int(n), num(m)) for i, n, m in octaves.get("eager") or []}
    comp = {int(i): (int(n), num(m)) for i, n, m in octaves.get("compiled") or []}
    idx = sorted(set(eager) | set(comp))
    if not idx:
        return '<p class="msg">no element above the small-value threshold: judged by absolute error only</p>'
    idx = list(range(idx[0], idx[-1] + 1))
    left, right, top, bottom = 62, 40, 10, 44
    w, h = width - left - right, height - top - bottom
    series = []
    for color, data in ((EAGER, eager), (COMPILED, comp)):
        vals = []
        for i in idx:
            m = data.get(i, (0, None))[1]
            vals.append(None if m is None else m / math.ldexp(1.0, base + i))
        series.append((color, vals))
    lo, hi = _decades([v for _, vals in series for v in vals if v])
    lo, hi = lo - 0.2, hi + 0.1
    slot = w / len(idx)
    counts = [max(eager.get(i, (0, 0))[0], comp.get(i, (0, 0))[0]) for i in idx]
    peak = max(counts) or 1

    def xc(k: int) -> float:
        return left + slot * (k + 0.5)

    def y(v: float) -> float:
        return top + h * (hi - math.log10(v)) / (hi - lo)

    out = _open("octaves", width, height)
    for k, n in enumerate(counts):
        bh = h * n / peak
        out.append(f'<rect x="{left + slot * k + 1:.1f}" y="{top + h - bh:.1f}" width="{max(slot - 2, 1):.1f}" '
                   f'height="{bh:.1f}" fill="#dfe3e8"><title>{n} elements with |golden| in '
                   f'[2^{base + idx[k]}, 2^{base + idx[k] + 1})</title></rect>')
    out.append(f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + h}" stroke="{AXIS}"/>'
               f'<line x1="{left}" x2="{left + w}" y1="{top + h}" y2="{top + h}" stroke="{AXIS}"/>'
               f'<line x1="{left + w}" x2="{left + w}" y1="{top}" y2="{top + h}" stroke="#dfe3e8"/>'
               f'<text class="tick" x="{left + w + 3}" y="{top + 9}">{peak}</text>'
               f'<text class="tick" x="{left + w + 3}" y="{top + h}">0</text>'
               f'<text class="axis-title" x="{width - 8}" y="{top + h / 2:.1f}" text-anchor="middle" '
               f'transform="rotate(-90 {width - 8} {top + h / 2:.1f})">elements</text>')
    for d in _decade_ticks(lo, hi, 6):
        yy = y(10.0 ** d)
        out.append(f'<line x1="{left}" x2="{left + w}" y1="{yy:.1f}" y2="{yy:.1f}" stroke="{GRID}"/>'
                   f'<text class="tick" x="{left - 4}" y="{yy + 4:.1f}" text-anchor="end">{_sci(d)}</text>')
    every = max(1, math.ceil(len(idx) / 7))
    for k, i in enumerate(idx):
        if k % every == 0:
            out.append(f'<text class="tick" x="{xc(k):.1f}" y="{top + h + 13}" text-anchor="middle">'
                       f'2^{base + i}</text>')
    for color, vals in series:
        pts = [(xc(k), y(v)) for k, v in enumerate(vals) if v and math.isfinite(v)]
        if len(pts) > 1:
            out.append(f'<polyline fill="none" stroke="{color}" stroke-width="2" '
                       f'points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in pts)}"/>')
        out += [f'<circle cx="{a:.1f}" cy="{b:.1f}" r="2.5" fill="{color}"/>' for a, b in pts]
    out.append(_titles("|golden|, binary octave", "max |error| / 2^e", left, top, w, h, height))
    out.append("</svg>")
    return "".join(out)


def histogram_chart(eager: dict, compiled: dict, *, width: int = 360, height: int = 170) -> str:
    """Both histograms of log10 |err| (a row "distribution") as step outlines over the same fixed bins."""
    lo, hi, step = eager["log10_bins"]
    ce, cc = eager["counts"][1:-1], compiled["counts"][1:-1]
    used = [i for i, (a, b) in enumerate(zip(ce, cc)) if a or b]
    if not used:
        return '<p class="msg">every error is below 1e-16 (or zero)</p>'
    first, last = max(0, used[0] - 1), min(len(ce) - 1, used[-1] + 1)
    left, right, top, bottom = 62, 10, 8, 44
    w, h = width - left - right, height - top - bottom
    ne, nc = max(1, sum(eager["counts"])), max(1, sum(compiled["counts"]))
    peak = max(max(a / ne for a in ce), max(b / nc for b in cc)) or 1.0
    bins = last - first + 1

    def x(i: float) -> float:
        return left + w * (i - first) / bins

    out = _open("histogram", width, height)
    out.append(f'<line x1="{left}" x2="{left + w}" y1="{top + h}" y2="{top + h}" stroke="{AXIS}"/>'
               f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + h}" stroke="{AXIS}"/>'
               f'<text class="tick" x="{left - 4}" y="{top + 8}" text-anchor="end">{peak:.0%}</text>'
               f'<text class="tick" x="{left - 4}" y="{top + h}" text-anchor="end">0</text>')
    for i in range(first, last + 2):
        d = lo + i * step
        if d == int(d) and (int(d) % max(1, math.ceil(bins * step / 7)) == 0):
            out.append(f'<text class="tick" x="{x(i):.1f}" y="{top + h + 13}" text-anchor="middle">1e{int(d)}</text>')
    for counts, total, color in ((ce, ne, EAGER), (cc, nc, COMPILED)):
        pts = [f"{x(first):.1f},{top + h}"]
        for i in range(first, last + 1):
            yy = top + h - h * (counts[i] / total) / peak
            pts += [f"{x(i):.1f},{yy:.1f}", f"{x(i + 1):.1f},{yy:.1f}"]
        pts.append(f"{x(last + 1):.1f},{top + h}")
        out.append(f'<polyline fill="{color}" fill-opacity="0.18" stroke="{color}" stroke-width="1.5" '
                   f'points="{" ".join(pts)}"/>')
    out.append(_titles("|error| against the golden (log scale)", "elements", left, top, w, h, height))
    out.append("</svg>")
    return "".join(out)
