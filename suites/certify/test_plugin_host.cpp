// L0: the host side of the plug-in C ABI and the machinery around each kernel call — descriptor
// validation and the loader's refusals, child processes with deadlines, and the JUnit
// rendering. No golden catalog needed. What a plug-in's calls do to their buffers is audited by
// the certifier's parent on shared memory, and tested through `mla certify` with the fault
// plug-ins (test_certify_plugins, test_certify_faults, test_certify_integrity).
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/certify/certify.hpp"
#include "mla/certify/child.hpp"
#include "mla/certify/isolation.hpp"
#include "mla/certify/junit.hpp"
#include "mla/certify/protocol.hpp"
#include "mla/certify/wire.hpp"
#include "mla/core/generator.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/presets.hpp"
#include "mla/core/tolerance.hpp"
#include "mla/judge/attention.hpp"
#include "mla/registry/registry.hpp"
#include "mla/plugin/host.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::certify::testing::plugin_path;
using mla::certify::testing::quote;
using mla::certify::testing::run_command;
using mla::certify::testing::slurp;
using mla::certify::testing::TempDir;
using mla::plugin::Library;
using mla::plugin::PluginError;

// ---- descriptors ---------------------------------------------------------------------------

int32_t null_decode(const mla_plugin_decode_args*, char*, size_t) { return MLA_PLUGIN_ERROR; }

mla_plugin_descriptor valid_descriptor() {
  mla_plugin_descriptor d{};
  d.abi_version = MLA_PLUGIN_ABI_VERSION;
  d.struct_size = sizeof d;
  d.name = "ok_name";
  d.version = "1";
  d.description = "";
  d.backend = "cpu";
  d.out_dtype = MLA_PLUGIN_OUT_BF16;
  d.caps.cache_formats = MLA_PLUGIN_CACHE_FP8;
  d.caps.features = MLA_PLUGIN_SPARSE;
  d.caps.min_heads = 8;
  d.caps.max_heads = 64;
  d.caps.min_s_q = 1;
  d.caps.max_s_q = 2;
  d.caps.num_page_sizes = 2;
  d.caps.page_sizes[0] = 64;
  d.caps.page_sizes[1] = 16;
  d.decode = null_decode;
  return d;
}

void expect_refused(const mla_plugin_descriptor& d, const std::string& words) {
  try {
    mla::plugin::validate_descriptor(d);
    ADD_FAILURE() << "accepted a descriptor that should be refused for: " << words;
  } catch (const PluginError& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(PluginDescriptor, EveryRuleIsEnforcedWithItsReason) {
  EXPECT_NO_THROW(mla::plugin::validate_descriptor(valid_descriptor()));
  auto d = valid_descriptor();
  d.abi_version = 2;
  expect_refused(d, "ABI version 2");
  d = valid_descriptor();
  d.struct_size = 8;
  expect_refused(d, "struct_size 8");
  d = valid_descriptor();
  d.name = "Has-Capitals";
  expect_refused(d, "not [a-z0-9_]+");
  d = valid_descriptor();
  d.version = nullptr;
  expect_refused(d, "'version' is NULL");
  d = valid_descriptor();
  d.backend = "tpu";
  expect_refused(d, "neither 'cpu' nor 'cuda'");
  d = valid_descriptor();
  d.out_dtype = 7;
  expect_refused(d, "out_dtype 7");
  d = valid_descriptor();
  d.caps.cache_formats = 0x4;
  expect_refused(d, "cache_formats 0x4");
  d = valid_descriptor();
  d.caps.features = MLA_PLUGIN_VARLEN;
  expect_refused(d, "DENSE or SPARSE");
  d = valid_descriptor();
  d.caps.min_s_q = 0;
  expect_refused(d, "s_q range [0, 2]");
  d = valid_descriptor();
  d.caps.num_page_sizes = 17;
  expect_refused(d, "num_page_sizes 17");
  d = valid_descriptor();
  d.caps.page_sizes[1] = -16;
  expect_refused(d, "page_sizes[1] = -16");
  d = valid_descriptor();
  d.decode = nullptr;
  expect_refused(d, "no decode entry point");
  std::string huge(5000, 'a');
  d = valid_descriptor();
  d.description = huge.c_str();
  expect_refused(d, "longer than 4096");
}

// Revision 1.2's declarations: each field holds one of its words, or the descriptor is refused
// naming the field; a field past struct_size is never read.
TEST(PluginDescriptor, Revision12DeclarationsAreValidatedByName) {
  auto d = valid_descriptor();
  d.lse_base = 2;
  expect_refused(d, "lse_base 2 is neither MLA_PLUGIN_LSE_BASE_E (0) nor MLA_PLUGIN_LSE_BASE_2 (1)");
  d = valid_descriptor();
  d.lse_layout = 5;
  expect_refused(d, "lse_layout 5");
  d = valid_descriptor();
  d.empty_row_lse = 9;
  expect_refused(d, "empty_row_lse 9");
  d = valid_descriptor();
  d.index_numbering = 3;
  expect_refused(d, "index_numbering 3");
  d = valid_descriptor();
  d.operand_precision = MLA_PLUGIN_PRECISION_BF16;
  expect_refused(d, "must both be declared or both be MLA_PLUGIN_PRECISION_UNDECLARED");
  d.accum_precision = MLA_PLUGIN_PRECISION_BF16;
  expect_refused(d, "accumulating in bf16");
  d.accum_precision = 7;
  expect_refused(d, "accum_precision 7 is not an MLA_PLUGIN_PRECISION_* value");
  d.accum_precision = MLA_PLUGIN_PRECISION_FP32;
  EXPECT_NO_THROW(mla::plugin::validate_descriptor(d));
  d = valid_descriptor();
  d.append_fp8_recipes = MLA_PLUGIN_RECIPE_FLASHMLA;  // no FP8 append to write it with
  expect_refused(d, "append_fp8_recipes 0x2");
  d = valid_descriptor();
  d.reserved_1_2 = 1;
  expect_refused(d, "reserved_1_2 is 1");
  // The same garbage behind a 1.1 struct_size is not the descriptor's.
  d.struct_size = MLA_PLUGIN_DESCRIPTOR_V1_1_SIZE;
  d.lse_base = 0xDEAD;
  EXPECT_NO_THROW(mla::plugin::validate_descriptor(d));
}

TEST(PluginDescriptor, CapabilitiesTranslateFieldByField) {
  const auto caps = mla::plugin::capabilities_from(valid_descriptor().caps);
  EXPECT_EQ(caps.cache_formats, std::vector<mla::CacheFormat>{mla::CacheFormat::fp8});
  EXPECT_EQ(caps.min_heads, 8);
  EXPECT_EQ(caps.max_heads, 64);
  EXPECT_EQ(caps.max_s_q, 2);
  EXPECT_EQ(caps.page_sizes, (std::vector<int>{64, 16}));
  EXPECT_FALSE(caps.dense);
  EXPECT_TRUE(caps.sparse);
  EXPECT_FALSE(caps.varlen);
}

void expect_load_refused(const std::string& path, const std::string& words) {
  try {
    Library::open(path);
    ADD_FAILURE() << path << " loaded";
  } catch (const PluginError& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(PluginLibrary, BrokenLibrariesAreRefusedWithTheReason) {
  expect_load_refused(MLA_BAD_PLUGIN_ABI_VERSION, "ABI version 99");
  expect_load_refused(MLA_BAD_PLUGIN_NULL_NAME, "'name' is NULL");
  expect_load_refused(MLA_BAD_PLUGIN_NO_ENTRY, "does not export mla_plugin_get_descriptor");
  expect_load_refused(MLA_BAD_PLUGIN_BAD_CAPS, "heads range [64, 8]");
  expect_load_refused("/no/such/plugin.so", "not a readable file");
  TempDir tmp;
  std::ofstream(tmp.path() / "not_elf.so") << "this is not a shared library\n";
  expect_load_refused((tmp.path() / "not_elf.so").string(), "cannot load plug-in");
}

TEST(PluginLibrary, ExampleDescriptorIsReadAsDeclared) {
  const auto lib = Library::open(plugin_path("underclaims"));
  EXPECT_EQ(lib->info().name, "underclaims");
  EXPECT_EQ(lib->version(), "1.0.0");
  EXPECT_EQ(lib->info().backend, "cpu");
  EXPECT_EQ(lib->info().out_dtype, mla::OutDType::f32);
  EXPECT_EQ(lib->info().caps.cache_formats, std::vector<mla::CacheFormat>{mla::CacheFormat::bf16});
  EXPECT_EQ(lib->info().caps.max_heads, 64);
  EXPECT_FALSE(lib->info().caps.sparse);
  EXPECT_FALSE(lib->unavailable().has_value());
  EXPECT_EQ(Library::open(plugin_path("good_plugin_bf16"))->info().out_dtype, mla::OutDType::bf16);
}

// ---- the wire format of the files exchanged with children ----------------------------------

// What a child is told (a plan of calls on the shared buffers, a claims query) and what it says
// back (a plug-in's description, its claims): one format, read back bit for bit, and refused
// with a reason when it is truncated, extended, foreign or of another kind.
TEST(WireFormat, MessagesRoundTripBitForBitAndBrokenFilesAreRefused) {
  namespace wire = mla::certify::wire;
  TempDir tmp;
  const uint64_t payload = 0x7FF800000000BEEFull;
  double nan;
  std::memcpy(&nan, &payload, 8);
  const std::vector<double> values{1.5, -0.0, std::numeric_limits<double>::infinity(), nan};
  const std::vector<uint16_t> bits{0x3F80, 0x7FC1};
  const std::vector<int32_t> ints{-1, 7};
  {
    wire::Message m(mla::certify::kEntryCalls);
    m.fields() = {{"make_calls", 2}, {"name", "x"}};
    m.put("values", values);
    m.put("bits", bits);
    m.put("ints", ints);
    wire::write(tmp.path() / "msg", m);
  }
  const auto back = wire::read(tmp.path() / "msg", mla::certify::kAttentionCalls, mla::certify::kEntryCalls);
  EXPECT_EQ(back.kind(), mla::certify::kEntryCalls);
  EXPECT_EQ(back.fields().at("make_calls"), 2);
  const auto v = back.get<double>("values");
  ASSERT_EQ(v.size(), values.size());
  EXPECT_TRUE(std::signbit(v[1]));
  EXPECT_EQ(std::memcmp(&v[3], &payload, 8), 0) << "NaN payload lost";
  EXPECT_EQ(back.get<uint16_t>("bits"), bits);
  EXPECT_EQ(back.get<int32_t>("ints"), ints);
  EXPECT_THROW((void)back.get<double>("ints"), mla::Error) << "an array read as another type";

  const auto text = slurp(tmp.path() / "msg");
  std::ofstream(tmp.path() / "short", std::ios::binary) << text.substr(0, text.size() - 3);
  EXPECT_THROW((void)wire::read(tmp.path() / "short", mla::certify::kEntryCalls), mla::Error);
  std::ofstream(tmp.path() / "long", std::ios::binary) << text << "x";
  EXPECT_THROW((void)wire::read(tmp.path() / "long", mla::certify::kEntryCalls), mla::Error);
  std::ofstream(tmp.path() / "garbage", std::ios::binary) << "{\"format\": \"other\"}\n";
  EXPECT_THROW((void)wire::read(tmp.path() / "garbage", mla::certify::kEntryCalls), mla::Error);
  // A message of another kind is refused, naming both.
  try {
    (void)wire::read(tmp.path() / "msg", mla::certify::kAttentionCalls);
    ADD_FAILURE() << "an append plan was read as an attention plan";
  } catch (const mla::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'entry-calls' message, expected 'attention-calls'"), std::string::npos)
        << e.what();
  }
}

// ---- child processes -------------------------------------------------------------------------

TEST(ChildProcess, ExitCodesSignalsAndDeadlines) {
  TempDir tmp;
  const auto log = tmp.path() / "log";
  using K = mla::certify::ChildOutcome::Kind;
  auto o = mla::certify::run_child({"/bin/sh", "-c", "echo said this >&2; exit 3"}, 10, log);
  EXPECT_EQ(o.kind, K::exited);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_EQ(o.stderr_tail, "said this");
  EXPECT_EQ(o.describe(), "exited with status 3");

  o = mla::certify::run_child({"/bin/sh", "-c", "kill -SEGV $$"}, 10, log);
  EXPECT_EQ(o.kind, K::signaled);
  EXPECT_EQ(o.describe(), "crashed: killed by signal SIGSEGV (Segmentation fault)");

  // A hang, with a grandchild: the deadline kills the whole group, promptly.
  const auto pidfile = tmp.path() / "grandchild.pid";
  const auto t0 = std::chrono::steady_clock::now();
  o = mla::certify::run_child({"/bin/sh", "-c", "sleep 60 & echo $! > " + quote(pidfile) + "; wait"}, 0.5, log);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(o.kind, K::timed_out);
  EXPECT_EQ(o.describe(), "timed out after 0.5 s (killed)");
  EXPECT_LT(took, 5.0);
  const pid_t grandchild = std::stoi(slurp(pidfile));
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    gone = !mla::certify::testing::process_alive(grandchild);
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(gone) << "the hung child's own child survived the deadline";

  o = mla::certify::run_child({"/no/such/binary"}, 10, log);
  EXPECT_EQ(o.kind, K::exited);
  EXPECT_EQ(o.exit_code, 126);
}

TEST(ChildProcess, ASetsidDoubleForkedGrandchildDiesWithItsCase) {
  // setsid puts the grandchild in its own session and process group, out of reach of the
  // group kill; its parent exits at once, so it is re-parented: to init without a subreaper,
  // to this process with one. After run_child returns it must be gone.
  TempDir tmp;
  const auto log = tmp.path() / "log";
  const auto pidfile = tmp.path() / "daemon.pid";
  const auto o = mla::certify::run_child(
      {"/bin/sh", "-c", "setsid /bin/sh -c 'sleep 60 & echo $! > " + quote(pidfile) + "' & wait"}, 10, log);
  EXPECT_TRUE(o.ok()) << o.describe();
  ASSERT_TRUE(fs::exists(pidfile));
  const pid_t daemon = std::stoi(slurp(pidfile));
  const bool alive = mla::certify::testing::process_alive(daemon);
  if (alive) kill(daemon, SIGKILL);
  EXPECT_FALSE(alive) << "pid " << daemon << " outlived its case";
}

TEST(ChildProcess, SignalNames) {
  EXPECT_EQ(mla::certify::signal_description(SIGABRT), "SIGABRT (Aborted)");
  EXPECT_EQ(mla::certify::signal_description(SIGKILL), "SIGKILL (Killed)");
}

// ---- JUnit ----------------------------------------------------------------------------------

TEST(Junit, OneTestcasePerKernelAndCaseWithEscapedReasons) {
  mla::reports::Certificate c;
  c.started_utc = "2026-11-30T00:00:00Z";
  c.complete = true;
  c.manifest_sha256 = std::string(64, 'e');
  mla::reports::KernelReport k;
  k.name = "k<1>";
  k.version = "2 & \"3\"";
  auto add = [&](const char* name, mla::tol::Verdict v, std::vector<std::string> reasons) {
    mla::reports::CaseResult r;
    r.family = "attn_core";
    r.name = name;
    r.verdict = v;
    r.reasons = std::move(reasons);
    k.cases.push_back(r);
  };
  add("a", mla::tol::Verdict::pass, {});
  add("b", mla::tol::Verdict::fail, {"out: 3 of 4 elements < bound & \"worse\"", "wrote 8 bytes past out"});
  add("c", mla::tol::Verdict::error, {std::string("crashed\x01 badly")});
  add("d", mla::tol::Verdict::unsupported, {"heads=128 outside [1,64]"});
  add("e", mla::tol::Verdict::skipped, {"no GPU"});
  c.kernels = {k};
  const auto xml = mla::certify::to_junit(c);
  EXPECT_NE(xml.find("tests=\"5\" failures=\"1\" errors=\"1\" skipped=\"2\""), std::string::npos) << xml;
  EXPECT_NE(xml.find("name=\"k&lt;1&gt;\""), std::string::npos);
  EXPECT_NE(xml.find("<property name=\"driver\" value=\"n/a\"/>"), std::string::npos) << "no GPU driver given";
  EXPECT_NE(xml.find(fmt::format("<property name=\"catalog_manifest_sha256\" value=\"{}\"/>", c.manifest_sha256)),
            std::string::npos);
  EXPECT_NE(xml.find("value=\"2 &amp; &quot;3&quot;\""), std::string::npos);
  EXPECT_NE(xml.find("<failure message=\"out: 3 of 4 elements &lt; bound &amp; &quot;worse&quot;\""), std::string::npos);
  EXPECT_NE(xml.find("wrote 8 bytes past out"), std::string::npos);
  EXPECT_NE(xml.find("<error message=\"crashed? badly\""), std::string::npos);
  EXPECT_NE(xml.find("<skipped message=\"UNSUPPORTED: heads=128 outside [1,64]\"/>"), std::string::npos);
  // Well-formed XML by an independent parser, when one is installed.
  TempDir tmp;
  std::ofstream(tmp.path() / "j.xml") << xml;
  const auto p = run_command("/usr/bin/python3 -c \"import sys, xml.etree.ElementTree as E; "
                             "r = E.parse(sys.argv[1]).getroot(); print(len(r.findall('.//testcase')))\" " +
                             quote(tmp.path() / "j.xml") + " 2>&1");
  if (p.status == 0) {
    EXPECT_EQ(p.out, "5\n");
  } else {
    std::cerr << "python3 unavailable, XML not parsed: " << p.out << "\n";
  }
}

}  // namespace
