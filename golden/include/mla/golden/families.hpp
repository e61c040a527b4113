// The catalog description: which golden families exist, what their cases are and how each is
// judged. Declared once, in fixtures/catalog.json, and read from there by everything that needs
// the family list: the Python writer (reference/python/mla_ref/catalog.py), this loader, the
// certifier, `mla goldens`, the fuzzers and the parameterized tests (ValuesIn).
//
// Why a data file rather than a C++ table exported to Python: the writer of the goldens is the
// Python reference, the first link of the chain; it must not need a C++ build to know what to
// write, and the C++ side must not need Python to know what to read. A JSON file both languages
// parse natively serves both, and the build embeds it in mla_golden (golden/CMakeLists.txt), so
// no C++ binary depends on finding the source tree at run time.
//
// A family generated at run time (rather than stored in a file) is described by the same struct,
// marked `generated`: it has no file and no seed of its own. families() lists the stored families
// only (every reader of files wants those); generated_families() the others.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mla::golden {

// How a family's cases are loaded and judged.
enum class FamilyKind {
  attention,  // attention-core cases (load_attn_case): out/lse against truth/*, judge_attention
  layer,      // full-layer cases (load_layer_case): the C++ reference layer against fp64 outputs
  prefill,    // MHA-form varlen prefill cases (load_prefill_case): out/lse against truth/*
  merge,      // merges of two partial attention states (load_merge_case): out/lse against truth/*
  indexer,    // V3.2 indexer steps (load_indexer_case): each stage against the C++ oracles
};
// "attention", "layer", "prefill", "merge", "indexer": the catalog's spelling.
const char* to_string(FamilyKind kind);

// What `mla certify` does with a family: the name of the case kind that certifies its cases
// (certify/include/mla/certify/case_kind.hpp lists the registered kinds and checks that every
// family names one of them, with the family kind its cases need), or kNotCertified.
inline constexpr std::string_view kNotCertified = "none";

struct Family {
  std::string name;        // [a-z0-9_]+, also the file: <name>.h5 and the `family` attribute
  uint64_t seed = 0;       // the writer's base seed for the family's cases (0 for a generated one)
  FamilyKind kind = FamilyKind::attention;
  std::string case_kind;   // the `kind` attribute every case of the family carries
  std::string certify{kNotCertified};  // the case kind that certifies it ("none": the reference's own tests hold it)
  std::string certified_as;  // the family name of its certificate rows (its own unless said)
  std::string about;         // one line: what it is for
  bool generated = false;    // drawn at run time: no stored file, no seed of its own
  std::string file() const { return name + ".h5"; }  // stored families only
  bool certified() const { return certify != kNotCertified; }
};

// The cases `mla certify` draws at run time from the run's seed: the family name of their rows
// (and the file name of its attention rows). Declared in the catalog as a generated family;
// fresh_family() is the check that it is.
inline constexpr std::string_view kFreshFamily = "fresh";

// Every stored family, in catalog order (also the order of certification). Parsed once; a
// malformed description throws mla::Error naming the field.
const std::vector<Family>& families();
// The generated families, in catalog order.
const std::vector<Family>& generated_families();
// The catalog's entry for kFreshFamily; throws mla::Error when the catalog does not declare it,
// or declares it as anything but a generated family.
const Family& fresh_family();
// A stored family; nullptr when unknown (or generated).
const Family* find_family(std::string_view name);
// Throws mla::Error naming the known families.
const Family& family(std::string_view name);
// Names, in catalog order, of the families of one kind / certified by one case kind (for
// ValuesIn and selections).
std::vector<std::string> family_names(FamilyKind kind);
std::vector<std::string> family_names_certified_by(std::string_view case_kind);
std::vector<std::string> family_names();

// The description as parsed from `text` (the JSON of fixtures/catalog.json), stored and
// generated families in catalog order; for tests of the parser. Throws mla::Error naming what is
// wrong.
std::vector<Family> parse_families(std::string_view text);

}  // namespace mla::golden
