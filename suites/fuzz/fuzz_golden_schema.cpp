// libFuzzer target, structure-aware: the input bytes choose the *contents* of a golden file
// (families, case attributes and their types, dataset shapes, storage types, dtype attributes,
// block tables, lengths, indices, start positions, generated-tensor descriptors with matching or
// wrong digests, FP8 bytes with a matching or wrong dequantization, a named or absent FP8 scale
// recipe, prefill cu_seqlens, needles and empty rows, merge sides with infinite lse) and HDF5
// writes a well-formed file from them. fuzz_golden_loader mutates bytes, so most of its inputs
// stop in HDF5's own parsing; here HDF5 always reads a sound file and every execution reaches
// the loader's schema checks and its arithmetic (paging, slot poisoning, FP8 check, step bounds,
// cu_seqlens, the empty-row rules of prefill and merge results). Mostly consistent choices with
// rare deviations keep it deep: each attribute or dataset is usually right, and sometimes
// missing, of the wrong type, of another shape, or huge.
//
// Same contract as fuzz_golden_loader: mla::Error is the expected refusal; anything else, a
// sanitizer report, an allocation above the limit or an HDF5 handle left open is a finding.
#include <fuzzer/FuzzedDataProvider.h>
#include <hdf5.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "exercise.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"
#include "schema_builder.hpp"

namespace mla::fuzz::schema {

void Builder::file(hid_t f) {
  rarity = in.PickValueInArray({1, 4, 16, 0});
  const std::string family = pick_family();
  i64(f, "schema_version", odd() ? num(0, 3) : mla::golden::kSchemaVersion);
  str(f, "family", family);
  str(f, "generator_version", "fuzz");
  const hid_t cases = group(f, "cases");
  if (cases < 0) return;
  // Cases of the family's kind; rarely a case of another kind in its place.
  const mla::golden::Family* known = mla::golden::find_family(family);
  using mla::golden::FamilyKind;
  const int n = in.ConsumeIntegralInRange<int>(odd() ? 0 : 1, 2);
  for (int i = 0; i < n; ++i) {
    FamilyKind kind = known ? known->kind : FamilyKind::attention;
    if (odd()) {
      kind = in.PickValueInArray(
          {FamilyKind::attention, FamilyKind::layer, FamilyKind::prefill, FamilyKind::merge, FamilyKind::indexer});
    }
    switch (kind) {
      case FamilyKind::layer: layer_case(cases, family); break;
      case FamilyKind::prefill: prefill_case(cases, family); break;
      case FamilyKind::merge: merge_case(cases, family); break;
      case FamilyKind::indexer: indexer_case(cases, family); break;
      default: attn_case(cases, family); break;
    }
  }
  if (odd()) H5Gclose(group(cases, "Not_A_Valid_Name"));
  H5Gclose(cases);
}

}  // namespace mla::fuzz::schema

namespace {

std::filesystem::path g_scratch;

}  // namespace


extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_scratch = mla::fuzz::scratch_dir() / ("mla_fuzz_schema_" + std::to_string(::getpid()) + ".h5");
  std::atexit([] {
    std::error_code e;
    std::filesystem::remove(g_scratch, e);
  });
  // As in fuzz_golden_loader: HDF5 keeps its fixed-size blocks instead of mapping fresh pages.
  H5set_free_list_limits(-1, -1, 4 << 20, 256 << 10, 16 << 20, 1 << 20);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // the builder's own refusals stay quiet
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider in(data, size);
  {
    const hid_t f = H5Fcreate(g_scratch.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
      std::fprintf(stderr, "fuzz_golden_schema: cannot create %s\n", g_scratch.c_str());
      std::abort();
    }
    mla::fuzz::schema::Builder{in}.file(f);
    H5Fclose(f);
  }
  (void)mla::fuzz::exercise_golden_file(g_scratch);
  if (const long open = mla::fuzz::open_hdf5_objects(); open != 0) {
    std::fprintf(stderr, "fuzz_golden_schema: %ld HDF5 object(s) left open after the input\n", open);
    std::abort();
  }
  return 0;
}
