// L0: the host side of the plug-in C ABI and the machinery around each kernel call — guarded
// output buffers, descriptor validation and the loader's refusals, the audited call (input
// checksums, NaN-filled outputs, canaries), child processes with deadlines, the inputs/results
// files, and the JUnit rendering. No golden catalog needed: inputs are built here.
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

// The child's messages as files (the wire format of mla/certify/wire.hpp).
void write_inputs(const std::filesystem::path& file, const mla::AttnInputs& in) {
  mla::certify::wire::write(file, mla::certify::encode(in));
}
mla::AttnBuffers read_inputs(const std::filesystem::path& file) {
  return mla::certify::decode_attention_inputs(mla::certify::wire::read(file, mla::certify::kAttentionInputs));
}
mla::certify::RunResult read_result(const std::filesystem::path& file) {
  return mla::certify::decode_run_result(mla::certify::wire::read(file, mla::certify::kAttentionResult));
}

namespace fs = std::filesystem;
using mla::certify::testing::plugin_path;
using mla::certify::testing::quote;
using mla::certify::testing::run_command;
using mla::certify::testing::slurp;
using mla::certify::testing::TempDir;
using mla::plugin::GuardedBuffer;
using mla::plugin::Library;
using mla::plugin::PluginError;

// ---- guarded buffers -------------------------------------------------------------------------

TEST(GuardedBuffer, WritesInsideAreInvisibleOutsideAreMeasured) {
  GuardedBuffer b(1000);
  std::memset(b.data(), 0xFF, b.size());
  EXPECT_EQ(b.check().before, 0u);
  EXPECT_EQ(b.check().after, 0u);
  b.data()[1000] ^= 0xFF;  // the first byte past the end
  EXPECT_EQ(b.check().after, 1u);
  b.data()[1000 + 2047] = static_cast<uint8_t>(~b.data()[1000 + 2047]);  // 2048 bytes past the start of the canary
  EXPECT_EQ(b.check().after, 2048u);
  b.data()[-5] = static_cast<uint8_t>(~b.data()[-5]);
  EXPECT_EQ(b.check().before, 5u);
}

TEST(GuardedBuffer, CanaryIsNotAFewRepeatedBytes) {
  // A plug-in that writes zeros, 0xFF or a NaN pattern past its output must change canary
  // bytes: the canary cannot be mostly one value.
  std::set<uint8_t> seen;
  int zeros = 0;
  for (std::size_t i = 0; i < 4096; ++i) {
    seen.insert(mla::plugin::canary_byte(i));
    zeros += mla::plugin::canary_byte(i) == 0;
  }
  EXPECT_GT(seen.size(), 200u);
  EXPECT_LT(zeros, 64);
}

TEST(GuardedBufferDeathTest, AWriteBeyondTheCanaryFaultsAtOnce) {
  EXPECT_DEATH(
      {
        // The canary ends somewhere in [kCanaryBytes, kCanaryBytes + page) past the data (page
        // rounding); the byte below is always inside the inaccessible page that follows it.
        GuardedBuffer b(64);
        const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
        b.data()[64 + GuardedBuffer::kCanaryBytes + page - 1] = 1;
      },
      "");
}

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

// ---- audited calls on a synthetic case ------------------------------------------------------

// A small paged bf16 case built like the goldens: random pages, the unused slots of each page
// NaN and the unused block-table entries a sentinel.
struct Synthetic {
  std::vector<uint16_t> q;
  std::vector<uint8_t> kv;
  std::vector<int32_t> bt, sl;
  mla::AttnInputs in;
};

Synthetic synthetic(int s_q, std::vector<int32_t> lengths, int heads = 4) {
  Synthetic c;
  auto& s = c.in.shape;
  s.batch = static_cast<int>(lengths.size());
  s.s_q = s_q;
  s.heads = heads;
  s.page_size = 16;
  s.max_blocks = 4;
  s.num_blocks = s.batch * s.max_blocks;
  c.in.softmax_scale = mla::softmax_scale(mla::preset("v3").config);
  c.q.resize(static_cast<std::size_t>(s.batch) * s_q * heads * 576);
  mla::gen::fill_bf16(5, 1, 0.0, 1.0, c.q);
  std::vector<uint16_t> vals(static_cast<std::size_t>(s.num_blocks) * s.page_size * 576);
  mla::gen::fill_bf16(5, 2, 0.0, 1.0, vals);
  const auto perm = mla::gen::permutation(5, 3, s.num_blocks);
  c.bt.assign(static_cast<std::size_t>(s.batch) * s.max_blocks, 2147483647);
  for (int b = 0; b < s.batch; ++b) {
    const int used = (lengths[b] + s.page_size - 1) / s.page_size;
    for (int i = 0; i < used; ++i) c.bt[b * s.max_blocks + i] = static_cast<int32_t>(perm[b * s.max_blocks + i]);
    for (int t = lengths[b]; t < used * s.page_size; ++t) {
      const int slot = c.bt[b * s.max_blocks + t / s.page_size] * s.page_size + t % s.page_size;
      for (int d = 0; d < 576; ++d) vals[static_cast<std::size_t>(slot) * 576 + d] = 0x7FC0;
    }
  }
  c.kv.resize(vals.size() * 2);
  std::memcpy(c.kv.data(), vals.data(), c.kv.size());
  c.sl = lengths;
  c.in.q = c.q;
  c.in.kv_cache = c.kv;
  c.in.block_table = c.bt;
  c.in.cache_seqlens = c.sl;
  return c;
}

mla::certify::RunResult run_plugin(const std::string& name, const Synthetic& c) {
  const auto k = mla::plugin::make_plugin_kernel(Library::open(plugin_path(name)));
  return mla::certify::execute(*k, c.in, 2, true);
}

bool mentions(const std::vector<std::string>& v, const std::string& words) {
  for (const auto& s : v) {
    if (s.find(words) != std::string::npos) return true;
  }
  return false;
}

TEST(AuditedCall, GoodPluginMatchesTheFp64ReferenceThroughTheAbi) {
  const auto c = synthetic(2, {37, 5, 16});
  const auto r = run_plugin("good_plugin", c);
  ASSERT_EQ(r.status, mla::certify::RunResult::Status::ran) << r.message;
  EXPECT_TRUE(r.reasons.empty()) << r.reasons.front();
  mla::register_builtin_kernels();
  const auto ref = mla::certify::execute(*mla::Registry::instance().find("cpu_mla_fp64"), c.in, 1, true);
  ASSERT_EQ(ref.status, mla::certify::RunResult::Status::ran) << ref.message;
  // The float32 plug-in against float64 results, by the judge under the table's float32
  // tolerances: a layout mistake anywhere in the ABI (q, pages, block table, out or lse order)
  // fails this.
  mla::AttentionTruth truth;
  truth.out = ref.outputs.out;
  truth.lse = ref.outputs.lse;
  const auto j = mla::judge_attention(c.in.shape, mla::Declaration{mla::OutDType::f32}, r.outputs, truth);
  EXPECT_TRUE(j.pass()) << fmt::format("{}", fmt::join(j.reasons, "; "));
  EXPECT_EQ(j.out.tolerance, "attn.out.f32");
  EXPECT_EQ(r.outputs.dtype, mla::OutDType::f32);
}

TEST(AuditedCall, WriteOutsideTheOutputIsMeasured) {
  const auto r = run_plugin("writes_out_of_bounds", synthetic(2, {20, 33}));
  ASSERT_EQ(r.status, mla::certify::RunResult::Status::ran) << r.message;
  // One float32 row of 512 values past the end.
  EXPECT_TRUE(mentions(r.reasons, "wrote 2048 bytes past out")) << ::testing::PrintToString(r.reasons);
  // Its s_q == 1 calls stay in bounds.
  EXPECT_TRUE(run_plugin("writes_out_of_bounds", synthetic(1, {20, 33})).reasons.empty());
}

TEST(AuditedCall, InputWrittenByThePluginIsCaught) {
  const auto r = run_plugin("mutates_input", synthetic(1, {20}));
  ASSERT_EQ(r.status, mla::certify::RunResult::Status::ran) << r.message;
  EXPECT_TRUE(mentions(r.reasons, "input q changed by call 1")) << ::testing::PrintToString(r.reasons);
  // The second call saw the scaled q: not repeatable either.
  EXPECT_TRUE(mentions(r.reasons, "differs between repeated runs")) << ::testing::PrintToString(r.reasons);
}

TEST(AuditedCall, UnwrittenOutputStaysNaN) {
  const auto c = synthetic(1, {20}, 4);
  const auto r = run_plugin("returns_nan", c);
  ASSERT_EQ(r.status, mla::certify::RunResult::Status::ran) << r.message;
  // Head 3 (the last) was never written: the host's NaN fill shows through, heads 0..2 are numbers.
  for (int h = 0; h < 4; ++h) {
    EXPECT_EQ(std::isnan(r.outputs.out[h * 512 + 7]), h == 3) << "head " << h;
  }
}

TEST(AuditedCall, UnclaimedShapesAreRefusedUnlessProbing) {
  const auto c = synthetic(1, {20}, 128);  // underclaims claims up to 64 heads
  const auto lib = Library::open(plugin_path("underclaims"));
  const auto strict = mla::plugin::make_plugin_kernel(lib, true);
  const auto r = mla::certify::execute(*strict, c.in, 2, true);
  EXPECT_EQ(r.status, mla::certify::RunResult::Status::unsupported);
  EXPECT_NE(r.message.find("heads=128 outside [1,64]"), std::string::npos) << r.message;
  const auto probe = mla::certify::execute(*mla::plugin::make_plugin_kernel(lib, false), c.in, 2, false);
  EXPECT_EQ(probe.status, mla::certify::RunResult::Status::ran) << probe.message;
}

// ---- files exchanged with children ----------------------------------------------------------

TEST(ChildFiles, InputsAndResultsRoundTripBitForBit) {
  TempDir tmp;
  auto c = synthetic(2, {7, 16});
  c.in.shape.cache_format = mla::CacheFormat::bf16;
  write_inputs(tmp.path() / "in", c.in);
  const auto back = read_inputs(tmp.path() / "in");
  EXPECT_EQ(back.q, c.q);
  EXPECT_EQ(back.kv_cache, c.kv);
  EXPECT_EQ(back.block_table, c.bt);
  EXPECT_EQ(back.cache_seqlens, c.sl);
  EXPECT_TRUE(back.indices.empty());
  EXPECT_EQ(std::memcmp(&back.softmax_scale, &c.in.softmax_scale, 8), 0);
  EXPECT_EQ(back.shape.page_size, 16);
  EXPECT_EQ(back.shape.s_q, 2);

  mla::certify::RunResult r;
  r.status = mla::certify::RunResult::Status::ran;
  r.outputs.dtype = mla::OutDType::bf16;
  r.outputs.out = {1.5, -0.0, std::numeric_limits<double>::infinity()};
  uint64_t payload = 0x7FF800000000BEEFull;
  double nan;
  std::memcpy(&nan, &payload, 8);
  r.outputs.lse = {nan};
  r.run_seconds = 0.25;
  r.bytes = 1e6;
  r.reasons = {"wrote 1 bytes past out"};
  mla::certify::wire::write(tmp.path() / "res", mla::certify::encode(r));
  const auto rr = read_result(tmp.path() / "res");
  EXPECT_EQ(rr.status, r.status);
  EXPECT_EQ(rr.outputs.dtype, mla::OutDType::bf16);
  ASSERT_EQ(rr.outputs.out.size(), 3u);
  EXPECT_TRUE(std::signbit(rr.outputs.out[1]));
  EXPECT_EQ(std::memcmp(rr.outputs.lse.data(), &payload, 8), 0) << "NaN payload lost";
  EXPECT_EQ(rr.reasons, r.reasons);
  EXPECT_FALSE(rr.flops.has_value());

  // A truncated file is an error, never a short result.
  const auto text = slurp(tmp.path() / "res");
  std::ofstream(tmp.path() / "short", std::ios::binary) << text.substr(0, text.size() - 3);
  EXPECT_THROW(read_result(tmp.path() / "short"), mla::Error);
  std::ofstream(tmp.path() / "long", std::ios::binary) << text << "x";
  EXPECT_THROW(read_result(tmp.path() / "long"), mla::Error);
  std::ofstream(tmp.path() / "garbage", std::ios::binary) << "{\"format\": \"other\"}\n";
  EXPECT_THROW(read_inputs(tmp.path() / "garbage"), mla::Error);
  // One wire format for every message: a message of another kind is refused, naming both.
  try {
    (void)read_result(tmp.path() / "in");
    ADD_FAILURE() << "an inputs message was read as a result";
  } catch (const mla::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'attention-inputs' message, expected 'attention-result'"), std::string::npos)
        << e.what();
  }
}

TEST(ChildFiles, AppendCallsAndTheirOutcomesRoundTripBitForBit) {
  TempDir tmp;
  mla::plugin::AppendCallInputs in;
  in.num_tokens = 1;
  in.batch = 1;
  in.max_blocks = 2;
  in.page_size = 4;
  in.num_blocks = 3;
  in.max_seq_len = 8;
  in.cache_format = MLA_PLUGIN_CACHE_FP8;
  in.scale_fmt = MLA_PLUGIN_SCALE_UE8M0;
  in.eps = 1e-6;
  in.latent.assign(512, 0x3F80);
  in.k_pe.assign(64, 0xBF00);
  in.kv_norm_weight.assign(512, 0x3F80);
  in.inv_freq.assign(32, 0.1);
  in.seq_ids = {0};
  in.positions = {5};
  in.block_table = {2, 0};
  in.kv_cache.assign(3 * 4 * 656, 0xA5);
  mla::certify::wire::write(tmp.path() / "in", mla::certify::encode(in));
  const auto back = mla::certify::decode_append_inputs(mla::certify::wire::read(tmp.path() / "in", mla::certify::kAppendInputs));
  EXPECT_EQ(back.num_tokens, 1);
  EXPECT_EQ(back.max_seq_len, 8);
  EXPECT_EQ(back.scale_fmt, MLA_PLUGIN_SCALE_UE8M0);
  EXPECT_EQ(std::memcmp(&back.eps, &in.eps, 8), 0);
  EXPECT_EQ(back.latent, in.latent);
  EXPECT_EQ(back.k_pe, in.k_pe);
  EXPECT_EQ(back.inv_freq, in.inv_freq);
  EXPECT_EQ(back.positions, in.positions);
  EXPECT_EQ(back.block_table, in.block_table);
  EXPECT_EQ(back.kv_cache, in.kv_cache);

  mla::certify::AppendRun r;
  r.ran = true;
  r.rc = MLA_PLUGIN_CAPACITY;
  r.message = "position 8";
  r.kv_cache = in.kv_cache;
  r.reasons = {"input latent changed by the append"};
  mla::certify::wire::write(tmp.path() / "res", mla::certify::encode(r));
  const auto rr = mla::certify::decode_append_run(mla::certify::wire::read(tmp.path() / "res", mla::certify::kAppendResult));
  EXPECT_TRUE(rr.ran);
  EXPECT_EQ(rr.rc, MLA_PLUGIN_CAPACITY);
  EXPECT_EQ(rr.message, r.message);
  EXPECT_EQ(rr.kv_cache, r.kv_cache);
  EXPECT_EQ(rr.reasons, r.reasons);
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

TEST(ChildProcess, CrashAndHangOfAPluginBecomeOutcomes) {
  TempDir tmp;
  const auto in = tmp.path() / "case.inputs";
  const auto c = synthetic(4, {0, 9});  // a zero-length sequence (crashes) and s_q 4 (hangs)
  write_inputs(in, c.in);
  auto child = [&](const std::string& plugin, double timeout) {
    return mla::certify::run_child({MLA_CLI_EXE, "__child", "run", "--inputs", in.string(), "--result",
                                    (tmp.path() / "res").string(), "--plugin", plugin_path(plugin)},
                                   timeout, tmp.path() / "log");
  };
  auto o = child("crashes", 30);
  EXPECT_EQ(o.kind, mla::certify::ChildOutcome::Kind::signaled) << o.describe();
  EXPECT_EQ(o.signal, SIGSEGV);
  o = child("hangs", 1);
  EXPECT_EQ(o.kind, mla::certify::ChildOutcome::Kind::timed_out) << o.describe();
  // And a plug-in that works: exit 0 with a result that reads back.
  o = child("good_plugin", 30);
  ASSERT_TRUE(o.ok()) << o.describe() << " " << o.stderr_tail;
  EXPECT_EQ(read_result(tmp.path() / "res").status, mla::certify::RunResult::Status::ran);
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
