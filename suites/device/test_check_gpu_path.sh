#!/usr/bin/env bash
# CTest (cpu;L0): check.sh's GPU path on a machine without a GPU, against a fake bundle whose
# binaries are scripts that behave like the real ones on a GPU (a probe that finds a device,
# gtest JSON, a certificate, Google Benchmark JSON) plus a fake nvidia-smi and compute-sanitizer.
# Checks that passes, failures, a hang (timeout), a sanitizer finding and the real report
# generator, and a sanitizer that refuses the device (a skip, not a failure) are each recorded as such, and that OUTDIR holds what the device tool returns.
#   test_check_gpu_path.sh CHECK_SH REPO_ROOT WORK_DIR
set -uo pipefail
check=$1 repo=$2 work=$3
fail() { echo "test_check_gpu_path: $*" >&2; exit 1; }
rm -rf "$work"
b=$work/bundle fakebin=$work/fakebin out=$work/out
mkdir -p "$b/bin" "$b/lib/compat" "$b/tools" "$fakebin"
cp "$check" "$b/check.sh"
cp -r "$repo/reports/tools" "$b/tools/reports"
echo "source commit: fake" >"$b/MANIFEST.txt"

gtest() {  # name, result: pass|fail|hang
  cat >"$b/bin/$1" <<EOS
#!/usr/bin/env bash
[[ $2 == hang ]] && exec sleep 1000
for a in "\$@"; do [[ \$a == --gtest_output=json:* ]] && f=\${a#--gtest_output=json:}; done
fail='[]'; rc=0
[[ $2 == fail ]] && { fail='[{"failure": "expected 1, got 2"}]'; rc=1; }
echo "{\"testsuites\": [{\"name\": \"Fake\", \"testsuite\": [{\"name\": \"A\", \"result\": \"COMPLETED\", \"failures\": \$fail}, {\"name\": \"B\", \"result\": \"COMPLETED\"}]}]}" >"\$f"
exit \$rc
EOS
  chmod +x "$b/bin/$1"
  echo "$1" >>"$b/bin/gpu_tests.txt"
}
gtest mla_cuda_attention_tests pass
gtest mla_cuda_cache_append_tests pass
gtest fake_fail_tests fail
gtest fake_hang_tests hang

cat >"$b/bin/mla" <<'EOS'
#!/usr/bin/env bash
[[ $1 == --help ]] && exit 0
while (($#)); do [[ $1 == --out ]] && out=$2; shift; done
mkdir -p "$out"
echo '{"format": 1, "complete": true, "verdict": "PASS", "kernels": [{"name": "cuda_mla_decode", "unavailable": null, "counts": {"ERROR": 0, "FAIL": 0, "PASS": 2, "SKIPPED": 0, "UNSUPPORTED": 1}, "cases": []}]}' >"$out/certificate.json"
echo "# certificate" >"$out/certificate.md"
EOS
cat >"$b/bin/mla-gpu-bench" <<'EOS'
#!/usr/bin/env bash
for a in "$@"; do
  case $a in
    --mla_probe) echo '{"available":true,"name":"Fake GPU","driver_version":"1.0"}'; exit 0 ;;
    --mla_list) printf 'name\taxis\tbatch\ts_q\theads\tpage_size\ttopk\tcache\tseqlen_max\tseqlen_mean\tcausal\n'
                printf 'decode_b128_h16_sq1_sk1024\tdecode_memory\t128\t1\t16\t64\t0\tbf16\t1024\t1024\t1\n'; exit 0 ;;
    --benchmark_out=*) f=${a#--benchmark_out=} ;;
  esac
done
p=decode_b128_h16_sq1_sk1024
cat >"$f" <<EOJ
{"context": {"date": "2026-12-01T00:00:00+00:00", "host_name": "fake", "num_cpus": 16, "mhz_per_cpu": 0,
 "library_build_type": "release", "mla_bench_format": "1", "mla_cpu_model": "Fake CPU", "mla_threads": "1",
 "mla_tier": "explicit points", "mla_gpu_name": "Fake GPU",
 "mla_ceilings": "{\"gpu_read_bw\": {\"value\": 4e12, \"unit\": \"B/s\", \"method\": \"fake\"}, \"gpu_gemm_bf16\": {\"value\": 8e14, \"unit\": \"FLOP/s\", \"method\": \"fake\"}}",
 "mla_points": "{\"$p\": {\"axis\": \"decode_memory\", \"why\": \"\", \"scaled_from\": \"\", \"batch\": 128, \"s_q\": 1, \"heads\": 16, \"page_size\": 64, \"topk\": 0, \"cache_format\": \"bf16\", \"scale_fmt\": \"\", \"seqlen_max\": 1024, \"seqlen_mean\": 1024, \"total_tokens\": 131072, \"seed\": 101}}",
 "mla_kernels": "[{\"name\": \"cuda_mla_decode\", \"backend\": \"cuda\", \"description\": \"fake\", \"out_dtype\": \"bf16\", \"unavailable\": \"\", \"roof_bw\": \"gpu_read_bw\", \"roof_peak\": \"gpu_gemm_bf16\"}]"},
 "benchmarks": [
  {"name": "mla/cuda_mla_decode/$p/manual_time", "run_name": "mla/cuda_mla_decode/$p/manual_time", "run_type": "iteration", "repetitions": 2, "repetition_index": 0, "threads": 1, "iterations": 100, "real_time": 0.05, "cpu_time": 0.05, "time_unit": "ms", "model_bytes": 155459584, "model_flops": 4563402752, "cold_cache": 1},
  {"name": "mla/cuda_mla_decode/$p/manual_time", "run_name": "mla/cuda_mla_decode/$p/manual_time", "run_type": "iteration", "repetitions": 2, "repetition_index": 1, "threads": 1, "iterations": 100, "real_time": 0.051, "cpu_time": 0.051, "time_unit": "ms", "model_bytes": 155459584, "model_flops": 4563402752, "cold_cache": 1},
  {"name": "mla/cuda_naive_mha_cublas/sparse/manual_time", "run_name": "mla/cuda_naive_mha_cublas/sparse/manual_time", "run_type": "iteration", "repetitions": 1, "repetition_index": 0, "threads": 1, "iterations": 0, "real_time": 0, "cpu_time": 0, "time_unit": "ms", "error_occurred": true, "error_message": "unsupported: sparse"}
 ]}
EOJ
EOS
cat >"$fakebin/nvidia-smi" <<'EOS'
#!/usr/bin/env bash
echo "name, driver_version, pci.bus_id"
echo "Fake GPU, 1.0, 00000000:00:00.0"
EOS
cat >"$fakebin/compute-sanitizer" <<'EOS'
#!/usr/bin/env bash
tool=$2
shift 4  # --tool T --error-exitcode N
[[ $1 == --leak-check ]] && shift 2
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

(cd "$repo" && PATH=$fakebin:$PATH MLA_CHECK_TEST_CAP_S=5 MLA_CHECK_BUDGET_S=200 bash "$b/check.sh" "$out")
rc=$?
s=$out/summary.md
[[ -f $s ]] || fail "no summary.md"
((rc == 1)) || fail "a failed test, a hang and a race must give exit 1, got $rc"
expect() { grep -qE "$1" "$s" || fail "summary lacks /$1/"; }
expect '^# Device check: FAILED'
expect '^\| device \| PASS \| [0-9]+ \| "name":"Fake GPU"'
expect '^\| test_mla_cuda_attention_tests \| PASS \| [0-9]+ \| 2 tests, 0 failed, 0 skipped \|'
expect '^\| test_fake_fail_tests \| FAIL \| [0-9]+ \| 2 tests, 1 failed, 0 skipped: Fake.A'
expect '^\| test_fake_hang_tests \| TIMEOUT \|'
expect '^\| certify \| PASS \| [0-9]+ \| cuda_mla_decode: 2 PASS, 1 UNSUPPORTED'
expect '^\| bench \| PASS \| [0-9]+ \| 2 rows, 1 unsupported \|'
expect '^\| torch \| (SKIP|PASS) \|'
expect '^\| report \| PASS \|'
expect '^\| sanitize_memcheck \| PASS \| [0-9]+ \| ========= ERROR SUMMARY: 0 errors'
expect '^\| sanitize_racecheck \| FAIL \| [0-9]+ \| ========= Race reported between Write access at fake_kernel\+0x10 ========= ERROR SUMMARY: 1 error \|'
expect '^\| sanitize_synccheck \| SKIP \| [0-9]+ \| compute-sanitizer cannot run here: ========= Error: Device not supported'
# Every CUDA kernel goes under the sanitizers: the append binaries too, and a missing one is a
# skip that says which, never silence.
expect '^\| sanitize_memcheck_append \| PASS \| [0-9]+ \| ========= ERROR SUMMARY: 0 errors'
expect '^\| sanitize_memcheck_append_fp8 \| SKIP \| 0 \| mla_cuda_cache_append_fp8_tests not in the bundle'
expect '^\| sanitize_synccheck_append \| SKIP \| 0 \| compute-sanitizer cannot run here'
for f in summary.md device.txt results.tar.gz certificate.md report.md roofline.png bandwidth.png; do
  [[ -s $out/$f ]] || fail "$f missing from OUTDIR"
done
n=$(find "$out" -type f | wc -l)
((n <= 8)) || fail "$n files in OUTDIR"
grep -q "Fake GPU" "$out/device.txt" || fail "device.txt lacks nvidia-smi output"
listing=$(tar -tzf "$out/results.tar.gz") || fail "unreadable results.tar.gz"
for f in results/bench/gpu.json results/tests/mla_cuda_attention_tests.json results/logs/sanitize_racecheck.log \
         results/certify/certificate.json results/report/report.md; do
  grep -qx "$f" <<<"$listing" || fail "results.tar.gz lacks $f"
done
echo "test_check_gpu_path: ok"
