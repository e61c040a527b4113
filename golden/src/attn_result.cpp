// Results of implementations on attention cases, read for `mla judge` (golden.hpp says the
// format). Read with the golden loader's Reader, so a result file meets the checks a golden file
// meets and an odd one cannot make the judge read past what it holds.
#include <filesystem>
#include <initializer_list>
#include <system_error>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "h5io.hpp"
#include "mla/core/error.hpp"
#include "mla/golden/golden.hpp"

namespace mla::golden {

using detail::Reader;

namespace {

// The dtype attribute of `dataset`, refused unless it is one of `allowed`.
std::string stored_dtype(const Reader& r, const std::string& dataset, std::initializer_list<std::string_view> allowed) {
  if (!r.is_dataset(dataset)) r.fail(dataset, "a dataset", r.exists(dataset) ? "a group" : "missing");
  if (!r.has_attr(dataset, "dtype") || !r.attr_is_string(dataset, "dtype")) {
    r.fail(dataset, "a string attribute 'dtype'", "none");
  }
  const std::string d = r.attr_str(dataset, "dtype");
  for (const auto a : allowed) {
    if (d == a) return d;
  }
  r.fail(dataset, fmt::format("dtype attribute one of {}", fmt::join(allowed, ", ")), fmt::format("'{}'", d));
}

}  // namespace

AttnResult load_attn_result(const std::filesystem::path& file, std::span<const int64_t> out_shape,
                            std::span<const int64_t> lse_shape) {
  // The Reader would call a missing file a missing golden file; this one is a result.
  if (std::error_code ec; !std::filesystem::is_regular_file(file, ec)) {
    throw FixtureError(file.string(), "/", "a result file (HDF5 with /out and /lse)", what_is_there(file));
  }
  const Reader r(file);
  AttnResult res;
  const std::string od = stored_dtype(r, "/out", {"bfloat16", "float32", "float64"});
  res.out_dtype = od == "bfloat16" ? OutDType::bf16 : od == "float32" ? OutDType::f32 : OutDType::f64;
  res.out = detail::read_widened(r, "/out", od, out_shape);
  res.lse = detail::read_widened(r, "/lse", stored_dtype(r, "/lse", {"float32", "float64"}), lse_shape);
  return res;
}

}  // namespace mla::golden
