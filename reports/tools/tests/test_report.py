"""The report generator: metrics from model bytes/FLOPs and measured ceilings, the Markdown, the plots."""
import json
from pathlib import Path

import pytest
from benchfiles import CEILINGS, PUBLISHED_BENCH, bench_json, kernel, point

from mla_benchtools import benchjson, plots, report

MLA, NAIVE, GPU = "cpu_mla_fp64", "cpu_naive_mha_fp32", "cuda_flash"


def name(k, p):
    return f"mla/{k}/{p}/manual_time"


def sample_run():
    pts = {
        "cpu_decode_sk1024": point(seqlen=1024),
        "cpu_decode_sk4096": point(seqlen=4096),
        "cpu_fp8_sk4096": point(axis="fp8", seqlen=4096, fmt="fp8"),
        "cpu_varlen": point(axis="varlen", seqlen=4000, mean=2000.0),
        "cpu_compute_h128": point(axis="decode_compute", heads=128, seqlen=1024),
        "cpu_fp8_ue8m0_sk4096": dict(point(axis="fp8", seqlen=4096, fmt="fp8"), scale_fmt="ue8m0"),
    }
    # MLA: AI = 1e9/1e7 = 100 FLOP/B (above the fp64 ridge 40e9/20e9 = 2): compute-bound.
    # Naive: AI = 1e8/1e9 = 0.1 (below the fp32 ridge 4): memory-bound.
    mla_c = {"model_bytes": 1e7, "model_flops": 1e9}
    naive_c = {"model_bytes": 1e9, "model_flops": 1e8}
    cases = {}
    for i, p in enumerate(pts):
        cases[name(MLA, p)] = ([100.0 + i, 90.0 + i, 110.0 + i], mla_c)       # median 100+i ms
        cases[name(NAIVE, p)] = ([200.0 + i, 210.0 + i, 190.0 + i], naive_c)  # median 200+i ms
    cases[name(GPU, "cpu_decode_sk1024")] = ([1.0, 1.0, 1.0], mla_c)
    cases["ceiling/read_bw/real_time/threads:1"] = ([10.0, 10.0, 10.0], {"bytes_per_second": 19e9})
    kernels = [kernel(MLA, "f64", role="oracle"), kernel(NAIVE, "f32", role="baseline"),
               kernel(GPU, "bf16", backend="cuda")]
    return bench_json(cases, points=pts, kernels=kernels,
                      errors={name(MLA, "cpu_huge"): "too large for this machine: inputs 9 GiB"})


@pytest.fixture
def run(write_json):
    return benchjson.load(write_json(sample_run()))


def test_metrics_use_model_median_and_the_kernels_roofs(run):
    m = report.metrics_for(run, run.cases[name(MLA, "cpu_decode_sk4096")])
    assert m.median_s == pytest.approx(0.101)
    assert m.bps == pytest.approx(1e7 / 0.101)
    assert m.fps == pytest.approx(1e9 / 0.101)
    assert m.ai == pytest.approx(100.0)
    assert m.ridge == pytest.approx(CEILINGS["fma_f64"]["value"] / CEILINGS["read_bw"]["value"])
    assert m.bound == "compute"
    assert m.pct == pytest.approx(100.0 * (1e9 / 0.101) / CEILINGS["fma_f64"]["value"])
    n = report.metrics_for(run, run.cases[name(NAIVE, "cpu_decode_sk4096")])
    assert n.peak_key == "fma_f32"
    assert n.bound == "memory"
    assert n.pct == pytest.approx(100.0 * (1e9 / 0.201) / CEILINGS["read_bw"]["value"])
    g = report.metrics_for(run, run.cases[name(GPU, "cpu_decode_sk1024")])
    assert g.pct is None and g.bound is None  # no device ceiling: no percentage invented
    assert report.metrics_for(run, run.cases[name(MLA, "cpu_huge")]) is None


def test_baselines_are_the_kernels_declared_so_never_a_naming_convention(write_json):
    run = benchjson.load(write_json(sample_run()))
    assert report.default_baselines(run) == [NAIVE]
    # A kernel whose name says naive but whose registry entry does not is no baseline, and the
    # other way round.
    data = sample_run()
    data["context"]["mla_kernels"] = json.dumps([kernel(MLA, "f64", role="baseline"), kernel(NAIVE, "f32"),
                                                 kernel(GPU, "bf16", backend="cuda")])
    assert report.default_baselines(benchjson.load(write_json(data))) == [MLA]


def test_markdown_has_every_case_speedups_and_skips(run):
    md = report.render_markdown(run)
    for p in ("cpu_decode_sk1024", "cpu_decode_sk4096", "cpu_fp8_sk4096", "cpu_varlen", "cpu_compute_h128"):
        assert f"| {p} | `{MLA}` |" in md
        assert f"| {p} | `{NAIVE}` |" in md
    # Speed-up of MLA over the naive baseline for the second point: 201 / 101.
    row = next(line for line in md.splitlines() if line.startswith(f"| cpu_decode_sk4096 | `{MLA}`"))
    assert row.rstrip().endswith(f"| {201.0 / 101.0:.2f} |")
    assert "| compute |" in row
    assert "| `fma_f64` | 40 GFLOP/s |" in md
    assert "## Not measured" in md and "too large for this machine" in md
    assert "no roof" in md  # the cuda row
    assert f"Not plotted (no ceilings of their device in this run): `{GPU}`" in md
    assert "## Shapes" in md and "prod: reduced" in md
    # Axis sections in the fixed order.
    assert md.index("### decode_memory") < md.index("### decode_compute") < md.index("### varlen") < md.index("### fp8")
    assert "† above the measured roof" not in md  # no case exceeds its roof here


def test_over_roof_cases_are_flagged(write_json):
    doc = sample_run()
    for r in doc["benchmarks"]:
        if r["run_name"] == name(NAIVE, "cpu_decode_sk1024") and r["run_type"] == "iteration":
            r["real_time"] = 1.0  # 1e9 B in 1 ms = 1000 GB/s, far above 20 GB/s
    md = report.render_markdown(benchjson.load(write_json(doc)))
    assert "† above the measured roof" in md
    assert " †" in next(line for line in md.splitlines() if line.startswith(f"| cpu_decode_sk1024 | `{NAIVE}`"))


def test_certificate_marks_failing_kernels(run, tmp_path):
    cert = {"format": 1, "verdict": "FAIL", "complete": True, "finished_utc": "x",
            "machine": {"cpu_model": "Another CPU"},
            "kernels": [{"name": MLA, "counts": {"PASS": 10, "FAIL": 0}},
                        {"name": NAIVE, "counts": {"PASS": 8, "FAIL": 2}}]}
    p = tmp_path / "certificate.json"
    p.write_text(json.dumps(cert))
    md = report.render_markdown(run, report.load_certificate(p))
    assert "## Certification" in md
    assert f"| `{NAIVE}` | 8 | 2 |" in md and "FAILS certification" in md
    assert f"`{NAIVE}` ⚠" in md
    assert "not the benchmarked machine" in md
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": 3, "kernels": []}))  # a later format than this report knows
    with pytest.raises(benchjson.BenchFileError):
        report.load_certificate(bad)


def test_bandwidth_series_takes_uniform_decode_only(run):
    s = plots.bandwidth_series(run)
    # The device kernel has no ceilings in this run: not drawn against host roofs.
    assert set(s) == {(MLA, "bf16"), (NAIVE, "bf16"), (MLA, "fp8"), (NAIVE, "fp8"),
                      (MLA, "fp8 ue8m0"), (NAIVE, "fp8 ue8m0")}
    assert [x for x, _ in s[(MLA, "fp8")]] == [4096]
    assert [x for x, _ in s[(MLA, "bf16")]] == [1024, 4096]  # varlen and h=128 left out
    assert s[(NAIVE, "bf16")][1][1] == pytest.approx(1e9 / 0.201)


def test_main_writes_report_and_valid_pngs(write_json, tmp_path):
    src = write_json(sample_run())
    out = tmp_path / "out"
    assert report.main([src, "--out", str(out), "--baseline", MLA]) == 0
    md = (out / "report.md").read_text()
    assert f"× vs `{MLA}`" in md and "![roofline](roofline.png)" in md
    for png in ("roofline.png", "bandwidth.png"):
        data = (out / png).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20000


def test_main_rejects_bad_inputs(write_json, tmp_path, capsys):
    src = write_json(sample_run())
    assert report.main([src, "--out", str(tmp_path / "o"), "--baseline", "nope"]) == 2
    empty = write_json(bench_json({"ceiling/read_bw": ([1.0], {})}))
    assert report.main([empty, "--out", str(tmp_path / "o2")]) == 2
    assert report.main([str(tmp_path / "absent.json"), "--out", str(tmp_path / "o3")]) == 2
    assert not Path(tmp_path / "o2" / "report.md").exists()
    capsys.readouterr()


def test_model_slug():
    assert benchjson.model_slug("AMD EPYC") == "amd-epyc"
    assert benchjson.model_slug("Intel(R) Xeon(R) Platinum 8480+") == "intel-r-xeon-r-platinum-8480"
    assert benchjson.model_slug("  ") == "unknown"


def test_warm_cache_rows_are_marked(write_json):
    doc = sample_run()
    for r in doc["benchmarks"]:
        if r["run_name"] == name(MLA, "cpu_decode_sk1024") and r["run_type"] == "iteration":
            r["cold_cache"] = 0.0
    md = report.render_markdown(benchjson.load(write_json(doc)))
    assert "| compute, warm caches |" in next(l for l in md.splitlines() if l.startswith(f"| cpu_decode_sk1024 | `{MLA}`"))
    assert "warm caches" not in next(l for l in md.splitlines() if l.startswith(f"| cpu_decode_sk4096 | `{MLA}`"))
    assert "Left out of the roofline (timed with warm caches, so not bounded by the DRAM roof): cpu_decode_sk1024." in md
    run = benchjson.load(write_json(doc))
    warm = report.metrics_for(run, run.cases[name(MLA, "cpu_decode_sk1024")])
    cold = report.metrics_for(run, run.cases[name(MLA, "cpu_decode_sk4096")])
    assert not plots.roofline_plottable(warm) and plots.roofline_plottable(cold)


def test_busy_machine_is_flagged_from_cpu_share(write_json):
    doc = sample_run()
    md = report.render_markdown(benchjson.load(write_json(doc)))
    assert "machine was busy" not in md  # no cpu_share recorded: nothing claimed
    for r in doc["benchmarks"]:
        if r["run_type"] == "iteration" and r["run_name"].startswith("mla/"):
            r["cpu_share"] = 0.5 if r["run_name"] == name(MLA, "cpu_varlen") else 0.99
    md = report.render_markdown(benchjson.load(write_json(doc)))
    assert "**The machine was busy during this run:** 1 of" in md
    row = next(l for l in md.splitlines() if l.startswith(f"| cpu_varlen | `{MLA}`"))
    assert "| 0.50 |" in row


def test_device_kernels_are_judged_and_drawn_with_their_own_ceilings(write_json, tmp_path):
    ceilings = dict(CEILINGS)
    ceilings["gpu_read_bw"] = {"value": 4e12, "unit": "B/s", "method": "device read"}
    ceilings["gpu_copy_bw"] = {"value": 3e12, "unit": "B/s", "method": "device copy"}
    ceilings["gpu_gemm_bf16"] = {"value": 7e14, "unit": "FLOP/s", "method": "cuBLAS bf16"}
    gk = dict(kernel("cuda_mla", "bf16", backend="cuda"), roof_bw="gpu_read_bw", roof_peak="gpu_gemm_bf16")
    pts = {"decode_sk4096": point(batch=128, seqlen=4096, scaled_from="")}
    doc = bench_json({name(MLA, "decode_sk4096"): ([100.0] * 3, {"model_bytes": 1e7, "model_flops": 1e9}),
                      name("cuda_mla", "decode_sk4096"): ([0.01] * 3, {"model_bytes": 1e7, "model_flops": 1e9})},
                     points=pts, kernels=[kernel(MLA, "f64"), gk], ceilings=ceilings)
    run = benchjson.load(write_json(doc))
    g = report.metrics_for(run, run.cases[name("cuda_mla", "decode_sk4096")])
    # AI 100 < ridge 7e14/4e12 = 175: memory-bound on the device, at 1e7 B / 10 us = 1 TB/s.
    assert g.bound == "memory" and g.pct == pytest.approx(100 * 1e12 / 4e12)
    groups = plots.roofline_groups(run)
    assert set(groups) == {"read_bw", "gpu_read_bw"}
    assert [m.case.kernel for m in groups["gpu_read_bw"]] == ["cuda_mla"]
    assert plots._ceilings_of(run, "gpu", "B/s") == ["gpu_read_bw", "gpu_copy_bw"]
    assert "gpu_read_bw" not in plots._ceilings_of(run, "cpu", "B/s")
    out = tmp_path / "o"
    assert report.main([write_json(doc), "--out", str(out)]) == 0
    assert (out / "roofline.png").read_bytes()[:4] == b"\x89PNG"


def _drawn_label_boxes(fig, labels):
    """The labels' text boxes where a real draw puts them (measured after drawing the canvas, not
    with the placement's own measure)."""
    from matplotlib.text import Text
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return [Text.get_window_extent(t, renderer) for t in labels]


def crowded_run():
    """Three kernels over twelve points whose AI and FLOP/s differ by a few percent: drawn with
    fixed label offsets, their labels pile on top of each other."""
    pts = {f"cpu_decode_sk{1024 + 64 * i}": point(seqlen=1024 + 64 * i) for i in range(12)}
    names = [MLA, NAIVE, "cpu_mla_f32"]
    cases = {}
    for j, k in enumerate(names):
        for i, p in enumerate(pts):
            c = {"model_bytes": 1e7 * (1 + 0.02 * i), "model_flops": 1e9 * (1 + 0.03 * i + 0.01 * j)}
            cases[name(k, p)] = ([100.0 + i, 101.0 + i, 99.0 + i], c)
    kernels = [kernel(MLA, "f64", role="oracle"), kernel(NAIVE, "f32", role="baseline"), kernel("cpu_mla_f32", "f32")]
    return bench_json(cases, points=pts, kernels=kernels)


def test_roofline_labels_never_overlap_and_each_kernel_keeps_one_colour(write_json):
    import matplotlib.pyplot as plt
    run = benchjson.load(write_json(crowded_run()))
    fig = plots.draw_roofline(run)
    labels = [t for ax in fig.axes for t in ax.get_children() if t.get_gid() == "point-label"]
    assert len(labels) == 36  # every kernel x point labelled
    boxes = _drawn_label_boxes(fig, labels)
    for i in range(len(boxes)):
        for j in range(i + 1, len(boxes)):
            assert not boxes[i].overlaps(boxes[j]), (labels[i].get_text(), labels[j].get_text())
    # The number on each label is its point's, and the key beside the panel spells it out.
    numbers = plots.point_numbers(run, [report.metrics_for(run, c) for c in run.kernel_cases()])
    assert sorted(numbers.values()) == list(range(1, 13))
    key = [t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() != "point-label" and "decode_sk1024" in t.get_text()]
    assert key and " 1 decode_sk1024" in key[0]
    # One colour per kernel: every label of a kernel has that kernel's colour, and no two kernels share one.
    colours = {}
    for ax in fig.axes:
        for coll in ax.collections:
            colours.setdefault(coll.get_label(), tuple(coll.get_facecolor()[0]))
    assert len(set(colours.values())) == len(colours) == 3
    plt.close(fig)


def _kernel_colours(run):
    """kernel -> the set of colours it is drawn in over the roofline's points and the bandwidth
    figure's lines, and the bandwidth legend's texts."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba
    colours = {}
    roof = plots.draw_roofline(run)
    for ax in roof.axes:
        for coll in ax.collections:
            for fc in coll.get_facecolor():
                colours.setdefault(coll.get_label(), set()).add(tuple(fc))
    bw = plots.draw_bandwidth(run)
    for ax in bw.axes:
        for line in ax.lines:
            if (line.get_gid() or "").startswith("kernel:"):
                colours.setdefault(line.get_gid()[len("kernel:"):], set()).add(to_rgba(line.get_color()))
    legend = [t.get_text() for ax in bw.axes for leg in [ax.get_legend(), *ax.artists] if leg is not None
              and hasattr(leg, "get_texts") for t in leg.get_texts()]
    plt.close(roof)
    plt.close(bw)
    return colours, legend


def test_each_kernel_has_one_colour_in_both_figures_and_one_legend_entry(write_json):
    run = benchjson.load(write_json(sample_run()))
    colours, legend = _kernel_colours(run)
    assert set(colours) == {MLA, NAIVE}  # the device kernel has no roofs here: drawn nowhere
    assert all(len(c) == 1 for c in colours.values()), colours
    assert len({next(iter(c)) for c in colours.values()}) == len(colours)  # no two kernels share one
    # Three cache formats per kernel in the bandwidth figure, yet each kernel is named once.
    assert sorted(t for t in legend if t in (MLA, NAIVE)) == [MLA, NAIVE]
    assert {"bf16 cache", "fp8 cache", "fp8 ue8m0 cache"} <= set(legend)


def test_a_kernels_colour_does_not_depend_on_which_others_ran(write_json):
    full = benchjson.load(write_json(sample_run()))
    doc = sample_run()
    doc["benchmarks"] = [r for r in doc["benchmarks"] if not r["run_name"].startswith(f"mla/{MLA}/")]
    without_mla = benchjson.load(write_json(doc))
    assert plots.kernel_styles(full)[NAIVE] == plots.kernel_styles(without_mla)[NAIVE]
    colours, _ = _kernel_colours(without_mla)
    assert colours[NAIVE] == {plots.kernel_styles(full)[NAIVE][0]}


def test_published_runs_are_present():
    # The tests below read them; an empty list would make them pass on nothing.
    assert len(PUBLISHED_BENCH) >= 2, PUBLISHED_BENCH


def test_kind_from_name_agrees_with_the_axis_every_published_point_records():
    for path in PUBLISHED_BENCH:
        run = benchjson.load(path)
        assert run.points, path
        for p, d in run.points.items():
            assert report.kind_from_name(p) == d["axis"], (path, p)
    assert report.kind_from_name("decode_b128_h16_sq1_sk1024") == "decode_memory"
    assert report.kind_from_name("cpu_long_b1_h16_sq1_sk131072") == "long_context"
    assert report.kind_from_name("sparse_b64_h128_sq1_sk65536_top2048_fp8") == "sparse"
    assert report.kind_from_name("cpu_indexer_logits_paged_b4_n1_h64_ctx4096") == "indexer_logits"
    assert report.kind_from_name("topk_edge_r12_n4096_k2048") == "topk"
    # A sparse prefill's name starts with the sparse decode's first word: its kind is its own.
    assert report.kind_from_name("cpu_sparse_prefill_h16_sq128_skv1024_k256") == "sparse_prefill"
    assert report.kind_from_name("sparse_prefill_edge_h64_sq80_skv80_k64") == "sparse_prefill"
    assert report.kind_from_name("my_shape") == "other"


def test_case_kind_prefers_the_recorded_axis_over_the_name(write_json):
    doc = sample_run()
    pts = json.loads(doc["context"]["mla_points"])
    pts["cpu_decode_sk4096"]["axis"] = "edge"
    doc["context"]["mla_points"] = json.dumps(pts)
    for r in doc["benchmarks"]:  # a point the file lists no shape for: its name decides
        r["name"] = r["name"].replace("cpu_varlen", "cpu_sparse_x")
        r["run_name"] = r["run_name"].replace("cpu_varlen", "cpu_sparse_x")
    run = benchjson.load(write_json(doc))
    assert report.case_kind(run, "cpu_decode_sk4096") == "edge"
    assert report.case_kind(run, "cpu_decode_sk1024") == "decode_memory"
    assert report.case_kind(run, "cpu_sparse_x") == "sparse"
    md = report.render_markdown(run)
    assert "| cpu_sparse_x |" in _results_tables(md)["sparse"][2]


def _results_tables(md):
    """kind -> the lines of the Results section's tables under that kind's heading."""
    section = md.split("\n## Results\n", 1)[1].split("\n## ", 1)[0]
    tables, kind = {}, None
    for line in section.splitlines():
        if line.startswith("### "):
            kind = line[4:].split(":", 1)[0]
            assert kind not in tables, f"two headings for {kind}"
            tables[kind] = []
        elif line.startswith("|"):
            assert kind is not None, line
            tables[kind].append(line)
    return tables


def _detail_rows(md):
    """(kernel, point) -> the detail row's cells."""
    rows = {}
    for line in md.split("\n## Results in detail\n", 1)[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and cells[1].startswith("`"):
            rows[(cells[1].strip("` ⚠"), cells[0])] = cells
    return rows


def _assert_one_side_by_side_table_per_kind(run, md):
    tables = _results_tables(md)
    mets = {(c.kernel, c.point): report.metrics_for(run, c) for c in run.kernel_cases()}
    measured = [p for p in report.ordered_points(run) if any(m and m.case.point == p for m in mets.values())]
    kinds = list(dict.fromkeys(report.case_kind(run, p) for p in measured))
    assert list(tables) == kinds  # one heading per kind present, in the axes' order
    detail = _detail_rows(md)
    for kind, lines in tables.items():
        assert sum(line.startswith("|---") for line in lines) == 1, kind  # exactly one table
        kpts = [p for p in measured if report.case_kind(run, p) == kind]
        kernels = [k for k in dict.fromkeys(c.kernel for c in run.kernel_cases())
                   if any(mets.get((k, p)) for p in kpts)]
        assert lines[0] == "| case |" + "".join(f" `{k}` |" for k in kernels), lines[0]  # kernels side by side
        assert [line.split(" | ")[0][2:] for line in lines[2:]] == kpts
        for line in lines[2:]:
            cells = [c.strip() for c in line.strip("|").split("|")]
            for k, cell in zip(kernels, cells[1:]):
                d = detail.get((k, cells[0]))
                if d is None:
                    assert cell == "–"
                    continue
                # The detail row's numbers, as printed there: median time and % of ceiling.
                assert cell.startswith(d[2].split(" [")[0] + " ms"), (cell, d)
                assert (d[7] == "–") or f" {d[7].replace(' †', ' % †')} " in f" {cell} ", (cell, d)
                assert cell.endswith(f"({d[8]})"), (cell, d)


def test_results_have_one_table_per_kind_with_the_kernels_side_by_side(run):
    md = report.render_markdown(run)
    _assert_one_side_by_side_table_per_kind(run, md)
    assert set(_results_tables(md)) == {"decode_memory", "decode_compute", "varlen", "fp8"}
    assert "| cpu_decode_sk1024 | 100 ms · 25.0 % (compute) | 200 ms · 25.0 % (memory) | 1 ms (no roof) |" in md
    assert "| cpu_decode_sk4096 | 101 ms · 24.8 % (compute) | 201 ms · 24.9 % (memory) | – |" in md


def test_published_reports_have_one_table_per_kind():
    for path in PUBLISHED_BENCH:
        run = benchjson.load(path)
        md = report.render_markdown(run, baselines=[])
        _assert_one_side_by_side_table_per_kind(run, md)
        assert len(_results_tables(md)) >= 5, path  # decode, compute, varlen, sparse, fp8 at least


def test_published_rooflines_label_every_point_and_no_two_labels_overlap():
    import matplotlib.pyplot as plt
    for path in PUBLISHED_BENCH:
        run = benchjson.load(path)
        fig = plots.draw_roofline(run)
        labels = [t for ax in fig.axes for t in ax.get_children() if t.get_gid() == "point-label"]
        assert len(labels) == sum(len(g) for g in plots.roofline_groups(run).values()) >= 30, path
        boxes = _drawn_label_boxes(fig, labels)
        # Nor on the legend or the key of numbers beside the panel.
        renderer = fig.canvas.get_renderer()
        keys = [t for t in fig.axes[0].texts if t.get_gid() != "point-label" and "decode" in t.get_text()]
        for other in [fig.axes[0].get_legend().get_window_extent(renderer), keys[0].get_window_extent(renderer)]:
            assert not any(b.overlaps(other) for b in boxes), path
        # Beside its point: a label without a leader line is within a few points of its marker.
        for t, b in zip(labels, boxes):
            if t.arrowprops is None:
                px, py = t.axes.transData.transform(t.xy)
                gap = max(b.x0 - px, px - b.x1, b.y0 - py, py - b.y1, 0.0)
                assert gap < plots._LEADER_FROM * fig.dpi / 72, (path, t.get_text(), gap)
        for i in range(len(boxes)):
            for j in range(i + 1, len(boxes)):
                assert not boxes[i].overlaps(boxes[j]), (path, labels[i].get_text(), labels[j].get_text())
        plt.close(fig)


def _detail_headers(md):
    """kind -> the header line of its detail table."""
    section = md.split("\n## Results in detail\n", 1)[1].split("\n## ", 1)[0]
    headers, kind = {}, None
    for line in section.splitlines():
        if line.startswith("### "):
            kind = line[4:]
        elif line.startswith("| case |") and kind is not None:
            headers[kind] = line
    return headers


def test_speed_ups_are_only_against_baselines_measured_on_the_kinds_points(run):
    # A decode baseline has nothing to say about a prefill or merge row: each detail table names
    # only the baselines timed on at least one of its points, and every one of those.
    for r in [run] + [benchjson.load(p) for p in PUBLISHED_BENCH]:
        mets = {(c.kernel, c.point): report.metrics_for(r, c) for c in r.kernel_cases()}
        baselines = report.default_baselines(r)
        headers = _detail_headers(report.render_markdown(r))
        assert headers
        for kind, kpts in report.kind_groups(r, list(dict.fromkeys(c.kernel for c in r.kernel_cases())),
                                             report.ordered_points(r), mets):
            want = [b for b in baselines if any(mets.get((b, p)) for p in kpts)]
            assert headers[kind].endswith("| CPU share |" + "".join(f" × vs `{b}` |" for b in want)), (kind, headers[kind])
