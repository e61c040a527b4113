// L0: the `mla` command line besides the full certification — subcommand dispatch and the
// mla-certify alias, `goldens` (on the tiny committed catalog fixtures/bad/good and broken
// copies of it), `kernels` (the registry listing that scripts select kernels by), `memory` (the
// byte model against docs/field.md, the Python presets and the allocations of the
// implementations), `report`, and a plug-in certified end to end on the tiny catalog.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "memory.hpp"
#include "mla/core/presets.hpp"
#include "mla/plugin/mla_plugin.h"
#include "mla/core/sha256.hpp"
#include "mla/golden/golden.hpp"
#include "mla/registry/registry.hpp"
#include "mla/reports/certificate.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::certify::testing::kFresh;
using mla::certify::testing::plugin_path;
using mla::certify::testing::Proc;
using mla::certify::testing::quote;
using mla::certify::testing::run_command;
using mla::certify::testing::slurp;
using mla::certify::testing::TempDir;
using nlohmann::json;

const std::string kMla = MLA_CLI_EXE;
const fs::path kTiny = fs::path(MLA_SOURCE_DIR) / "fixtures" / "bad" / "good";

Proc mla(const std::string& args) { return run_command(kMla + " " + args); }

TEST(MlaCli, SubcommandsAndTheAlias) {
  EXPECT_EQ(mla("--help >/dev/null").status, 0);
  EXPECT_EQ(mla("2>/dev/null").status, 2) << "a subcommand is required";
  EXPECT_EQ(mla("frobnicate 2>/dev/null").status, 2);
  const auto help = run_command(std::string(MLA_CERTIFY_EXE) + " --help");
  EXPECT_EQ(help.status, 0);
  EXPECT_NE(help.out.find("--plugin"), std::string::npos) << "mla-certify is not `mla certify`: " << help.out;
  EXPECT_NE(help.out.find("--resume"), std::string::npos);
  EXPECT_EQ(help.out.find("__child"), std::string::npos);
  EXPECT_EQ(mla("--help").out.find("__child"), std::string::npos) << "the child mode is internal";
}

// A value out of range is refused (exit 2) in words that name the flag and the rule, never with
// the largest double written out, and values that would overflow later are refused too.
TEST(MlaCli, OutOfRangeValuesAreRefusedInWords) {
  struct Bad {
    std::string args, says;
  };
  for (const Bad& b : {Bad{"certify --timeout -1", "--timeout: -1 must be a number > 0"},
                       Bad{"certify --timeout 1e300", "<= 1e+06 s"},
                       Bad{"certify --max-tokens 0", "--max-tokens: 0 must be a number > 0"},
                       Bad{"certify --seed -1", "'-1' is not an unsigned 64-bit integer"},
                       Bad{"certify --seed 18446744073709551616", "is not an unsigned 64-bit integer"},
                       Bad{"memory --heads -3", "--heads: -3 must be a number > 0"}}) {
    const auto p = mla(b.args + " 2>&1");
    EXPECT_EQ(p.status, 2) << b.args << ": " << p.out;
    EXPECT_NE(p.out.find(b.says), std::string::npos) << b.args << ": " << p.out;
    int run = 0, longest = 0;
    for (const char c : p.out) longest = std::max(longest, run = std::isdigit(static_cast<unsigned char>(c)) ? run + 1 : 0);
    EXPECT_LT(longest, 25) << b.args << " prints a number of " << longest << " digits: " << p.out;
  }
}

// ---- goldens ---------------------------------------------------------------------------------

TEST(MlaGoldens, ListValidateInspectTheTinyCatalog) {
  const auto list = mla("goldens --dir " + quote(kTiny) + " list");
  ASSERT_EQ(list.status, 0) << list.out;
  const auto cat = mla::golden::open_catalog(kTiny);
  for (const auto& [file, digest] : cat.sha256) {
    EXPECT_NE(list.out.find(file + "  family="), std::string::npos) << list.out;
    EXPECT_NE(list.out.find(digest), std::string::npos);
    for (const auto& c : mla::golden::read_file_info(cat.file(file)).cases) EXPECT_NE(list.out.find(c), std::string::npos);
  }
  const auto valid = mla("goldens --dir " + quote(kTiny) + " validate");
  EXPECT_EQ(valid.status, 0) << valid.out;
  EXPECT_NE(valid.out.find("VALID: 2 files, 3 cases"), std::string::npos) << valid.out;

  const auto c = mla::golden::load_attn_case(cat.file("attn_core.h5"), "dense_stored");
  const auto inspect = mla("goldens --dir " + quote(kTiny) + " inspect attn_core.h5 dense_stored");
  ASSERT_EQ(inspect.status, 0) << inspect.out;
  EXPECT_NE(inspect.out.find(fmt::format("cache_seqlens [{}]", fmt::join(c.cache_seqlens, ", "))), std::string::npos)
      << inspect.out;
  EXPECT_NE(inspect.out.find(c.description), std::string::npos);
  EXPECT_NE(inspect.out.find("truth lse"), std::string::npos);
  // The sentinel in the unused block-table entry is shown as the file has it.
  EXPECT_NE(inspect.out.find(std::to_string(c.sentinel_block_id)), std::string::npos) << inspect.out;

  const auto missing = mla("goldens --dir " + quote(kTiny) + " inspect attn_core.h5 no_such_case 2>&1");
  EXPECT_EQ(missing.status, 1);
  EXPECT_NE(missing.out.find("dense_generated"), std::string::npos) << "the error lists the cases: " << missing.out;
  EXPECT_EQ(mla("goldens --dir " + quote(kTiny) + " 2>/dev/null").status, 2);
}

TEST(MlaGoldens, ListShowsEachCaseShapeAndRefusesACorruptCatalogWithTheReason) {
  const auto list = mla("goldens --dir " + quote(kTiny) + " list");
  ASSERT_EQ(list.status, 0) << list.out;
  for (const char* s : {"manifest verified", "attn_core.h5  family=attn_core schema=1", "dense_stored", "generated",
                        "b=1 s_q=2 h=1 page=2 blocks=3 max_blocks=3 bf16 dense causal", "attn_fp8.h5  family=attn_fp8",
                        "fp8/ue8m0", "3 cases"}) {
    EXPECT_NE(list.out.find(s), std::string::npos) << "missing '" << s << "' in:\n" << list.out;
  }
  const auto bad = mla("goldens --dir " + quote(fs::path(MLA_SOURCE_DIR) / "fixtures" / "bad" / "manifest_wrong_sha256") +
                       " list 2>&1");
  EXPECT_EQ(bad.status, 1) << bad.out;
  EXPECT_NE(bad.out.find("mla goldens: "), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("attn_core.h5"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("sha256"), std::string::npos) << bad.out;
  EXPECT_EQ(mla("goldens --dir " + quote(kTiny) + " inspect attn_sparse.h5 x 2>/dev/null").status, 1)
      << "a file the manifest does not list";
  EXPECT_EQ(mla("goldens --no-such-option 2>/dev/null").status, 2);
}

// The indexer family of the committed catalog: each step's logits shape in `inspect`, the
// layout and scale format of every case in `list`, both from what the loader read.
TEST(MlaGoldens, InspectAndListShowTheIndexerStepsAndTheirConventions) {
  const fs::path dir = fs::path(MLA_SOURCE_DIR) / "fixtures" / "goldens";
  if (!fs::exists(dir / "indexer.h5")) GTEST_SKIP() << "no indexer family at " << dir;
  const auto file = dir / "indexer.h5";
  const auto cases = mla::golden::read_file_info(file).cases;
  ASSERT_FALSE(cases.empty());
  const auto c = mla::golden::load_indexer_case(file, cases.front());
  const auto inspect = mla("goldens --dir " + quote(dir) + " inspect indexer.h5 " + c.name);
  ASSERT_EQ(inspect.status, 0) << inspect.out;
  EXPECT_NE(inspect.out.find(c.description), std::string::npos) << inspect.out;
  for (const auto& s : c.steps) {
    EXPECT_NE(inspect.out.find(fmt::format("step at {} ({} token", s.start_pos, s.seqlen)), std::string::npos) << inspect.out;
    EXPECT_NE(inspect.out.find(fmt::format("logits [{}, {}, {}]", c.batch, s.seqlen, s.end_pos())), std::string::npos)
        << inspect.out;
  }
  const auto list = mla("goldens --dir " + quote(dir) + " list");
  ASSERT_EQ(list.status, 0) << list.out;
  for (const auto& name : cases) {
    const auto k = mla::golden::load_indexer_case(file, name);
    EXPECT_NE(list.out.find(fmt::format("heads={} steps={} top-{} rope {} {}", k.heads, k.steps.size(), k.index_topk,
                                        k.rope_layout, mla::to_string(k.scale_fmt))),
              std::string::npos)
        << name << " in:\n" << list.out;
  }
}

TEST(MlaGoldens, ValidateListsEveryProblem) {
  TempDir tmp;
  const auto dir = tmp.path() / "cat";
  fs::create_directories(dir);
  for (const auto& e : fs::directory_iterator(kTiny)) {
    if (e.path().extension() == ".h5" || e.path().filename() == "MANIFEST.sha256") fs::copy(e.path(), dir / e.path().filename());
  }
  std::ofstream(dir / "attn_fp8.h5", std::ios::app) << "x";            // digest no longer matches
  fs::copy(dir / "attn_core.h5", dir / "stowaway.h5");                  // not in the manifest
  const auto p = mla("goldens --dir " + quote(dir) + " validate");
  EXPECT_EQ(p.status, 1) << p.out;
  EXPECT_NE(p.out.find("FAIL attn_fp8.h5:"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("sha256"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("FAIL stowaway.h5: not listed"), std::string::npos) << p.out;
  EXPECT_NE(p.out.find("ok   attn_core.h5"), std::string::npos) << "a good file is still checked: " << p.out;
  EXPECT_NE(p.out.find("INVALID"), std::string::npos);

  // A file whose digest is vouched for but whose content breaks a loader rule: the case is named.
  const auto dir2 = tmp.path() / "cat2";
  fs::create_directories(dir2);
  fs::copy(fs::path(MLA_SOURCE_DIR) / "fixtures" / "bad" / "block_out_of_range.h5", dir2 / "attn_core.h5");
  std::ofstream(dir2 / "MANIFEST.sha256") << mla::sha256_file(dir2 / "attn_core.h5") << "  attn_core.h5\n";
  const auto q = mla("goldens --dir " + quote(dir2) + " validate");
  EXPECT_EQ(q.status, 1) << q.out;
  EXPECT_NE(q.out.find("FAIL attn_core.h5/"), std::string::npos) << q.out;
  EXPECT_NE(q.out.find("block_table"), std::string::npos) << q.out;
}

// ---- kernels -----------------------------------------------------------------------------------

// `mla kernels --json` is how scripts (the device check) select kernels: it must list every
// registered implementation, in registration order, with the backend and role the registry
// holds, and the table must name each of them.
TEST(MlaKernels, ListsEveryRegisteredImplementationWithItsBackendAndRole) {
  const auto p = mla("kernels --json");
  ASSERT_EQ(p.status, 0) << p.out;
  const auto listed = json::parse(p.out);
  mla::register_builtin_kernels();
  const auto& registered = mla::Registry::instance().attention();
  const auto& prefill = mla::Registry::instance().prefill();
  const auto& merge = mla::Registry::instance().merge();
  const auto& topk = mla::Registry::instance().topk();
  const auto& indexer_append = mla::Registry::instance().indexer_append();
  const auto& indexer_logits = mla::Registry::instance().indexer_logits();
  const auto& sparse_prefill = mla::Registry::instance().sparse_prefill();
  ASSERT_EQ(listed.size(), registered.size() + prefill.size() + merge.size() + topk.size() + indexer_append.size() +
                               indexer_logits.size() + sparse_prefill.size())
      << p.out;
  ASSERT_FALSE(sparse_prefill.empty());
  for (std::size_t i = 0; i < sparse_prefill.size(); ++i) {
    const auto& k = sparse_prefill[i]->info();
    const auto& e = listed[listed.size() - sparse_prefill.size() + i];
    EXPECT_EQ(e["name"], k.name);
    EXPECT_EQ(e["kind"], "sparse_prefill");
    EXPECT_EQ(e["capabilities"]["topk_multiple"], k.topk_multiple);
  }
  ASSERT_FALSE(indexer_logits.empty());
  for (std::size_t i = 0; i < indexer_logits.size(); ++i) {
    const auto& k = indexer_logits[i]->info();
    const auto& e = listed[registered.size() + prefill.size() + merge.size() + topk.size() + indexer_append.size() + i];
    EXPECT_EQ(e["name"], k.name);
    EXPECT_EQ(e["kind"], "indexer_logits");
    EXPECT_EQ(e["capabilities"]["next_ns"], k.next_ns);
    EXPECT_EQ(e["capabilities"]["layouts"].size(), k.layouts.size());
  }
  for (std::size_t i = 0; i < indexer_append.size(); ++i) {
    const auto& e = listed[registered.size() + prefill.size() + merge.size() + topk.size() + i];
    EXPECT_EQ(e["name"], indexer_append[i]->info().name);
    EXPECT_EQ(e["kind"], "indexer_append");
    EXPECT_EQ(e["capabilities"]["fp32_scale_op"], mla::to_string(indexer_append[i]->info().conventions.fp32_scale_op));
  }
  for (std::size_t i = 0; i < topk.size(); ++i) {
    const auto& e = listed[registered.size() + prefill.size() + merge.size() + i];
    EXPECT_EQ(e["name"], topk[i]->info().name);
    EXPECT_EQ(e["kind"], "topk");
    EXPECT_EQ(e["capabilities"]["conventions"], mla::to_json(topk[i]->info().conventions));
  }
  for (std::size_t i = 0; i < merge.size(); ++i) {
    const auto& e = listed[registered.size() + prefill.size() + i];
    EXPECT_EQ(e["name"], merge[i]->info().name);
    EXPECT_EQ(e["kind"], "merge");
  }
  for (std::size_t i = 0; i < prefill.size(); ++i) {
    const auto& e = listed[registered.size() + i];
    EXPECT_EQ(e["name"], prefill[i]->info().name);
    EXPECT_EQ(e["kind"], "prefill");
    EXPECT_EQ(e["capabilities"], mla::to_json(prefill[i]->info().caps));
  }
  std::set<std::string> backends;
  for (std::size_t i = 0; i < registered.size(); ++i) {
    const auto& k = registered[i]->info();
    EXPECT_EQ(listed[i]["name"], k.name);
    EXPECT_EQ(listed[i]["kind"], "decode") << k.name;
    EXPECT_EQ(listed[i]["backend"], k.backend) << k.name;
    EXPECT_EQ(listed[i]["role"], mla::to_string(k.role)) << k.name;
    EXPECT_EQ(listed[i]["out_dtype"], mla::to_string(k.out_dtype)) << k.name;
    EXPECT_EQ(listed[i]["capabilities"], mla::to_json(k.caps)) << k.name;
    backends.insert(listed[i]["backend"].get<std::string>());
  }
  EXPECT_TRUE(backends.count("cpu")) << "the host kernels are always built: " << p.out;
  const auto table = mla("kernels");
  EXPECT_EQ(table.status, 0);
  for (const auto& k : registered) EXPECT_NE(table.out.find(k->info().name), std::string::npos) << table.out;
  for (const auto& k : prefill) EXPECT_NE(table.out.find(k->info().name), std::string::npos) << table.out;
  for (const auto& k : topk) EXPECT_NE(table.out.find(k->info().name), std::string::npos) << table.out;
  for (const auto& k : indexer_append) EXPECT_NE(table.out.find(k->info().name), std::string::npos) << table.out;
  for (const auto& k : indexer_logits) EXPECT_NE(table.out.find(k->info().name), std::string::npos) << table.out;
}

// ---- memory ----------------------------------------------------------------------------------

json memory_json(const std::string& args) {
  const auto p = mla("memory --json " + args);
  EXPECT_EQ(p.status, 0) << p.out;
  return json::parse(p.out);
}

TEST(MlaMemory, ByteModelMatchesDocsField) {
  // docs/field.md, "KV-cache bytes per token and layer": naive MHA 81 920 B (128 heads) and
  // 10 240 B (16 heads), MLA bf16 1 152, latent only 1 024, FP8 656, indexer +132.
  const auto v3 = memory_json("--preset v3");
  EXPECT_EQ(v3["layouts"]["naive_mha_bf16"]["bytes_per_token_per_layer"], 81920);
  EXPECT_EQ(v3["layouts"]["mla_bf16"]["bytes_per_token_per_layer"], 1152);
  EXPECT_EQ(v3["layouts"]["latent_bf16"]["bytes_per_token_per_layer"], 1024);
  EXPECT_EQ(v3["layouts"]["mla_fp8_v32"]["bytes_per_token_per_layer"], 656);
  EXPECT_EQ(v3["layouts"]["indexer_v32"]["bytes_per_token_per_layer"], 132);
  EXPECT_EQ(memory_json("--preset v3-tp8")["layouts"]["naive_mha_bf16"]["bytes_per_token_per_layer"], 10240);
  EXPECT_EQ(memory_json("--preset v2-lite")["layouts"]["naive_mha_bf16"]["bytes_per_token_per_layer"], 10240);

  // Totals: bytes/token/layer x context x batch x layers, defaults from the preset.
  const auto& p = mla::preset("v3");
  EXPECT_EQ(v3["layers"], p.n_layers);
  EXPECT_EQ(v3["context"], p.config.max_seq_len);
  EXPECT_DOUBLE_EQ(v3["layouts"]["mla_bf16"]["total_bytes"].get<double>(),
                   1152.0 * static_cast<double>(p.config.max_seq_len) * static_cast<double>(p.n_layers));
  const auto custom = memory_json("--preset v3 --heads 20 --context 1000 --batch 3 --layers 2");
  EXPECT_EQ(custom["layouts"]["naive_mha_bf16"]["bytes_per_token_per_layer"], 2 * 20 * (128 + 64 + 128));
  EXPECT_DOUBLE_EQ(custom["layouts"]["naive_mha_bf16"]["total_bytes"].get<double>(), 2.0 * 20 * 320 * 1000 * 3 * 2);
  EXPECT_EQ(custom["preset"], "v3 (modified)");

  // Layouts that do not exist for a config say why instead of inventing a number.
  const auto tiny = memory_json("--preset tiny");
  EXPECT_TRUE(tiny["layouts"]["mla_fp8_v32"].contains("not_applicable"));
  EXPECT_NE(tiny["layouts"]["mla_fp8_v32"]["not_applicable"].get<std::string>().find("multiple"), std::string::npos);

  const auto bad = mla("memory --preset v4 2>&1");
  EXPECT_EQ(bad.status, 2);
  EXPECT_NE(bad.out.find("known: tiny"), std::string::npos) << bad.out;
  const auto table = mla("memory --preset v3");
  EXPECT_EQ(table.status, 0);
  EXPECT_NE(table.out.find("81 920"), std::string::npos) << table.out;
}

TEST(MlaMemory, PresetTableAndByteModelAgreeWithThePythonReference) {
  const std::string script =
      "import json, sys\n"
      "sys.path.insert(0, sys.argv[1])\n"
      "from mla_ref.config import PRESETS, FIELDS, kv_bytes_per_token\n"
      "out = {}\n"
      "for name, a in PRESETS.items():\n"
      "    d = {f: getattr(a, f) for f in FIELDS}\n"
      "    kv = {}\n"
      "    for layout in ('naive_bf16', 'mla_bf16', 'latent_bf16', 'fp8_v32'):\n"
      "        try:\n"
      "            kv[layout] = kv_bytes_per_token(a, layout)\n"
      "        except AssertionError:\n"
      "            kv[layout] = None\n"
      "    d['kv'] = kv\n"
      "    out[name] = d\n"
      "print(json.dumps(out))\n";
  TempDir tmp;
  std::ofstream(tmp.path() / "dump.py") << script;
  const auto p = run_command("/usr/bin/python3 " + quote(tmp.path() / "dump.py") + " " +
                             quote(fs::path(MLA_SOURCE_DIR) / "reference" / "python") + " 2>&1");
  if (p.status != 0) GTEST_SKIP() << "the Python reference cannot be imported here: " << p.out;
  const auto py = json::parse(p.out);
  std::set<std::string> cpp_names, py_names;
  for (const auto& pr : mla::presets()) cpp_names.insert(pr.name);
  for (const auto& [name, v] : py.items()) py_names.insert(name);
  EXPECT_EQ(cpp_names, py_names);
  const std::map<std::string, mla::KvLayout> layouts{{"naive_bf16", mla::KvLayout::naive_bf16},
                                                     {"mla_bf16", mla::KvLayout::mla_bf16},
                                                     {"latent_bf16", mla::KvLayout::latent_bf16},
                                                     {"fp8_v32", mla::KvLayout::fp8_v32}};
  for (const auto& pr : mla::presets()) {
    if (!py.contains(pr.name)) continue;
    SCOPED_TRACE(pr.name);
    const auto& j = py[pr.name];
    const auto& c = pr.config;
    EXPECT_EQ(j["dim"], c.dim);
    EXPECT_EQ(j["n_heads"], c.n_heads);
    EXPECT_EQ(j["q_lora_rank"], c.q_lora_rank);
    EXPECT_EQ(j["kv_lora_rank"], c.kv_lora_rank);
    EXPECT_EQ(j["qk_nope_head_dim"], c.qk_nope_head_dim);
    EXPECT_EQ(j["qk_rope_head_dim"], c.qk_rope_head_dim);
    EXPECT_EQ(j["v_head_dim"], c.v_head_dim);
    EXPECT_EQ(j["max_seq_len"], c.max_seq_len);
    EXPECT_EQ(j["original_seq_len"], c.original_seq_len);
    EXPECT_EQ(j["rope_theta"].get<double>(), c.rope_theta);
    EXPECT_EQ(j["rope_factor"].get<double>(), c.rope_factor);
    EXPECT_EQ(j["beta_fast"].get<double>(), c.beta_fast);
    EXPECT_EQ(j["beta_slow"].get<double>(), c.beta_slow);
    EXPECT_EQ(j["mscale"].get<double>(), c.mscale);
    EXPECT_EQ(j["max_batch_size"], c.max_batch_size);
    for (const auto& [py_name, layout] : layouts) {
      const auto cpp = mla::kv_bytes_per_token(c, layout);
      if (j["kv"][py_name].is_null()) {
        EXPECT_FALSE(cpp.has_value()) << py_name;
      } else {
        ASSERT_TRUE(cpp.has_value()) << py_name;
        EXPECT_EQ(j["kv"][py_name].get<int64_t>(), *cpp) << py_name;
      }
    }
  }
}

TEST(MlaMemory, CheckConfirmsTheModelAgainstRealAllocations) {
  // V3.2: the preset that holds every layout, the indexer key cache included.
  const auto j = memory_json("--preset v32 --context 2048 --check");
  std::set<std::string> checked;
  for (const auto& c : j["checks"]) {
    SCOPED_TRACE(c.dump());
    EXPECT_TRUE(c["checked"].get<bool>());
    EXPECT_TRUE(c["ok"].get<bool>());
    EXPECT_EQ(c["measured"], c["model"]);
    EXPECT_EQ(c["model"], j["layouts"][c["layout"].get<std::string>()]["bytes_per_token_per_layer"]);
    checked.insert(c["layout"].get<std::string>());
  }
  // naive and both absorbed caches of the reference layer, the paged bf16 and FP8 caches held by
  // an attention kernel's prepare(), and the indexer key cache held by an append's prepare().
  EXPECT_EQ(j["checks"].size(), 6u);
  EXPECT_EQ(checked, (std::set<std::string>{"naive_mha_bf16", "mla_bf16", "latent_bf16", "mla_fp8_v32", "indexer_v32"}));
  const auto text = mla("memory --preset v32 --context 2048 --check");
  EXPECT_EQ(text.status, 0);
  EXPECT_NE(text.out.find("cpu_mla_fp64 prepare()"), std::string::npos) << text.out;
  // The indexer row names the append it measured: the first registered CPU one available.
  mla::register_builtin_kernels();
  std::string append;
  for (const auto& k : mla::Registry::instance().indexer_append()) {
    if (append.empty() && k->info().backend == "cpu" && !k->unavailable()) append = k->info().name;
  }
  ASSERT_FALSE(append.empty());
  EXPECT_NE(text.out.find(append + " prepare(): indexer key cache"), std::string::npos) << text.out;
  EXPECT_EQ(mla("memory --check --kernel no_such_kernel 2>/dev/null").status, 2);
}

TEST(MlaMemory, CheckReportsADifference) {
  // A probe that reports one byte per cached token slot more than the kernel really keeps
  // stands in for a kernel that stores more than the model: the check must say so.
  mla::tools::MemoryQuery q;
  q.config = mla::preset("v3-tp8").config;
  q.context = 1024;
  // The probe's readings, in the order memory_check takes them (before/after prepare() of the
  // small and then the large synthetic cache, bf16, FP8, then the indexer key cache, whose
  // blocks are the same 64 slots): one byte per slot too many.
  std::size_t calls = 0;
  const int64_t bf16 = *mla::kv_bytes_per_token(q.config, mla::KvLayout::mla_bf16);
  const int64_t fp8 = *mla::kv_bytes_per_token(q.config, mla::KvLayout::fp8_v32);
  const int64_t indexer = *mla::kv_bytes_per_token(q.config, mla::KvLayout::indexer_v32);
  const int64_t slots_small = 4 * 64, slots_large = 16 * 64;  // 1024 tokens -> 16 pages
  const std::vector<int64_t> script{0, slots_small * (bf16 + 1),    0, slots_large * (bf16 + 1),
                                    0, slots_small * (fp8 + 1),     0, slots_large * (fp8 + 1),
                                    0, slots_small * (indexer + 1), 0, slots_large * (indexer + 1)};
  const auto checks = mla::tools::memory_check(q, [&] { return script.at(calls++); },
                                                 "cpu_mla_fp64");
  int differs = 0;
  for (const auto& c : checks) {
    if (c.method.find("prepare()") == std::string::npos) continue;
    EXPECT_TRUE(c.checked());
    EXPECT_FALSE(c.ok);
    EXPECT_EQ(*c.measured, *c.model + 1);
    ++differs;
  }
  EXPECT_EQ(differs, 3);
  EXPECT_EQ(calls, script.size());
  EXPECT_NE(mla::tools::render_checks(checks).find("DIFFERS"), std::string::npos);
}

// ---- report ----------------------------------------------------------------------------------

TEST(MlaReport, DelegatesToTheBenchReportScript) {
  const auto missing = run_command("MLA_SOURCE_DIR=/nonexistent " + kMla + " report x.json --out y 2>&1");
  EXPECT_EQ(missing.status, 2);
  EXPECT_NE(missing.out.find("/nonexistent/reports/tools/bench_report.py not found"), std::string::npos) << missing.out;
  const auto help = mla("report --help 2>&1");
  if (help.out.find("No module named") != std::string::npos) GTEST_SKIP() << help.out;
  EXPECT_EQ(help.status, 0) << help.out;
  EXPECT_NE(help.out.find("bench_report.py"), std::string::npos) << "the script's own usage: " << help.out;
}

// ---- a plug-in certified end to end on the tiny catalog --------------------------------------

TEST(MlaCertifyPlugin, TinyCatalogCertificateCarriesItsProvenance) {
  TempDir tmp;
  const auto out = tmp.path() / "out";
  const auto p = run_command(std::string(MLA_CERTIFY_EXE) + " --goldens " + quote(kTiny) + " --out " + quote(out) +
                             " --plugin " + plugin_path("good_plugin") + " 2>/dev/null");
  EXPECT_EQ(p.status, 0) << p.out;
  const auto j = json::parse(slurp(out / "certificate.json"));
  ASSERT_EQ(j["kernels"].size(), 1u) << "--plugin alone certifies only the plug-in";
  const auto& k = j["kernels"][0];
  EXPECT_EQ(k["name"], "good_plugin");
  EXPECT_EQ(k["version"], "1.0.0");
  EXPECT_EQ(k["origin"]["kind"], "plugin");
  EXPECT_EQ(k["origin"]["sha256"], mla::sha256_file(plugin_path("good_plugin")));
  EXPECT_EQ(k["origin"]["abi_version"], MLA_PLUGIN_ABI_VERSION);
  // The tiny catalog's 3 cases, their 3 fresh twins and the fresh family drawn for the plug-in's
  // claims, all PASS.
  int fresh = 0, twins = 0;
  for (const auto& c : k["cases"]) {
    fresh += c["family"] == kFresh;
    twins += mla::certify::testing::is_twin(c["case"].get<std::string>());
  }
  EXPECT_GT(fresh, 0);
  EXPECT_EQ(twins, 3);
  EXPECT_EQ(k["counts"]["PASS"], 3 + twins + fresh);
  EXPECT_EQ(j["catalog"]["manifest_sha256"], mla::sha256_file(kTiny / "MANIFEST.sha256"));
  EXPECT_FALSE(j["machine"]["cpu_model"].get<std::string>().empty());
  EXPECT_TRUE(j["machine"].contains("driver"));
  EXPECT_TRUE(j["machine"].contains("git_commit"));
  const auto junit = slurp(out / "certificate.junit.xml");
  int testcases = 0;
  for (std::size_t at = junit.find("<testcase"); at != std::string::npos; at = junit.find("<testcase", at + 1)) ++testcases;
  EXPECT_EQ(testcases, 3 + twins + fresh);
  EXPECT_NE(slurp(out / "certificate.md").find("Origin: `"), std::string::npos);

  const auto bad = run_command(kMla + " certify --goldens " + quote(kTiny) + " --out " + quote(out) + " --plugin " +
                               MLA_BAD_PLUGIN_ABI_VERSION + " 2>&1");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("ABI version 99"), std::string::npos) << bad.out;
  const auto collide = run_command(kMla + " certify --goldens " + quote(kTiny) + " --out " + quote(out) + " --plugin " +
                                   plugin_path("good_plugin") + " --plugin " + plugin_path("good_plugin") + " 2>&1");
  EXPECT_EQ(collide.status, 2);
  EXPECT_NE(collide.out.find("two implementations are named 'good_plugin'"), std::string::npos) << collide.out;
}

// --in-process runs the registered kernels in the certifier's own process (one CUDA context for
// the whole run on a GPU machine) while plug-ins keep a child per case; the certificate says which
// each kernel had, and the rehearsal's simulated context cost is charged once per process that
// runs a kernel, where that process would create its context.
TEST(MlaCertifyIsolation, EachKernelRecordsHowItRanAndEachProcessPaysOneContext) {
  TempDir tmp;
  const auto log = tmp.path() / "contexts.log";
  const auto certify = [&](const std::string& name, const std::string& flags) {
    const auto out = tmp.path() / name;
    const auto p = run_command("MLA_SIMULATED_CONTEXT_SECONDS=0 MLA_SIMULATED_CONTEXT_LOG=" + quote(log) + " " +
                               std::string(MLA_CERTIFY_EXE) + " --goldens " + quote(kTiny) + " --out " + quote(out) +
                               " --kernel cpu_mla_fp64 --plugin " + plugin_path("good_plugin") + " " + flags +
                               " 2>/dev/null");
    EXPECT_EQ(p.status, 0) << name << ": " << p.out;
    return json::parse(slurp(out / "certificate.json"));
  };
  // Charged processes by what they were: "<pid> <what> <seconds>" per line.
  const auto charged = [&] {
    std::map<std::string, std::set<std::string>> pids;
    std::istringstream in(slurp(log));
    for (std::string pid, what1, what2, secs; in >> pid >> what1;) {
      std::string what = what1;
      if (what1 == "child") in >> what2, what += " " + what2;
      in >> secs;
      EXPECT_EQ(secs, "0") << what;
      EXPECT_TRUE(pids[what].insert(pid).second) << "process " << pid << " was charged twice for " << what;
    }
    fs::remove(log);
    return pids;
  };
  const auto isolation = [](const json& cert, const std::string& kernel) {
    for (const auto& k : cert["kernels"]) {
      if (k["name"] == kernel) return k["origin"].value("isolation", std::string("(absent)"));
    }
    return std::string("(no such kernel)");
  };
  const auto passed = [](const json& cert, const std::string& kernel) {
    for (const auto& k : cert["kernels"]) {
      if (k["name"] == kernel) return k["counts"].value("PASS", 0);
    }
    return 0;
  };

  const auto in_process = certify("in_process", "--in-process");
  EXPECT_EQ(isolation(in_process, "cpu_mla_fp64"), "in_process");
  EXPECT_EQ(isolation(in_process, "good_plugin"), "child_per_case");
  auto pids = charged();
  EXPECT_EQ(pids["in-process"].size(), 1u) << "the certifier itself pays one context for every in-process case";
  // Every plug-in case in a child of its own (and a second, fresh one): at least one per case.
  EXPECT_GE(static_cast<int>(pids["child call"].size()), passed(in_process, "good_plugin"));
  EXPECT_GT(passed(in_process, "good_plugin"), 0);
  EXPECT_EQ(pids["child describe"].size(), 1u) << "the plug-in is described once, in a child";

  const auto isolated = certify("isolated", "");
  EXPECT_EQ(isolation(isolated, "cpu_mla_fp64"), "child_per_case");
  pids = charged();
  EXPECT_TRUE(pids["in-process"].empty());
  EXPECT_GE(static_cast<int>(pids["child call"].size()),
            passed(isolated, "cpu_mla_fp64") + passed(isolated, "good_plugin"));
  EXPECT_NE(slurp(tmp.path() / "isolated" / "certificate.md").find("\"isolation\":\"child_per_case\""), std::string::npos)
      << "the Markdown certificate does not show the isolation";

  // A malformed cost is the run's usage error, naming the variable and the value.
  for (const char* bad : {"abc", "-1", "61", "1.5s", "nan"}) {
    const auto p = run_command(std::string("MLA_SIMULATED_CONTEXT_SECONDS=") + bad + " " + MLA_CERTIFY_EXE +
                               " --goldens " + quote(kTiny) + " --out " + quote(tmp.path() / "bad") +
                               " --kernel cpu_mla_fp64 2>&1");
    EXPECT_EQ(p.status, 2) << bad << ": " << p.out;
    EXPECT_NE(p.out.find(std::string("MLA_SIMULATED_CONTEXT_SECONDS='") + bad + "' is not a number of seconds"),
              std::string::npos)
        << p.out;
  }
}

// The committed catalog, every case through its own family kind's loader (attention, layer,
// prefill, merge): a family whose loader the validator did not know would be a problem here.
TEST(MlaCli, TheCommittedCatalogValidatesThroughEachFamilysLoader) {
  const fs::path dir = fs::path(MLA_SOURCE_DIR) / "fixtures" / "goldens";
  if (!fs::exists(dir / "MANIFEST.sha256")) GTEST_SKIP() << "no golden catalog at " << dir;
  const auto valid = mla("goldens --dir " + quote(dir) + " validate");
  EXPECT_EQ(valid.status, 0) << valid.out;
  EXPECT_NE(valid.out.find("VALID: "), std::string::npos) << valid.out;
  for (const auto& f : mla::golden::families()) {
    EXPECT_NE(valid.out.find("ok   " + f.file()), std::string::npos) << f.name << "\n" << valid.out;
  }
}

}  // namespace
