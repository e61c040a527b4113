#!/usr/bin/env bash
# CTest (cpu;L0): check.sh's GPU path on a machine without a GPU, against a fake bundle whose
# binaries are scripts that behave like the real ones on a GPU (a probe that finds a device,
# gtest JSON, a certificate, Google Benchmark JSON) plus a fake nvidia-smi, compute-sanitizer
# and a venv whose site-packages holds the CUDA 13 cuBLAS wheel's libraries. Checks that:
#   * the steps run in the planned order (probe, certify with the smoke and GPU tests beside it,
#     bench, torch, report, sanitizers), each recorded as it ended: passes, a failing test, a hang
#     killed by its timeout, a race found by racecheck, a sanitizer that refuses the device (a skip);
#   * every CUDA kernel the registry lists (mla kernels --json), and no host kernel, is certified
#     --in-process, the plug-in and the Python kernels not, the certify step's detail says each
#     kernel's isolation, and a simulated context cost left in the environment never reaches a
#     device run;
#   * the summary names the first failing step with its log tail;
#   * cuBLAS is taken from site-packages/nvidia/cu13/lib and linked into the bundle's lib/, no
#     binary sees the bundle on LD_LIBRARY_PATH, and no sanitizer gets --leak-check;
#   * a bench killed by its timeout keeps the rows it wrote, and the real torch merge and report
#     generator accept the partial run and say it is partial;
#   * the Python door's step (certify_python) runs with the bundle's python/ as MLA_DOOR_PATH and
#     names the kernel that could not import;
#   * the bench runs mla-bench on the registry's CUDA kernels with the Python door's adapter whose
#     library imports (--mla_python, --mla_python_exe, --mla_external_points, MLA_DOOR_PATH) and
#     says why the other one is absent;
#   * OUTDIR holds what the device run returns (<= 8 files).
#   test_check_gpu_path.sh CHECK_SH REPO_ROOT WORK_DIR
set -uo pipefail
check=$1 repo=$2 work=$3
fail() { echo "test_check_gpu_path: $*" >&2; exit 1; }
rm -rf "$work"
b=$work/bundle fakebin=$work/fakebin out=$work/out venv=$work/venv
mkdir -p "$b/bin" "$b/lib/compat" "$b/tools" "$fakebin" "$venv/bin" "$venv/lib/python3.11/site-packages/nvidia/cu13/lib"
cp "$check" "$(dirname "$check")"/check{.py,_env.py,_steps.py,_phases.py} "$b/"  # as make_bundle.sh
cp -r "$repo/reports/tools" "$b/tools/reports"
mkdir -p "$b/tools/reports/mla_ref" && cp "$repo"/reference/python/mla_ref/*.py "$b/tools/reports/mla_ref/"  # as make_bundle.sh
echo "source commit: fake" >"$b/MANIFEST.txt"
ln -s "$(command -v python3)" "$venv/bin/python3"
: >"$venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcublas.so.13"
: >"$venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcublasLt.so.13"
# Every fake binary refuses to run with the bundle's lib/ on LD_LIBRARY_PATH.
guard='case ":${LD_LIBRARY_PATH:-}:" in *":'"$b"'/lib:"*) echo "LD_LIBRARY_PATH holds the bundle: $LD_LIBRARY_PATH"; exit 98 ;; esac'

gtest() {  # name, result: pass|fail|hang
  cat >"$b/bin/$1" <<EOS
#!/usr/bin/env bash
$guard
[[ $2 == hang ]] && exec sleep 1000
for a in "\$@"; do [[ \$a == --gtest_output=json:* ]] && f=\${a#--gtest_output=json:}; done
fail='[]'; rc=0
[[ $2 == fail ]] && { fail='[{"failure": "expected 1, got 2"}]'; rc=1; echo "[  FAILED  ] Fake.A: expected 1, got 2"; }
echo "{\"testsuites\": [{\"name\": \"Fake\", \"testsuite\": [{\"name\": \"A\", \"result\": \"COMPLETED\", \"failures\": \$fail}, {\"name\": \"B\", \"result\": \"COMPLETED\"}]}]}" >"\$f"
exit \$rc
EOS
  chmod +x "$b/bin/$1"
  echo "$1" >>"$b/bin/gpu_tests.txt"
}
gtest mla_gpu_smoke_tests pass
gtest mla_cuda_attention_tests pass
gtest mla_cuda_cache_append_tests pass
gtest fake_fail_tests fail
gtest fake_hang_tests hang

# The certifier; with --python (the Python door) it answers like FlashMLA imported and ran while
# FlashInfer did not import, and it records MLA_DOOR_PATH so the check can be held to it.
cat >"$b/bin/mla" <<EOS
#!/usr/bin/env bash
$guard
[[ \$1 == --help ]] && exit 0
# The registry's listing: host kernels, the two CUDA kernels and a third one the check has never
# heard of, which it must certify all the same.
[[ \$1 == kernels && \$2 == --json ]] && { echo '[{"name": "cpu_mla_fp64", "backend": "cpu", "role": "oracle", "out_dtype": "f64"},
 {"name": "cpu_naive_mha_fp32", "backend": "cpu", "role": "baseline", "out_dtype": "f32"},
 {"name": "cuda_naive_mha_cublas", "backend": "cuda", "role": "baseline", "out_dtype": "bf16"},
 {"name": "cuda_mla_decode", "backend": "cuda", "role": "optimized", "out_dtype": "bf16"},
 {"name": "cuda_new_decode", "backend": "cuda", "role": "optimized", "out_dtype": "bf16"}]'; exit 0; }
[[ \$1 == certify && \$2 == --help ]] && { echo "  --python SPEC  a Python kernel (MODULE:ATTR or FILE.py:ATTR)"; exit 0; }
echo "args: \$*"
echo "simulated context: \${MLA_SIMULATED_CONTEXT_SECONDS:-unset}"
py=0
while ((\$#)); do [[ \$1 == --out ]] && out=\$2; [[ \$1 == --python ]] && py=1; shift; done
mkdir -p "\$out"
if ((py)); then
  echo "MLA_DOOR_PATH=\${MLA_DOOR_PATH:-}"
  echo '{"format": 1, "complete": true, "verdict": "PASS", "kernels": [{"name": "flashmla", "version": "1.0.0", "unavailable": null, "counts": {"PASS": 4, "NOT_CLAIMED": 3, "SKIPPED": 0}, "cases": []}, {"name": "flashinfer", "version": "absent", "unavailable": "flashinfer.mla does not import here: ModuleNotFoundError", "counts": {"SKIPPED": 7}, "cases": []}]}' >"\$out/certificate.json"
  exit 0
fi
echo '{"format": 1, "complete": true, "verdict": "PASS", "kernels": [{"name": "cuda_mla_decode", "origin": {"kind": "builtin", "isolation": "in_process"}, "unavailable": null, "counts": {"ERROR": 0, "FAIL": 0, "PASS": 2, "SKIPPED": 0, "UNSUPPORTED": 1}, "cases": []}]}' >"\$out/certificate.json"
echo "# certificate" >"\$out/certificate.md"
EOS
mkdir -p "$b/python/mla_door/adapters" && : >"$b/python/mla_door/__init__.py"  # as make_bundle.sh copies kernels/python
: >"$b/python/mla_door/adapters/__init__.py"; : >"$b/python/mla_door/adapters/flashmla.py"; : >"$b/python/mla_door/adapters/flashinfer.py"
# FlashMLA's library imports (a stand-in on the door's path); FlashInfer's does not.
: >"$b/python/flash_mla.py"
: >"$b/bin/cuda_plugin.so"  # only passed to the fake mla
# The bench: --mla_probe finds a GPU; the smoke run (one point, one repetition) completes; the
# main run (--mla_quick) writes two rows as mla-bench's incremental reporter does, then hangs.
cat >"$b/bin/mla-bench" <<EOS
#!/usr/bin/env bash
$guard
echo "args: \$*" >&2
echo "MLA_DOOR_PATH=\${MLA_DOOR_PATH:-}" >&2
quick=0
for a in "\$@"; do
  case \$a in
    --mla_probe) echo '{"available":true,"name":"Fake GPU","driver_version":"1.0"}'; exit 0 ;;
    --mla_list_points) printf 'name\taxis\tbatch\ts_q\theads\tpage_size\ttopk\tcache\tseqlen_max\tseqlen_mean\tcausal\n'
                printf 'decode_b128_h16_sq1_sk1024\tdecode_memory\t128\t1\t16\t64\t0\tbf16\t1024\t1024\t1\n'; exit 0 ;;
    --mla_quick) quick=1 ;;
    --benchmark_out=*) f=\${a#--benchmark_out=} ;;
  esac
done
p=decode_b128_h16_sq1_sk1024
cat >"\$f.tmp" <<EOJ
{"mla_run": {"complete": \$( ((quick)) && echo false || echo true), "rows": 2, "last": "mla/cuda_naive_mha_cublas/sparse/manual_time"},
 "context": {"date": "2026-12-01T00:00:00+00:00", "host_name": "fake", "num_cpus": 16, "mhz_per_cpu": 0,
 "library_build_type": "release", "mla_bench_format": "1", "mla_cpu_model": "Fake CPU", "mla_threads": "1",
 "mla_tier": "explicit points", "mla_gpu_name": "Fake GPU", "mla_gpu_l2_flush": "read-only stream over 240 MiB",
 "mla_ceilings": "{\"gpu_read_bw\": {\"value\": 4e12, \"unit\": \"B/s\", \"method\": \"fake\"}, \"gpu_gemm_bf16\": {\"value\": 8e14, \"unit\": \"FLOP/s\", \"method\": \"fake\"}}",
 "mla_points": "{\"\$p\": {\"axis\": \"decode_memory\", \"why\": \"\", \"scaled_from\": \"\", \"batch\": 128, \"s_q\": 1, \"heads\": 16, \"page_size\": 64, \"topk\": 0, \"cache_format\": \"bf16\", \"scale_fmt\": \"\", \"seqlen_max\": 1024, \"seqlen_mean\": 1024, \"total_tokens\": 131072, \"seed\": 101}}",
 "mla_kernels": "[{\"name\": \"cuda_mla_decode\", \"backend\": \"cuda\", \"description\": \"fake\", \"out_dtype\": \"bf16\", \"unavailable\": \"\", \"roof_bw\": \"gpu_read_bw\", \"roof_peak\": \"gpu_gemm_bf16\"}]"},
 "benchmarks": [
  {"name": "mla/cuda_mla_decode/\$p/manual_time", "run_name": "mla/cuda_mla_decode/\$p/manual_time", "run_type": "iteration", "repetitions": 2, "repetition_index": 0, "threads": 1, "iterations": 100, "real_time": 0.05, "cpu_time": 0.05, "time_unit": "ms", "model_bytes": 155459584, "model_flops": 4563402752, "cold_cache": 1},
  {"name": "mla/cuda_mla_decode/\$p/manual_time", "run_name": "mla/cuda_mla_decode/\$p/manual_time", "run_type": "iteration", "repetitions": 2, "repetition_index": 1, "threads": 1, "iterations": 100, "real_time": 0.051, "cpu_time": 0.051, "time_unit": "ms", "model_bytes": 155459584, "model_flops": 4563402752, "cold_cache": 1},
  {"name": "mla/cuda_naive_mha_cublas/sparse/manual_time", "run_name": "mla/cuda_naive_mha_cublas/sparse/manual_time", "run_type": "iteration", "repetitions": 1, "repetition_index": 0, "threads": 1, "iterations": 0, "real_time": 0, "cpu_time": 0, "time_unit": "ms", "error_occurred": true, "error_message": "unsupported: sparse"}
 ]}
EOJ
mv "\$f.tmp" "\$f"
echo "mla/cuda_mla_decode/\$p/manual_time 0.05 ms"
((quick)) && exec sleep 1000
exit 0
EOS
cat >"$fakebin/nvidia-smi" <<'EOS'
#!/usr/bin/env bash
echo "name, driver_version, pci.bus_id"
echo "Fake GPU, 1.0, 00000000:00:00.0"
EOS
cat >"$fakebin/compute-sanitizer" <<'EOS'
#!/usr/bin/env bash
[[ $1 == --version ]] && { echo "fake compute-sanitizer 1.0"; exit 0; }
for a in "$@"; do [[ $a == --leak-check* ]] && { echo "========= ERROR: --leak-check was passed"; exit 99; }; done
tool=$2
shift 4  # --tool T --error-exitcode N
"$@" >/dev/null
if [[ $tool == synccheck ]]; then  # as on gVisor: the tool refuses the device
  echo "========= Error: Device not supported"; echo "========= Target application returned an error 999"; exit 1
fi
if [[ $tool == racecheck ]]; then
  echo "========= Race reported between Write access at fake_kernel+0x10"
  echo "========= ERROR SUMMARY: 1 error"; exit 86
fi
echo "========= ERROR SUMMARY: 0 errors"
EOS
chmod +x "$b/bin/"* "$fakebin/"*

start=$(date +%s)
(cd "$repo" && env -u LD_LIBRARY_PATH PATH="$venv/bin:$fakebin:$PATH" MLA_CHECK_CAPS=certify=5,bench=6 \
   MLA_SIMULATED_CONTEXT_SECONDS=7 MLA_CHECK_BUDGET_S=300 bash "$b/check.sh" "$out")
rc=$?
took=$(($(date +%s) - start))
s=$out/summary.md
[[ -f $s ]] || fail "no summary.md"
((rc == 1)) || fail "a failed test, a hang and a race must give exit 1, got $rc"
((took < 120)) || fail "the check took ${took}s with every cap shortened"
expect() { grep -qE -- "$1" "$s" || { cat "$s" >&2; fail "summary lacks /$1/"; }; }
expect '^# Device check: FAILED'
expect '^\| probe \| PASS \| [0-9]+ \| 20 \| "name":"Fake GPU"'
expect "cuBLAS: $venv/lib/python3.11/site-packages/nvidia/cu13/lib"
expect '^\| smoke_tests \| PASS \| [0-9]+ \| 5 \| 2 tests, 0 failed, 0 skipped \|'
expect '^\| sanitize_memcheck \| PASS \| [0-9]+ \| 10 \| ========= ERROR SUMMARY: 0 errors'
expect '^\| sanitize_racecheck \| FAIL \| [0-9]+ \| 10 \| ========= Race reported between Write access at fake_kernel\+0x10 ========= ERROR SUMMARY: 1 error \|'
expect '^\| sanitize_synccheck \| SKIP \| [0-9]+ \| 10 \| compute-sanitizer cannot run here: ========= Error: Device not supported'
expect '^\| test_mla_cuda_attention_tests \| PASS \| [0-9]+ \| 5 \| 2 tests, 0 failed, 0 skipped \|'
expect '^\| test_fake_fail_tests \| FAIL \| [0-9]+ \| 5 \| 2 tests, 1 failed, 0 skipped: Fake.A'
expect '^\| test_fake_hang_tests \| TIMEOUT \|'
expect '^\| certify \| PASS \| [0-9]+ \| 5 \| cuda_mla_decode \(in_process\): 2 PASS, 1 UNSUPPORTED'
certify_log() { tar -xzOf "$out/results.tar.gz" "results/logs/$1.log"; }
certify_log certify | grep -q '^args: certify .*--out [^ ]* --kernel cuda_naive_mha_cublas --kernel cuda_mla_decode --kernel cuda_new_decode --in-process' ||
  fail "every CUDA kernel of the registry, and no host kernel, must be certified --in-process: $(certify_log certify | head -1)"
for st in certify_plugin certify_python; do
  ! certify_log $st | grep -q -- '--in-process' || fail "$st ran --in-process: plug-ins and Python kernels keep their children"
done
certify_log certify_plugin | grep -q '^args: certify .*--plugin .*cuda_plugin.so .*--case ' || fail "certify_plugin did not certify cuda_plugin.so on its cases"
for st in certify certify_plugin certify_python; do
  certify_log $st | grep -qx 'simulated context: unset' || fail "$st saw a simulated context cost outside a rehearsal"
done
expect '^\| certify_python \| PASS \| [0-9]+ \| 5 \| flashmla 1.0.0: 3 NOT_CLAIMED, 4 PASS; flashinfer: unavailable \(flashinfer.mla does not import here'
tar -xzOf "$out/results.tar.gz" results/logs/certify_python.log | grep -qx "MLA_DOOR_PATH=$b/python" ||
  fail "certify_python did not run with MLA_DOOR_PATH at the bundle's python/"
expect '^\| bench \| TIMEOUT \| [0-9]+ \| 6 \| killed after [0-9]+s; rows kept: 2 rows, 1 unsupported; PARTIAL: 2 benchmarks done'
expect '^\| bench \| .*; not benchmarked: flashinfer: flashinfer.mla does not import: ModuleNotFoundError'
bench_log=$(tar -xzOf "$out/results.tar.gz" results/logs/bench.log)
grep -qE -- "^args: --mla_backend=cuda --mla_points=[^ ]+ --mla_quick --benchmark_out=[^ ]+ --mla_python=mla_door.adapters.flashmla:kernel --mla_python_exe=[^ ]+ --mla_external_points=decode_b128_h16_sq1_sk4096,compute_b128_h128_sq2_sk4096$" <<<"$bench_log" ||
  fail "the bench did not run mla-bench on the CUDA kernels with FlashMLA's adapter beside them: $bench_log"
grep -qx "MLA_DOOR_PATH=$b/python" <<<"$bench_log" || fail "the bench did not run with MLA_DOOR_PATH at the bundle's python/"
expect '^\| torch \| (SKIP|PASS) \|'
expect '^\| report \| PASS \|'
# The first failure, with its log tail.
expect '^## First failure: test_fake_fail_tests'
grep -A12 '^## First failure' "$s" | grep -q 'FAILED  \] Fake.A: expected 1, got 2' || fail "the first failure's log tail is missing"
# The smoke binary ran once as the smoke step, not again among the tests.
! grep -qE '^\| test_mla_gpu_smoke_tests ' "$s" || fail "the smoke binary ran again as a test step"
# Steps in the planned order.
order=$(awk -F'|' '/^\| [a-z]/ {gsub(/ /, "", $2); print $2}' "$s" | grep -vE '^(step|test_|certify)' | tr '\n' ' ')
[[ $order == "setup probe smoke_tests bench torch report sanitize_memcheck sanitize_racecheck sanitize_synccheck " ]] ||
  fail "steps out of order: $order"
[[ -L $b/lib/libcublas.so.13 && $(readlink "$b/lib/libcublas.so.13") == "$venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcublas.so.13" ]] ||
  fail "libcublas.so.13 was not linked into the bundle's lib/ from the venv's wheel"
for f in summary.md device.txt results.tar.gz certificate.md report.md roofline.png bandwidth.png; do
  [[ -s $out/$f ]] || fail "$f missing from OUTDIR"
done
n=$(find "$out" -type f | wc -l)
((n <= 8)) || fail "$n files in OUTDIR"
grep -q "Fake GPU" "$out/device.txt" || fail "device.txt lacks nvidia-smi output"
grep -q "Partial run" "$out/report.md" || fail "the report does not say the bench run was partial"
listing=$(tar -tzf "$out/results.tar.gz") || fail "unreadable results.tar.gz"
for f in results/bench/gpu.json results/tests/mla_cuda_attention_tests.json results/logs/sanitize_racecheck.log \
         results/certify/certificate.json results/report/report.md results/summary.md; do
  grep -qx "$f" <<<"$listing" || fail "results.tar.gz lacks $f"
done
echo "test_check_gpu_path: ok (${took}s)"
