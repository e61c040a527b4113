#include "exercise.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include <hdf5.h>

#include "mla/core/error.hpp"
#include "mla/golden/families.hpp"
#include "mla/golden/golden.hpp"

namespace mla::fuzz {

namespace fx = mla::golden;

namespace {

bool is_family(const std::string& f, fx::FamilyKind kind) {
  const fx::Family* fam = fx::find_family(f);
  return fam && fam->kind == kind;
}

// Runs one entry point; a refusal is counted, anything else escapes.
template <class F>
bool attempt(Outcome& o, F&& f) {
  ++o.calls;
  try {
    f();
    return true;
  } catch (const mla::Error& e) {
    ++o.refused;
    if (o.first_error.empty()) o.first_error = e.what();
    return false;
  }
}

}  // namespace

Outcome exercise_golden_file(const std::filesystem::path& file) {
  Outcome o;
  std::string family;
  std::vector<std::string> names;
  attempt(o, [&] {
    fx::FileInfo info = fx::read_file_info(file);
    family = info.family;
    names = std::move(info.cases);
  });
  // summarize_cases reads attributes read_file_info does not (kind, shape...): it runs even
  // when read_file_info refused, and supplies the case names if only it got that far.
  attempt(o, [&] {
    const auto summaries = fx::summarize_cases(file);
    if (names.empty()) {
      for (const auto& s : summaries) names.push_back(s.name);
    }
  });
  const bool attn = family.empty() || is_family(family, fx::FamilyKind::attention);
  const bool layer = family.empty() || is_family(family, fx::FamilyKind::layer);
  const bool prefill = family.empty() || is_family(family, fx::FamilyKind::prefill);
  const bool merge = family.empty() || is_family(family, fx::FamilyKind::merge);
  const bool indexer = family.empty() || is_family(family, fx::FamilyKind::indexer);
  for (const auto& name : names) {
    if (attn && attempt(o, [&] { (void)fx::load_attn_case(file, name); })) ++o.loaded;
    if (layer && attempt(o, [&] { (void)fx::load_layer_case(file, name); })) ++o.loaded;
    if (prefill && attempt(o, [&] { (void)fx::load_prefill_case(file, name); })) ++o.loaded;
    if (merge && attempt(o, [&] { (void)fx::load_merge_case(file, name); })) ++o.loaded;
    if (indexer && attempt(o, [&] { (void)fx::load_indexer_case(file, name); })) ++o.loaded;
  }
  return o;
}

Outcome exercise_catalog(const std::filesystem::path& dir) {
  Outcome o;
  fx::Catalog c;
  if (attempt(o, [&] { c = fx::open_catalog(dir, /*verify_files=*/false); })) {
    for (const auto& entry : c.sha256) {
      const std::string& name = entry.first;
      attempt(o, [&] { (void)c.file(name); });
      attempt(o, [&] { fx::verify_file(c, name); });
    }
  }
  attempt(o, [&] { (void)fx::open_catalog(dir, /*verify_files=*/true); });
  return o;
}

long open_hdf5_objects() {
  // Datatypes are left out: the C++ API holds its PredType constants open for the whole run.
  return static_cast<long>(H5Fget_obj_count(
      H5F_OBJ_ALL, H5F_OBJ_FILE | H5F_OBJ_DATASET | H5F_OBJ_GROUP | H5F_OBJ_ATTR));
}

std::filesystem::path scratch_dir() {
  if (const char* env = std::getenv("MLA_FUZZ_SCRATCH"); env && *env) {
    std::filesystem::create_directories(env);
    return env;
  }
  std::error_code ec;
  if (std::filesystem::is_directory("/dev/shm", ec) && ::access("/dev/shm", W_OK) == 0) return "/dev/shm";
  return std::filesystem::temp_directory_path();
}

void write_bytes(const std::filesystem::path& path, const uint8_t* data, std::size_t size) {
  const std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!f || (size > 0 && std::fwrite(data, 1, size, f.get()) != size)) {
    throw mla::Error("fuzz: cannot write " + path.string());
  }
}

}  // namespace mla::fuzz
