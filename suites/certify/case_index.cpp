#include "case_index.hpp"

#include <H5Cpp.h>

#include <limits>
#include <optional>

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla::certify {
namespace {

class Attrs {
 public:
  Attrs(const std::filesystem::path& file, const std::string& name)
      : file_(file.string()), group_path_("/cases/" + name) {
    // HDF5 prints its error stack on every failed call unless told not to; our errors carry
    // the message instead.
    H5::Exception::dontPrint();
    try {
      h5_.openFile(file_, H5F_ACC_RDONLY);
      group_.emplace(h5_.openGroup(group_path_));
    } catch (const H5::Exception& e) {
      throw FixtureError(file_, group_path_, "a readable case group", e.getDetailMsg());
    }
  }

  int64_t integer(const std::string& attr, int64_t lo, int64_t hi) const {
    int64_t v = 0;
    try {
      H5::Attribute a = group_->openAttribute(attr);
      if (a.getTypeClass() != H5T_INTEGER) throw FixtureError(file_, where(attr), "an integer attribute", "another type");
      a.read(H5::PredType::NATIVE_INT64, &v);
    } catch (const H5::Exception& e) {
      throw FixtureError(file_, where(attr), "an integer attribute", e.getDetailMsg());
    }
    if (v < lo || v > hi) throw FixtureError(file_, where(attr), fmt::format("a value in [{}, {}]", lo, hi), std::to_string(v));
    return v;
  }

  std::string string(const std::string& attr) const {
    std::string v;
    try {
      H5::Attribute a = group_->openAttribute(attr);
      if (a.getTypeClass() != H5T_STRING) throw FixtureError(file_, where(attr), "a string attribute", "another type");
      a.read(a.getStrType(), v);
    } catch (const H5::Exception& e) {
      throw FixtureError(file_, where(attr), "a string attribute", e.getDetailMsg());
    }
    return v;
  }

  bool has(const std::string& attr) const {
    try {
      return group_->attrExists(attr);
    } catch (const H5::Exception&) {
      return false;
    }
  }

 private:
  std::string where(const std::string& attr) const { return group_path_ + "@" + attr; }
  std::string file_, group_path_;
  H5::H5File h5_;
  std::optional<H5::Group> group_;
};

}  // namespace

CaseHeader read_case_header(const std::filesystem::path& file, const std::string& name) {
  const Attrs a(file, name);
  constexpr int64_t kMax = std::numeric_limits<int32_t>::max();
  CaseHeader h;
  h.name = name;
  h.description = a.string("description");
  auto& s = h.shape;
  s.batch = static_cast<int>(a.integer("batch", 1, kMax));
  s.s_q = static_cast<int>(a.integer("s_q", 1, kMax));
  s.heads = static_cast<int>(a.integer("heads", 1, kMax));
  s.d_qk = static_cast<int>(a.integer("d_qk", 1, kMax));
  s.d_v = static_cast<int>(a.integer("d_v", 1, kMax));
  s.page_size = static_cast<int>(a.integer("page_size", 1, kMax));
  s.num_blocks = static_cast<int>(a.integer("num_blocks", 1, kMax));
  s.max_blocks = static_cast<int>(a.integer("max_blocks", 1, kMax));
  s.topk = static_cast<int>(a.integer("topk", 0, kMax));
  s.causal = a.integer("causal", 0, 1) != 0;
  const auto format = a.string("cache_format");
  if (format == "bf16") {
    s.cache_format = CacheFormat::bf16;
  } else if (format == "fp8") {
    s.cache_format = CacheFormat::fp8;
    if (a.has("scale_fmt")) h.scale_fmt = a.string("scale_fmt");
  } else {
    throw FixtureError(file.string(), "/cases/" + name + "@cache_format", "'bf16' or 'fp8'", "'" + format + "'");
  }
  return h;
}

}  // namespace mla::certify
