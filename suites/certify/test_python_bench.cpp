// A Python kernel opened for timing (mla/certify/external_bench.hpp, open_python_for_bench): the
// shipped torch decode's results through the long-lived `child.py bench` process are judged PASS
// against the C++ oracles and repeat bit for bit; the door's own cost (the overhead twin) is
// timed below the kernel's; a kernel that raises, refuses a shape or dies or hangs mid-run is an
// mla::Error or a refusal naming why, never a hang; the child is gone (reaped) once the prepared
// call is. Skipped (with the reason) without a python3 that imports torch.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/certify/external_bench.hpp"
#include "mla/core/error.hpp"
#include "mla/judge/attention.hpp"
#include "mla/ref/attention.hpp"
#include "mla/ref/same_dtype.hpp"
#include "mla/workloads/axes.hpp"
#include "test_util.hpp"

namespace {

namespace fs = std::filesystem;
using mla::certify::ExternalBenchKernel;
using mla::certify::open_python_for_bench;
using mla::certify::testing::run_command;
using mla::certify::testing::slurp;
using mla::certify::testing::TempDir;

const fs::path kSource = MLA_SOURCE_DIR;
const fs::path kExample = kSource / "kernels" / "python" / "examples" / "torch_mla.py";
const fs::path kTestKernels = kSource / "suites" / "certify" / "python";
const std::string kTorchPython = MLA_TORCH_PYTHON;

bool torch_here() { return run_command(kTorchPython + " -c 'import torch' 2>/dev/null").status == 0; }

ExternalBenchKernel open(const fs::path& file, const std::string& attr) {
  return open_python_for_bench(file.string() + ":" + attr, MLA_CLI_EXE, kTorchPython);
}

// A small dense case with variable lengths: two sequences over several pages, `heads` heads,
// two query tokens each.
mla::axes::SyntheticInputs small_case(int heads = 4) {
  mla::axes::AxisPoint p;
  p.name = "bench_door_small";
  p.shape.batch = 2;
  p.shape.s_q = 2;
  p.shape.heads = heads;
  p.shape.page_size = 64;
  p.seqlens = {37, 150};
  p.seed = 11;
  mla::axes::derive_paging(p);
  return mla::axes::build_inputs(p);
}

// What the one judge says of `got` against the C++ oracles' truth for `in` (empty: PASS).
std::vector<std::string> judged(const mla::AttnInputs& in, const mla::KernelInfo& k, const mla::AttnOutputs& got) {
  const auto fp64 = mla::ref::attention_fp64(in);
  const auto same = mla::ref::attention_same_dtype(in);
  mla::AttentionTruth truth;
  truth.out = fp64.out;
  truth.lse = fp64.lse;
  truth.same_dtype_out = same.out;
  truth.same_dtype_lse = same.lse;
  return mla::judge_attention(in.shape, {k.out_dtype, k.compute}, got, truth).reasons;
}

// Sets an environment variable for one scope (the door's children inherit it).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// The pids of this process's children running the door's `bench` verb: started by exec (their
// command line says so) or forked by the door's fork server (their name says so), with the
// number of the latter in `forked`.
std::vector<pid_t> bench_children(std::size_t* forked = nullptr) {
  if (forked) *forked = 0;
  std::vector<pid_t> found;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const auto name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat(e.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    const auto paren = text.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream ss(text.substr(paren + 1));
    std::string state;
    pid_t ppid = 0;
    ss >> state >> ppid;
    std::string cmd = slurp(e.path() / "cmdline");
    std::replace(cmd.begin(), cmd.end(), '\0', ' ');
    const bool by_server = slurp(e.path() / "comm") == "door-bench\n";
    if (ppid == getpid() && (by_server || cmd.find("child.py bench ") != std::string::npos)) {
      found.push_back(std::stoi(name));
      if (forked && by_server) ++*forked;
    }
  }
  return found;
}

bool gone(pid_t pid) { return !fs::exists(fs::path("/proc") / std::to_string(pid)); }

// Mean seconds of one run() over `n` calls.
double mean_run_s(mla::PreparedAttention& p, int n) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) p.run();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / n;
}

class PythonBench : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch_here()) GTEST_SKIP() << kTorchPython << " cannot import torch (mla.sh installs python3-torch)";
  }
};

TEST_F(PythonBench, TheShippedKernelPassesRepeatsBitwiseAndCostsMoreThanTheDoor) {
  const auto k = open(kExample, "KERNEL");
  ASSERT_FALSE(k.impl->unavailable()) << *k.impl->unavailable();
  EXPECT_EQ(k.overhead->info().name, k.impl->info().name + "~overhead");
  EXPECT_EQ(k.origin.at("kind"), "python");
  EXPECT_EQ(k.origin.at("executable"), kTorchPython);
  EXPECT_EQ(k.origin.at("module_digest").get<std::string>().size(), 64u) << k.origin.dump();
  const auto versions = run_command(kTorchPython + " -c 'import platform, torch; print(platform.python_version(), torch.__version__)'");
  EXPECT_EQ(k.origin.at("python").get<std::string>() + " " + k.origin.at("torch").get<std::string>() + "\n", versions.out);

  const auto in = small_case();
  ASSERT_FALSE(k.impl->check(in.shape));
  auto p = k.impl->prepare(in.view());
  p->run();
  const auto first = p->results();
  p->run();
  const auto second = p->results();
  // Bit for bit (a NaN would differ from itself as a value; there must be none).
  EXPECT_EQ(first.out, second.out);
  EXPECT_EQ(first.lse, second.lse);

  const auto reasons = judged(in.view(), k.impl->info(), first);
  EXPECT_TRUE(reasons.empty()) << fmt::format("{}", fmt::join(reasons, "; "));

  // The door alone: the same path with no decode, named apart, costs less per round trip.
  auto o = k.overhead->prepare(in.view());
  o->run();
  const double door_s = mean_run_s(*o, 1000);
  const double kernel_s = mean_run_s(*p, 20);
  std::cout << fmt::format("round trip at b=2 s_q=2 h=4 L<=150: door alone {:.1f} us, torch_mla {:.1f} us\n", door_s * 1e6,
                           kernel_s * 1e6);
  EXPECT_LT(door_s, kernel_s);
  // The kernel's own time as the child clocked it: inside the round trip that carried it; the
  // door's twin reports none (its round trip is all it is timed for).
  const auto* own = dynamic_cast<const mla::SelfTimed*>(p.get());
  ASSERT_NE(own, nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  p->run();
  const double trip = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_TRUE(own->last_run_seconds());
  EXPECT_GT(*own->last_run_seconds(), 0.0);
  EXPECT_LT(*own->last_run_seconds(), trip);
  ASSERT_NE(dynamic_cast<const mla::SelfTimed*>(o.get()), nullptr);
  EXPECT_FALSE(dynamic_cast<const mla::SelfTimed*>(o.get())->last_run_seconds());

  // One long-lived child per prepared call, reaped when the prepared call goes; both forked by
  // the door's fork server (the description started it), so neither imported torch itself.
  std::size_t forked = 0;
  const auto live = bench_children(&forked);
  ASSERT_EQ(live.size(), 2u);
  EXPECT_EQ(forked, 2u);
  p.reset();
  o.reset();
  for (const pid_t pid : live) EXPECT_TRUE(gone(pid)) << "bench child " << pid << " left behind (a zombie or alive)";
}

TEST_F(PythonBench, ADecodeThatRaisesIsAnErrorNamingItsMessage) {
  const auto k = open(kTestKernels / "door_kernels.py", "RAISES");
  const auto in = small_case();
  auto p = k.impl->prepare(in.view());
  try {
    p->run();
    FAIL() << "run() returned";
  } catch (const mla::UnsupportedError& e) {
    FAIL() << "a refusal, not an error: " << e.what();
  } catch (const mla::Error& e) {
    EXPECT_NE(std::string(e.what()).find("the door's test kernel refuses to work"), std::string::npos) << e.what();
  }
  EXPECT_THROW(p->results(), mla::Error);  // no call returned
}

TEST_F(PythonBench, ARefusalIsUnsupportedAndCanImplementIsAskedByCheck) {
  const auto in = small_case();
  const auto refuses = open(kTestKernels / "door_kernels.py", "REFUSES");
  auto p = refuses.impl->prepare(in.view());
  EXPECT_THROW(p->run(), mla::UnsupportedError);

  const auto three = open(kTestKernels / "door_kernels.py", "CLAIMS_THREE_HEADS");
  const auto why = three.impl->check(in.shape);  // 4 heads
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("does 4 heads only as 3"), std::string::npos) << *why;
  EXPECT_EQ(three.overhead->check(in.shape), why);  // the same answer, asked once
  auto shape3 = in.shape;
  shape3.heads = 3;
  EXPECT_FALSE(three.impl->check(shape3));
  EXPECT_THROW(three.impl->prepare(in.view()), mla::UnsupportedError);
}

// A merge of `head_dim`-wide bf16 states, 3 tokens and 2 heads: the shape is what matters here.
mla::MergeBuffers merge_case(int head_dim) {
  mla::MergeBuffers b;
  b.shape = {3, 2, head_dim, mla::StateDType::bf16};
  for (int i = 0; i < 3 * 2 * head_dim; ++i) {
    mla::append_state_value(b.shape.dtype, 0.01 * (i % 17), b.out_a);
    mla::append_state_value(b.shape.dtype, -0.02 * (i % 13), b.out_b);
  }
  b.lse_a = {0.5f, 1.0f, -1.0f, 2.0f, 0.0f, 3.0f};
  b.lse_b = {1.5f, -0.5f, 0.25f, 1.0f, 2.5f, -2.0f};
  return b;
}

// An entry's own can_implement is asked before a benchmark point is prepared, for a Python kernel
// (in the door's claims child) as for a C plug-in (ABI 1.6): a point it does not claim is refused
// in its words and never called, the overhead row alike; a point it claims is prepared.
void expect_merge_128_only(const mla::MergeImpl& merge, const std::string& words) {
  const auto wide = merge_case(512), narrow = merge_case(128);
  try {
    (void)merge.prepare(wide.view());
    ADD_FAILURE() << "a 512-wide merge it does not claim was prepared";
  } catch (const mla::UnsupportedError& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("can_implement"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW((void)merge.prepare(narrow.view()));
}

TEST_F(PythonBench, AnEntrysCanImplementIsAskedBeforeItsPointIsPrepared) {
  const auto k = open(kTestKernels / "door_kernels.py", "MERGE_128_ONLY");
  ASSERT_TRUE(k.merge && k.merge_overhead);
  expect_merge_128_only(*k.merge, "128-wide states only");
  expect_merge_128_only(*k.merge_overhead, "128-wide states only");
}

TEST(PluginBench, AnEntrysCanImplementIsAskedBeforeItsPointIsPrepared) {
  const auto k = mla::certify::open_plugin_for_bench(MLA_PLUGIN_MERGE_CLAIMS_HEAD_DIM_128);
  ASSERT_TRUE(k.merge && k.merge_overhead);
  expect_merge_128_only(*k.merge, "128-wide states only");
  expect_merge_128_only(*k.merge_overhead, "128-wide states only");
}

TEST_F(PythonBench, AKernelInOtherConventionsIsJudgedInTheSuitesOwn) {
  // FlashInfer's conventions (lse base 2 laid out [b, s_q, h], -inf for an empty row, sparse
  // indices as global slots) on a sparse case with an empty sequence and invalid indices: the
  // inputs are converted before the child sees them, the outputs after results() reads them.
  mla::axes::AxisPoint p;
  p.name = "bench_door_sparse";
  p.shape.batch = 2;
  p.shape.s_q = 2;
  p.shape.heads = 3;
  p.shape.page_size = 64;
  p.shape.topk = 16;
  p.invalid_per_row = 4;
  p.seqlens = {0, 150};
  p.seed = 12;
  mla::axes::derive_paging(p);
  const auto in = mla::axes::build_inputs(p);
  const auto k = open(kSource / "kernels" / "python" / "examples" / "flashinfer_conventions.py", "KERNEL");
  ASSERT_FALSE(k.impl->info().conventions.canonical());
  auto prepared = k.impl->prepare(in.view());
  prepared->run();
  const auto got = prepared->results();
  const auto reasons = judged(in.view(), k.impl->info(), got);
  EXPECT_TRUE(reasons.empty()) << fmt::format("{}", fmt::join(reasons, "; "));
  EXPECT_TRUE(std::isinf(got.lse.front()) && got.lse.front() > 0);  // sequence 0 is empty: canonical +inf
  // The same code declaring the canonical conventions: nothing converted, and the judge says so
  // (on a dense case with as many heads as query tokens, where it can write its [b, s_q, h] lse into
  // [b, h, s_q]: its base 2 and the transposition are then what differs).
  const auto dense = small_case(2);
  const auto undeclared = open(kSource / "kernels" / "python" / "examples" / "flashinfer_conventions.py", "KERNEL_UNDECLARED");
  auto wrong = undeclared.impl->prepare(dense.view());
  wrong->run();
  EXPECT_FALSE(judged(dense.view(), undeclared.impl->info(), wrong->results()).empty());
}

TEST_F(PythonBench, ACudaKernelsOutputsComeBackOnlyWhenAskedFor) {
  {
    // Without a device (and without MLA_DOOR_DEVICE), a "cuda" kernel cannot run here, and says why.
    const bool device = run_command(kTorchPython + " -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'").status == 0;
    const auto k = open(kTestKernels / "door_kernels.py", "CUDA");
    if (device) {
      EXPECT_FALSE(k.impl->unavailable());
    } else {
      ASSERT_TRUE(k.impl->unavailable());
      EXPECT_NE(k.impl->unavailable()->find("sees no CUDA device"), std::string::npos) << *k.impl->unavailable();
    }
  }
  // The copy-in / copy-out path of a "cuda" kernel, on CPU tensors (MLA_DOOR_DEVICE=cpu).
  ScopedEnv cpu("MLA_DOOR_DEVICE", "cpu");
  const auto k = open(kTestKernels / "door_kernels.py", "CUDA");
  ASSERT_FALSE(k.impl->unavailable()) << *k.impl->unavailable();
  const auto in = small_case();
  auto p = k.impl->prepare(in.view());
  p->run();
  const auto got = p->results();
  const auto reasons = judged(in.view(), k.impl->info(), got);
  EXPECT_TRUE(reasons.empty()) << fmt::format("{}", fmt::join(reasons, "; "));
  // The door alone never computes: what comes back is the buffers' unwritten pattern (NaN).
  auto o = k.overhead->prepare(in.view());
  o->run();
  const auto nothing = o->results();
  ASSERT_FALSE(nothing.out.empty());
  EXPECT_TRUE(std::isnan(nothing.out.front()));
}

TEST_F(PythonBench, AChildKilledMidRunIsAnErrorNotAHang) {
  const auto in = small_case();
  // Dies on its own second call: the first returns, the second names the signal, and so does
  // every call after it.
  const auto dies = open(kTestKernels / "bench_kernels.py", "KILLED_ON_SECOND_CALL");
  auto p = dies.impl->prepare(in.view());
  p->run();
  for (int i = 0; i < 2; ++i) {
    try {
      p->run();
      FAIL() << "run() returned";
    } catch (const mla::Error& e) {
      EXPECT_NE(std::string(e.what()).find("bench_killed: the Python kernel's child crashed: killed by signal SIGKILL"),
                std::string::npos)
          << e.what();
    }
  }
  // Killed from outside while it hangs in a call (the deadline is far off).
  const auto hangs = open(kTestKernels / "bench_kernels.py", "HANGS");
  auto h = hangs.impl->prepare(in.view());
  const auto live = bench_children();  // the dead child was reaped when its death was seen
  ASSERT_EQ(live.size(), 1u);
  std::thread killer([pid = live.front()] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    kill(pid, SIGKILL);
  });
  const auto t0 = std::chrono::steady_clock::now();
  try {
    h->run();
    FAIL() << "run() returned";
  } catch (const mla::Error& e) {
    EXPECT_NE(std::string(e.what()).find("SIGKILL"), std::string::npos) << e.what();
  }
  killer.join();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
  EXPECT_TRUE(gone(live.front()));
}

TEST_F(PythonBench, AHungCallIsKilledAtItsDeadline) {
  ScopedEnv deadline("MLA_BENCH_CALL_TIMEOUT", "1.5");
  const auto in = small_case();
  const auto hangs = open(kTestKernels / "bench_kernels.py", "HANGS");
  auto h = hangs.impl->prepare(in.view());
  const auto live = bench_children();
  ASSERT_EQ(live.size(), 1u);
  try {
    h->run();
    FAIL() << "run() returned";
  } catch (const mla::Error& e) {
    EXPECT_NE(std::string(e.what()).find("bench_hangs: the Python kernel's child timed out after 1.5 s (killed)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(gone(live.front()));
}

TEST_F(PythonBench, NoTorchMakesItUnavailableNamingWhatWasTried) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "shadow" / "torch");
  std::ofstream(tmp.path() / "shadow" / "torch" / "__init__.py")
      << "raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n";
  const auto exe = tmp.path() / "python3";
  std::ofstream(exe) << "#!/bin/sh\nPYTHONPATH=" << (tmp.path() / "shadow").string() << " exec " << kTorchPython
                     << " \"$@\"\n";
  fs::permissions(exe, fs::perms::owner_all);
  const auto k = open_python_for_bench(kExample.string() + ":KERNEL", MLA_CLI_EXE, exe);
  const auto why = k.impl->unavailable();
  ASSERT_TRUE(why);
  EXPECT_NE(why->find("no python3 that imports torch: tried " + exe.string()), std::string::npos) << *why;
  EXPECT_EQ(k.overhead->unavailable(), why);
  EXPECT_THROW(k.impl->prepare(small_case().view()), mla::UnsupportedError);
}

}  // namespace
