#!/usr/bin/env bash
# CTest (cpu;L0): run_on_device.sh on a fake tree and bundle archive. A bundle whose
# source.sha256 matches the tree runs its check.sh (with the budget's clock already started and
# --rehearse passed on); one built from another tree is refused with the command that rebuilds
# it, in stderr and in OUTDIR/summary.md (what the device run returns), unless --allow-stale;
# a missing archive is refused the same way.
#   test_run_on_device.sh REPO_ROOT
set -uo pipefail
repo_src=$1
fail() { echo "test_run_on_device: $*" >&2; exit 1; }
work=$(mktemp -d /tmp/mla-run-on-device-test.XXXXXX)  # outside any git checkout
trap 'rm -rf "$work"' EXIT
tree=$work/tree pack=$work/pack
mkdir -p "$tree/suites/device" "$tree/fixtures" "$pack/bundle"
cp "$repo_src/suites/device/run_on_device.sh" "$repo_src/suites/device/source_list.sh" "$tree/suites/device/"
echo "schema" >"$tree/fixtures/SCHEMA.md"
echo "kernel source" >"$tree/kernel.cu"
cat >"$pack/bundle/check.sh" <<'EOS'
#!/usr/bin/env bash
mkdir -p "$1"
echo "check ran: $* T0=${MLA_CHECK_T0:-unset} stale=${MLA_CHECK_STALE_BUNDLE:-none}" | tee "$1/ran.txt"
EOS
echo "source commit: 0123abc" >"$pack/bundle/MANIFEST.txt"
bash "$tree/suites/device/source_list.sh" "$tree" "$pack/bundle/source.sha256" || fail "source_list.sh failed"
grep -q ' kernel.cu$' "$pack/bundle/source.sha256" || fail "the source list lacks kernel.cu"
mkdir -p "$tree/build/device"
tar -C "$pack" -cJf "$tree/build/device/bundle.tar.xz" bundle

cd "$tree"
out=$work/out1
bash suites/device/run_on_device.sh "$out" --rehearse >"$work/log1" 2>&1 || { cat "$work/log1"; fail "a matching bundle was refused"; }
grep -q "^check ran: $out --rehearse T0=[0-9]\+ stale=none" "$out/ran.txt" || fail "check.sh did not get OUTDIR, --rehearse and the clock: $(cat "$out/ran.txt")"

echo "changed after the bundle was built" >>kernel.cu
out=$work/out2
bash suites/device/run_on_device.sh "$out" >"$work/log2" 2>&1
rc=$?
((rc == 3)) || fail "a bundle from another tree must be refused with exit 3, got $rc"
grep -q "built from commit 0123abc, and 1 of its .* source files differ here: kernel.cu" "$work/log2" || { cat "$work/log2"; fail "the refusal does not name the commit and the file"; }
grep -q "rebuild the bundle with: cmake --preset device && cmake --build --preset device" "$work/log2" || fail "the refusal does not give the rebuild command"
grep -q "^# Device check: REFUSED" "$out/summary.md" || fail "no REFUSED summary.md in OUTDIR"
[[ ! -f $out/ran.txt ]] || fail "check.sh ran despite the refusal"

out=$work/out3
bash suites/device/run_on_device.sh "$out" --allow-stale >"$work/log3" 2>&1 || fail "--allow-stale did not run the check"
grep -q "stale=the bundle was built from commit 0123abc" "$out/ran.txt" || fail "--allow-stale did not tell check.sh the bundle is stale"

rm build/device/bundle.tar.xz
bash suites/device/run_on_device.sh "$work/out4" >"$work/log4" 2>&1
(($? == 3)) && grep -q "not found" "$work/log4" && grep -q "rebuild the bundle with" "$work/log4" || fail "a missing archive is not refused with the rebuild command"
echo "test_run_on_device: ok"
