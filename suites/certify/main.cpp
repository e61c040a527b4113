// mla-certify: certifies every attention implementation against the golden catalog.
//
// Exit status: 0 nothing FAILed or ERRORed; 1 something did (or the certificate could not be
// written); 2 bad usage or an unusable catalog. Progress goes to stderr; stdout carries only the
// final one-screen summary.
#include <iostream>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "certifier.hpp"
#include "mla/core/error.hpp"
#include "mla/fixtures/golden.hpp"

int main(int argc, char** argv) {
  mla::certify::Options o;
  CLI::App app{"Certify MLA attention implementations against the golden catalog", "mla-certify"};
  app.add_option("--goldens", o.goldens, "golden catalog folder (MANIFEST.sha256 + *.h5)");
  app.add_option("--out", o.out, "report folder: certificate.json and certificate.md")->required();
  app.add_option("--kernel", o.kernels, "only these implementations (repeatable)");
  app.add_option("--family", o.families, "only these families: attn_core, attn_fp8, attn_sparse, attn_stress");
  app.add_option("--case", o.case_regex, "only cases whose '<family>/<case>' matches this regex (ECMAScript)");
  app.add_option("--max-tokens", o.max_tokens,
                 "skip (as SKIPPED) cases whose cache holds more tokens, e.g. 32768 leaves out the 128K case")
      ->check(CLI::PositiveNumber);
  app.add_option("--repeat", o.repeats, "runs per case; every run must give bitwise identical results")
      ->check(CLI::Range(1, 100))
      ->capture_default_str();
  app.add_option("--kernel-extra", o.extras,
                 "test only: add a deliberately broken implementation (dropped_last: ignores each "
                 "sequence's last cached token; throws, leaky, bf16_only: certifier self-tests)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  if (o.goldens.empty()) o.goldens = mla::fixtures::default_goldens_dir();

  try {
    const auto cert = mla::certify::run(o, std::cerr);
    std::cout << mla::reports::summary(cert);
    std::cout << fmt::format("certificate: {}, {}\n", (o.out / "certificate.json").string(),
                             (o.out / "certificate.md").string());
    return mla::reports::is_red(cert) ? 1 : 0;
  } catch (const mla::certify::UsageError& e) {
    std::cerr << "mla-certify: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "mla-certify: " << e.what() << "\n";
    return 1;
  }
}
