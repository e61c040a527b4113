// mla-golden-info: lists a golden catalog (files, families, cases with their shapes) after
// verifying its manifest; with --load it also loads every case through the full loader checks
// (dtype, shape, paging invariants, regenerated-input sha256).
//
// Exit status: 0 all good, 1 a fixture error (message on stderr), 2 bad usage.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/fixtures/golden.hpp"

namespace fx = mla::fixtures;

namespace {

bool is_attention(const std::string& family) {
  return family == "attn_core" || family == "attn_fp8" || family == "attn_sparse" || family == "attn_stress";
}

int run(const std::string& dir, bool verify, bool load, const std::string& only_file) {
  const auto t0 = std::chrono::steady_clock::now();
  const fx::Catalog cat = fx::open_catalog(dir, verify);
  fmt::print("catalog {} ({} files, manifest {})\n", cat.dir.string(), cat.sha256.size(),
             verify ? "verified" : "NOT verified");
  if (!only_file.empty()) (void)cat.file(only_file);  // refuses a name the manifest lacks
  std::size_t n_cases = 0;
  for (const auto& [name, digest] : cat.sha256) {
    if (!only_file.empty() && name != only_file) continue;
    const auto path = cat.file(name);
    const fx::FileInfo info = fx::read_file_info(path);
    const auto gv = info.provenance.find("generator_version");
    fmt::print("\n{}  family={} schema={} sha256={}... generator={}\n", name, info.family,
               info.schema_version, digest.substr(0, 12),
               gv == info.provenance.end() ? std::string("?") : gv->second);
    for (const auto& c : fx::summarize_cases(path)) {
      ++n_cases;
      std::string status;
      if (load) {
        const auto c0 = std::chrono::steady_clock::now();
        if (is_attention(info.family)) {
          (void)fx::load_attn_case(path, c.name);
        } else {
          (void)fx::load_layer_case(path, c.name);
        }
        const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - c0).count();
        status = fmt::format("  loaded {:.0f} ms", ms);
      }
      fmt::print("  {:<28} {:<9} {}  [{}]{}\n      {}\n", c.name, c.inputs_stored ? "stored" : "generated",
                 c.shape, c.kind, status, c.description);
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print("\n{} cases{}, {:.2f} s\n", n_cases, load ? " loaded and checked" : "", s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"List (and optionally load and check) a golden catalog (fixtures/SCHEMA.md)"};
  std::string dir = fx::default_goldens_dir().string();
  bool no_verify = false, load = false;
  std::string only_file;
  app.add_option("--dir", dir, "catalog folder (default: $MLA_GOLDENS_DIR or the build's)");
  app.add_flag("--no-verify", no_verify, "parse MANIFEST.sha256 without checking the files' digests");
  app.add_flag("--load", load, "load every case through the loader's checks");
  app.add_option("--file", only_file, "only this file of the catalog");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is not an error
  }
  try {
    return run(dir, !no_verify, load, only_file);
  } catch (const mla::FixtureError& e) {
    std::fflush(stdout);
    std::cerr << "mla-golden-info: " << e.what() << "\n";
    return 1;
  } catch (const mla::Error& e) {
    std::fflush(stdout);
    std::cerr << "mla-golden-info: " << e.what() << "\n";
    return 1;
  }
}
