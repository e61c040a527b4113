"""The report's figures: a log-log roofline per device against the run's measured ceilings, and
achieved bandwidth against context length for the uniform-length decode shapes."""
from __future__ import annotations

import math
from pathlib import Path

from .benchjson import BenchRun
from .metrics import Metrics, metrics_for, si as _si


def _short(point: str) -> str:
    return point[4:] if point.startswith("cpu_") else point


def roofline_plottable(m: Metrics | None) -> bool:
    """Drawn on the roofline: measured against these ceilings (not a device kernel under host
    roofs) and timed with cold caches (a warm-cache point is not bounded by the DRAM roof)."""
    return bool(m and m.fps > 0 and m.ai > 0 and m.bw_roof is not None
                and m.case.counters.get("cold_cache", 1.0) != 0.0)


def _family(ceiling_key: str) -> str:
    """Which device a ceiling belongs to: the GPU probes are named gpu_*, the host ones are not."""
    return "gpu" if ceiling_key.startswith("gpu_") else "cpu"


def _ceilings_of(run: BenchRun, family: str, unit: str) -> list[str]:
    return [k for k, c in run.ceilings.items()
            if isinstance(c, dict) and c.get("unit") == unit and _family(k) == family and c.get("value")]


def roofline_groups(run: BenchRun) -> dict[str, list[Metrics]]:
    """Plottable metrics by the bandwidth roof that judges them (one roofline panel each)."""
    groups: dict[str, list[Metrics]] = {}
    for m in (metrics_for(run, c) for c in run.kernel_cases()):
        if roofline_plottable(m):
            groups.setdefault(run.kernels[m.case.kernel]["roof_bw"], []).append(m)
    return groups


# Offsets (points) tried around a marker for its label, nearest first: on each ring, right,
# above, left, below, then the diagonals and the directions between; the rings grow slowly so a
# crowded label moves only as far as it must (from _LEADER_FROM on, with a leader line).
_DIRECTIONS = ((1, 0.3), (0, 1), (-1, 0.3), (0, -1.2), (1, 1), (-1, 1), (1, -1), (-1, -1),
               (1, 0.5), (1, -0.5), (-1, 0.5), (-1, -0.5), (0.5, 1), (-0.5, 1), (0.5, -1), (-0.5, -1))
_LABEL_OFFSETS = [(dx * r, dy * r) for r in (3, 7, 11, 16, 21, 27, 34, 42, 51, 61, 72, 84) for dx, dy in _DIRECTIONS]
_LEADER_FROM = 11


def label_box(t, renderer):
    """The box of a label's text alone, where the figure will draw it (an Annotation's own extent
    also spans its leader line, which may cross other labels; and until it is drawn or its
    positions updated, its text sits at the offset itself, not beside its point)."""
    from matplotlib.text import Annotation, Text
    if isinstance(t, Annotation):
        t.update_positions(renderer)
    return Text.get_window_extent(t, renderer)


def _overlap(b, others) -> float:
    return sum(max(0.0, min(b.x1, o.x1) - max(b.x0, o.x0)) * max(0.0, min(b.y1, o.y1) - max(b.y0, o.y0))
               for o in others)


def _segments_cross(p, q, r, s) -> bool:
    """Whether segments p-q and r-s cross (proper intersection; touching ends do not count)."""
    def side(a, b, c):
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
    return side(p, q, r) * side(p, q, s) < 0 and side(r, s, p) * side(r, s, q) < 0


def _segment_hits_box(seg, b) -> bool:
    (x0, y0), (x1, y1) = seg
    return any(b.x0 < x0 + (x1 - x0) * t < b.x1 and b.y0 < y0 + (y1 - y0) * t < b.y1
               for t in (i / 16 for i in range(17)))


def place_labels(ax, renderer, items, fontsize=6, obstacles=()):
    """items: [(x, y, text, colour)] in data coordinates; obstacles: display-coordinate boxes a
    label should not cover (the markers, the legend, the key). Each label takes the first offset
    around its marker (nearest first) that overlaps no label placed before it (greedy, in drawing
    order) and costs nothing else; failing that, the offset overlapping labels least, then costing
    least, where a leader line crossing another leader or a label, and a label covering a leader,
    costs one and covering an obstacle or leaving the axes costs its area in markers. Labels never
    give way to anything else at the price of covering another label. Returns the Text artists
    (gid "point-label").

    Why: the points of one kernel sit close together on a log-log roofline (the same shapes at
    other lengths, or one arithmetic intensity for every length), and labels written at a fixed
    offset land on top of each other and of the markers.

    A label's box at an offset is computed from its measured size (the alignment puts a corner
    of the box at the offset), padded by a pixel; the label placed is measured again."""
    from matplotlib.transforms import Bbox
    placed, boxes, leaders = [], [], []
    obstacles = list(obstacles)
    frame = ax.get_window_extent(renderer)
    px_per_pt = ax.figure.dpi / 72
    unit = (math.sqrt(_MARKER_AREA) * px_per_pt) ** 2

    def outside(b):
        inside = max(0.0, min(b.x1, frame.x1) - max(b.x0, frame.x0)) * max(0.0, min(b.y1, frame.y1) - max(b.y0, frame.y0))
        return b.width * b.height - inside

    for x, y, text, colour in items:
        probe = ax.annotate(text, (x, y), xytext=(0, 0), textcoords="offset points", fontsize=fontsize)
        w, h = label_box(probe, renderer).size
        probe.remove()
        px, py = ax.transData.transform((x, y))
        best = None
        for off in _LABEL_OFFSETS:
            tx, ty = px + off[0] * px_per_pt, py + off[1] * px_per_pt
            b = Bbox.from_bounds((tx if off[0] >= 0 else tx - w) - 1, (ty if off[1] >= 0 else ty - h) - 1, w + 2, h + 2)
            seg = ((px, py), (tx, ty)) if max(abs(off[0]), abs(off[1])) >= _LEADER_FROM else None
            tangles = sum(_segment_hits_box(lead, b) for lead in leaders)
            if seg:
                tangles += sum(_segments_cross(*seg, *lead) for lead in leaders)
                tangles += sum(_segment_hits_box(seg, o) for o in boxes)
            cost = (_overlap(b, boxes), tangles + (_overlap(b, obstacles) + outside(b)) / unit)
            if best is None or cost < best[0]:
                best = (cost, off, seg)
            if cost == (0.0, 0.0):
                break
        off, seg = best[1], best[2]
        t = ax.annotate(text, (x, y), xytext=off, textcoords="offset points", fontsize=fontsize,
                        color=colour, gid="point-label",
                        ha="left" if off[0] >= 0 else "right", va="bottom" if off[1] >= 0 else "top",
                        arrowprops=dict(arrowstyle="-", lw=0.3, color=colour, shrinkA=0, shrinkB=2)
                        if seg else None)
        placed.append(t)
        boxes.append(label_box(t, renderer))
        if seg:
            leaders.append(seg)
    return placed


def marker_boxes(ax, xy, size_pt2: float):
    """Display boxes of scatter markers of area `size_pt2` (points²) at data positions `xy`."""
    from matplotlib.transforms import Bbox
    r = math.sqrt(size_pt2) / 2 * ax.figure.dpi / 72
    return [Bbox.from_extents(px - r, py - r, px + r, py + r) for px, py in ax.transData.transform(list(xy))]


def point_numbers(run: BenchRun, metrics) -> dict[str, int]:
    """A short number per benchmark point drawn (in the run's point order), for labels that stay
    small; the figure's key spells each one out."""
    drawn = {m.case.point or "" for m in metrics}
    order = [p for p in run.points if p in drawn] + sorted(p for p in drawn if p not in run.points)
    return {p: i + 1 for i, p in enumerate(order)}


_MARKERS = ["o", "s", "^", "D", "v", "P", "X", "*"]
_MARKER_AREA = 28  # points², the roofline's scatter size


def kernel_styles(run: BenchRun) -> dict[str, tuple[tuple[float, float, float, float], str]]:
    """kernel -> (colour, marker), the same in every figure of the report.

    Assigned over the sorted names of every kernel the run's registry lists (measured or not),
    plus any measured kernel the registry lacks: a kernel keeps its colour whichever of the
    others ran or were plotted, and runs of one build colour their kernels alike. tab10 while
    the kernels fit in it, else tab20 (qualitative colormaps: no colour reads as "more")."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    names = sorted(set(run.kernels) | {c.kernel for c in run.kernel_cases() if c.kernel})
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    return {k: (cmap(i % cmap.N), _MARKERS[i % len(_MARKERS)]) for i, k in enumerate(names)}


def plot_roofline(run: BenchRun, path: str | Path) -> None:
    """The roofline figure (draw_roofline), written to `path`."""
    import matplotlib.pyplot as plt
    fig = draw_roofline(run)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    plt.close(fig)


def draw_roofline(run: BenchRun):
    """One log-log panel per device (grouped by the bandwidth roof that judges the kernels), with
    that device's measured roofs and one point per kernel x case: one colour and marker per kernel
    (the same in every panel), each point labelled with its number, placed so that no two labels
    overlap, and a key of the numbers beside each panel."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = roofline_groups(run)
    if not groups:  # still a valid figure: the roofs alone
        groups = {"read_bw": []} if "read_bw" in run.ceilings else {}
    fig, axes = plt.subplots(1, max(len(groups), 1), figsize=(11 * max(len(groups), 1), 7.5), squeeze=False)
    style = kernel_styles(run)
    renderer = fig.canvas.get_renderer()
    line_styles = ["-", "-.", "--", ":", (0, (3, 1, 1, 1))]
    for ax, (bw_key, gm) in zip(axes[0], groups.items()):
        fam = _family(bw_key)
        bw = run.ceiling_value(bw_key)
        own_peaks = list(dict.fromkeys(run.kernels[m.case.kernel]["roof_peak"] for m in gm))
        peaks = own_peaks + [k for k in _ceilings_of(run, fam, "FLOP/s") if k not in own_peaks]
        ais = [m.ai for m in gm] or [1.0]
        x_lo = 10 ** math.floor(math.log10(min(ais + [0.05]) / 2))
        x_hi = 10 ** math.ceil(math.log10(max(ais + [100.0]) * 2))
        xs = [x_lo * (x_hi / x_lo) ** (i / 200) for i in range(201)]
        top = max((run.ceiling_value(k) or 0) for k in peaks) if peaks else (bw or 1) * x_hi
        for i, pk in enumerate(peaks):
            peak = run.ceiling_value(pk)
            if bw and peak:
                ax.plot(xs, [min(bw * x, peak) for x in xs], linestyle=line_styles[i % len(line_styles)],
                        color="black" if i == 0 else plt.get_cmap("Dark2")(i % 8), lw=1.4,
                        label=f"roof: {bw_key} × AI, capped by {pk} ({_si(peak, 'FLOP/s')})")
        for bk in _ceilings_of(run, fam, "B/s"):
            v = run.ceiling_value(bk)
            if bk != bw_key and v:
                keep = [x for x in xs if v * x <= top]
                ax.plot(keep, [v * x for x in keep], ":", color="tab:blue", lw=1.0, label=f"{bk} ({_si(v, 'B/s')})")
        if bw:
            ax.text(xs[5], bw * xs[5] * 1.3, f"{bw_key} {_si(bw, 'B/s')}", fontsize=7)
        kernels = list(dict.fromkeys(m.case.kernel for m in gm))
        for k in kernels:
            km = [m for m in gm if m.case.kernel == k]
            ax.scatter([m.ai for m in km], [m.fps for m in km], marker=style[k][1], s=_MARKER_AREA,
                       color=style[k][0], label=k, zorder=3, edgecolors="black", linewidths=0.3)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(x_lo, x_hi)
        numbers = point_numbers(run, gm)
        ax.set_xlabel("arithmetic intensity (FLOP / byte, the implementation's model)")
        ax.set_ylabel("FLOP/s (model FLOPs / median time)")
        device = (run.context.get("mla_gpu_name", "GPU") if fam == "gpu" else
                  f"{run.context.get('mla_cpu_model', '')}, {run.context.get('mla_threads', '?')} thread(s)")
        ax.set_title(f"Roofline with measured ceilings: {device}", fontsize=10)
        ax.grid(True, which="both", lw=0.3, alpha=0.5)
        legend = ax.legend(fontsize=7, loc="lower right")
        obstacles = [legend.get_window_extent(renderer)]
        if numbers:
            key = "\n".join(f"{n:>2} {_short(p)}" for p, n in numbers.items())
            obstacles.append(ax.text(1.01, 1.0, key, transform=ax.transAxes, va="top", ha="left", fontsize=6,
                                     family="monospace").get_window_extent(renderer))
        # Labels are placed once the axes' scales and limits are final: placement measures boxes
        # in display coordinates.
        ax.set_ylim(*ax.get_ylim())
        obstacles += marker_boxes(ax, [(m.ai, m.fps) for m in gm], _MARKER_AREA)
        place_labels(ax, renderer, [(m.ai, m.fps, str(numbers[m.case.point or ""]), style[m.case.kernel][0])
                                    for m in gm], obstacles=obstacles)
    if len(groups) > 1:
        fig.subplots_adjust(wspace=0.35)  # room for each panel's key before the next panel
    return fig


def bandwidth_series(run: BenchRun) -> dict[tuple[str, str], list[tuple[int, float]]]:
    """(kernel, cache format) -> [(context length, achieved B/s)] over dense uniform-length decode
    (ue8m0-scaled FP8 points form their own series)."""
    series: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for c in run.kernel_cases():
        m = metrics_for(run, c)
        d = run.points.get(c.point or "")
        if not m or m.bw_roof is None or not d or d.get("topk", 0) or \
                d.get("axis") not in ("decode_memory", "fp8", "long_context"):
            continue
        if d["seqlen_max"] <= 0 or d["seqlen_mean"] != d["seqlen_max"] or d["heads"] != 16 or d["s_q"] != 1:
            continue  # one family: uniform lengths, h=16, s_q=1 (the memory-bound decode shape)
        cache = d["cache_format"] + (" ue8m0" if d.get("scale_fmt") == "ue8m0" else "")
        series.setdefault((c.kernel, cache), []).append((int(d["seqlen_max"]), m.bps))
    for v in series.values():
        v.sort()
    return series


_CACHE_STYLE = {"bf16": ("-", "o"), "fp8": ("--", "s")}  # other formats (fp8 ue8m0): (":", "^")


def plot_bandwidth(run: BenchRun, path: str | Path) -> None:
    """The bandwidth figure (draw_bandwidth), written to `path`."""
    import matplotlib.pyplot as plt
    fig = draw_bandwidth(run)
    fig.savefig(path, dpi=130)
    plt.close(fig)


def draw_bandwidth(run: BenchRun):
    """Achieved GB/s against context length, one line per kernel x cache format: the colour says
    the kernel (kernel_styles, as on the roofline), the line style and marker the cache format.
    Two legends, so that each kernel and each format is named once however many series there
    are, and the measured bandwidth ceilings as horizontal lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    series = bandwidth_series(run)
    style = kernel_styles(run)
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for (k, fmt_), pts in series.items():
        ls, marker = _CACHE_STYLE.get(fmt_, (":", "^"))
        ax.plot([p[0] for p in pts], [p[1] / 1e9 for p in pts], ls, marker=marker, color=style[k][0],
                gid=f"kernel:{k}")
    families = {_family(run.kernels[k]["roof_bw"]) for k, _ in series}
    roofs = []
    for fam in sorted(families):
        for i, key in enumerate(_ceilings_of(run, fam, "B/s")):
            v = run.ceiling_value(key)
            roofs.append(ax.axhline(v / 1e9, color="black" if fam == "cpu" else "tab:red", ls=["-", ":", "--"][i % 3],
                                    lw=1.0, label=f"measured {key} {v / 1e9:.3g} GB/s"))
    kernels = list(dict.fromkeys(k for k, _ in series))
    formats = list(dict.fromkeys(f for _, f in series))
    handles = [Line2D([], [], color=style[k][0], lw=2.5, label=k) for k in kernels]
    handles += [Line2D([], [], color="grey", ls=_CACHE_STYLE.get(f, (":", "^"))[0],
                       marker=_CACHE_STYLE.get(f, (":", "^"))[1], label=f"{f} cache") for f in formats]
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("context length s_k (tokens per sequence; h=16, s_q=1, uniform lengths)")
    ax.set_ylabel("achieved GB/s (model bytes / median time)")
    ax.set_title(f"Bandwidth vs context: {run.context.get('mla_cpu_model', '')}", fontsize=10)
    ax.grid(True, which="both", lw=0.3, alpha=0.5)
    if roofs:
        ax.add_artist(ax.legend(handles=roofs, fontsize=7, loc="upper right"))
    if handles:
        ax.legend(handles=handles, fontsize=7, loc="lower left", title="implementation / cache", title_fontsize=7)
    fig.tight_layout()
    return fig
