// A Python kernel opened for timing (external_bench.hpp, open_python_for_bench). Its declaration
// and its can_implement answers come from the same code `mla certify --python` uses
// (describe_python, claim); its inputs are laid out in the certifier's shared buffers (Arena) as
// for one call, and ONE child of the door (`child.py bench`) maps them, prepares the call once
// and then makes one call per request on a socket, so the benchmark's timed round trip holds the
// kernel and the door's fixed cost, nothing else. This process never imports the user's code.
#include "mla/certify/external_bench.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "isolation/arena.hpp"
#include "kinds/entry_plans.hpp"
#include "run/claims.hpp"
#include "mla/certify/certify.hpp"
#include "mla/certify/isolation.hpp"
#include "mla/certify/protocol.hpp"
#include "mla/certify/wire.hpp"
#include "mla/core/conventions.hpp"
#include "mla/core/error.hpp"
#include "mla/core/text.hpp"
#include "isolation/python_door.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The requests of child.py's `bench` verb (REQUEST_CALL, REQUEST_RESULTS there).
constexpr char kRequestCall = 'c';
constexpr char kRequestResults = 'r';

// How long one call (and the child's start) may take before the child is taken for hung.
double call_timeout_s() {
  const char* env = std::getenv("MLA_BENCH_CALL_TIMEOUT");
  if (!env || !*env) return 120.0;
  char* end = nullptr;
  const double v = std::strtod(env, &end);
  if (end == env || *end != '\0' || !std::isfinite(v) || v <= 0) {
    throw UsageError(fmt::format("MLA_BENCH_CALL_TIMEOUT={} is not a positive number of seconds", printable(env)));
  }
  return v;
}

// An FP8 call's scale format: AttnInputs does not carry one, and the synthetic points the
// benchmark times default to fp32 scales (AxisPoint::scale_fmt).
std::optional<ScaleFmt> bench_scale_fmt(const AttnShape& s) {
  return s.cache_format == CacheFormat::fp8 ? std::optional<ScaleFmt>(ScaleFmt::fp32) : std::nullopt;
}

// What the door knows of one Python kernel, shared by the kernel, its overhead twin and every
// prepared call: the Session describe_python and claim() work in (its private work folder, the
// door's fork server for can_implement), the validated declaration and the answers already had.
struct Door {
  Options options;
  std::ostringstream progress;  // the fork server's notes: a benchmark has no progress stream
  Session session{options, progress};
  Implementation kernel;
  std::mutex mutex;  // check() is const and may be asked from several threads
  std::map<std::string, std::optional<std::string>> checked;  // shape (JSON) -> refusal
  int children = 0;                                            // names each child's files
};

// One long-lived `child.py bench` process and its end of the socket.
class BenchChild {
 public:
  // Starts argv + `--socket N`, the shared buffers inherited under `arena_fd`, its output into
  // `log`; `kernel` names it in errors. Throws mla::Error when no process could be started.
  // With `hooks.server` serving, the door's fork server forks it (hooks.server_args + `--socket
  // N`, both descriptors under their own numbers): the child then pays no start-up of its own
  // (importing torch, seconds per child), only its CUDA context.
  BenchChild(std::vector<std::string> argv, int arena_fd, fs::path log, std::string kernel, const ChildHooks& hooks);
  ~BenchChild();
  BenchChild(const BenchChild&) = delete;
  BenchChild& operator=(const BenchChild&) = delete;

  // Sends one request and waits for its answer (wait_answer).
  void round_trip(char request, double timeout_s, const char* during);
  // Waits for the one byte that says the record is written. Throws mla::Error naming how the
  // child ended (signal or exit status, its last output) or that it ran past `timeout_s` (it is
  // then killed); every later request throws the same.
  void wait_answer(double timeout_s, const char* during);

 private:
  [[noreturn]] void lost(const std::string& how, const char* during);
  std::string reap();  // how the child ended, after it closed its end
  pid_t pid_ = -1;
  bool reaped_ = false;
  int sock_ = -1;
  fs::path log_;
  std::string kernel_;
  std::optional<std::string> dead_;
};

BenchChild::BenchChild(std::vector<std::string> argv, int arena_fd, fs::path log, std::string kernel,
                       const ChildHooks& hooks)
    : log_(std::move(log)), kernel_(std::move(kernel)) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
    throw Error(fmt::format("{}: cannot create the socket to the Python kernel's child: {}", kernel_, std::strerror(errno)));
  }
  sock_ = sv[0];
  argv.insert(argv.end(), {"--socket", std::to_string(sv[1])});
  if (hooks.server && hooks.server->serving()) {
    auto args = hooks.server_args;
    args.insert(args.end(), {"--socket", std::to_string(sv[1])});
    const int out = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    const pid_t pid = out >= 0 ? hooks.server->spawn(args, out, std::vector<int>{arena_fd, sv[1]}) : -1;
    if (out >= 0) close(out);
    if (pid > 0) {
      close(sv[1]);
      pid_ = pid;  // a child of this process in its own group, registered live by spawn()
      return;
    }
    // A server that failed has stopped (it says why to the next run): this child starts the usual way.
  }
  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls are allowed.
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const int out = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();
  const pid_t pid = out >= 0 && devnull >= 0 ? fork() : -1;
  if (pid == 0) {
    // Its own group (so the kill takes whatever the kernel started too), dies with this process.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(125);
    if (dup2(devnull, STDIN_FILENO) < 0 || dup2(out, STDOUT_FILENO) < 0 || dup2(out, STDERR_FILENO) < 0) {
      _exit(kChildSetupFailed);
    }
    for (const int fd : {arena_fd, sv[1]}) {
      const int flags = fcntl(fd, F_GETFD);
      if (flags < 0 || fcntl(fd, F_SETFD, flags & ~FD_CLOEXEC) < 0) _exit(kChildSetupFailed);
    }
    execv(args[0], args.data());
    _exit(126);
  }
  const int err = errno;
  for (const int fd : {out, devnull, sv[1]}) {
    if (fd >= 0) close(fd);
  }
  if (pid < 0) {
    close(sock_);
    throw Error(fmt::format("{}: cannot start the Python kernel's child ({}): {}", kernel_, argv.front(), std::strerror(err)));
  }
  setpgid(pid, pid);  // from this side too: no window where a kill(-pid) misses it
  pid_ = pid;
  // Not the leftover of a case that claim() runs meanwhile in a child of its own.
  set_live_child(pid_, true);
}

BenchChild::~BenchChild() {
  if (pid_ > 0 && !reaped_) {
    kill(-pid_, SIGKILL);
    kill(pid_, SIGKILL);
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  if (pid_ > 0) set_live_child(pid_, false);
  if (sock_ >= 0) close(sock_);
  std::error_code ec;
  fs::remove(log_, ec);
}

std::string BenchChild::reap() {
  // It closed its end: it has ended or is ending. One that lingers with its end closed is
  // killed after a grace period rather than waited on forever.
  int status = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  for (;;) {
    const pid_t w = waitpid(pid_, &status, WNOHANG);
    if (w == pid_) break;
    if (w < 0 && errno != EINTR) return fmt::format("could not be waited on: {}", std::strerror(errno));
    if (std::chrono::steady_clock::now() > give_up) {
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  reaped_ = true;
  ChildOutcome o;
  o.kind = WIFSIGNALED(status) ? ChildOutcome::Kind::signaled : ChildOutcome::Kind::exited;
  o.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
  return o.kind == ChildOutcome::Kind::exited && o.exit_code == 0 ? "exited" : o.describe();
}

void BenchChild::lost(const std::string& how, const char* during) {
  const auto tail = output_tail(log_);
  dead_ = fmt::format("{}: the Python kernel's child {} {}{}", kernel_, how, during,
                      tail.empty() ? "" : "; its last output: " + tail);
  throw Error(*dead_);
}

void BenchChild::round_trip(char request, double timeout_s, const char* during) {
  if (dead_) throw Error(*dead_);
  // MSG_NOSIGNAL: a child that died must be an error here, not a SIGPIPE that ends the benchmark.
  ssize_t n;
  do {
    n = send(sock_, &request, 1, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n != 1) lost(reap(), during);
  wait_answer(timeout_s, during);
}

void BenchChild::wait_answer(double timeout_s, const char* during) {
  if (dead_) throw Error(*dead_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
      (void)reap();
      lost(fmt::format("timed out after {:g} s (killed)", timeout_s), during);
    }
    pollfd p{sock_, POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1 << 30)));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) throw Error(fmt::format("{}: waiting on the Python kernel's child: poll failed: {}", kernel_, std::strerror(errno)));
    if (r == 0) continue;
    char answer = 0;
    ssize_t n;
    do {
      n = recv(sock_, &answer, 1, 0);
    } while (n < 0 && errno == EINTR);
    if (n == 1) return;
    lost(reap(), during);  // its end closed (0) or broken (< 0): it is gone
  }
}

// The child's words in the control block, bounded and made printable (they are the kernel's bytes).

// Throws for a record in the arena's call slot 0 that is not a returned call of `name`'s: its
// refusal (UnsupportedError) or its error, in its words, or a request answered without a record.
void check_call_record(const Arena& arena, const std::string& name, const char* what) {
  const auto& rec = arena.control().calls[0];
  switch (rec.state) {
    case ArenaState::ok: return;
    case ArenaState::unsupported:
      throw UnsupportedError(fmt::format("{} refused {}: {}", name, what, bounded(rec.message)));
    case ArenaState::error: throw Error(fmt::format("{} failed {}: {}", name, what, bounded(rec.message)));
    default: break;
  }
  throw Error(fmt::format("{}: the child answered {} without a record of it (state {})", name, what,
                          static_cast<int32_t>(rec.state)));
}

// One prepared call: the inputs in the kernel's conventions laid out in an Arena, and the child
// that calls the kernel on them.
class PythonPrepared final : public PreparedAttention, public SelfTimed {
 public:
  PythonPrepared(std::shared_ptr<Door> door, const AttnInputs& canonical, bool empty);
  void run() override;
  AttnOutputs results() override;
  // The kernel's own time, as the child measured it; the empty twin has none: its whole cost is
  // the round trip, which is what it is timed for.
  std::optional<double> last_run_seconds() const override {
    if (empty_ || !ran_) return std::nullopt;
    return arena_->control().calls[0].seconds;
  }

 private:
  // Throws for a record in call slot 0 that is not a returned call.
  void check_record(const char* what) const;
  std::shared_ptr<Door> door_;
  AttnShape canonical_shape_;
  AttnBuffers inputs_;  // the kernel's conventions; the arena's initial bytes point into them
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<BenchChild> child_;  // declared last: killed before the buffers go
  double timeout_s_;
  bool empty_;
  bool ran_ = false;
};

PythonPrepared::PythonPrepared(std::shared_ptr<Door> door, const AttnInputs& canonical, bool empty)
    : door_(std::move(door)), canonical_shape_(canonical.shape), timeout_s_(call_timeout_s()), empty_(empty) {
  const Implementation& k = door_->kernel;
  auto converted = inputs_to_kernel(k.info.conventions, canonical);  // canonical -> kernel
  inputs_ = converted ? std::move(*converted) : AttnBuffers(canonical);
  const int out_bytes = static_cast<int>(out_bytes_per_value(k.info.out_dtype));
  // The canaries and the unwritten pattern need no secret here (nothing is audited), only bytes.
  arena_ = std::make_unique<Arena>(std::vector<AttnInputs>{inputs_.view()}, std::vector<ArenaCallPlan>{{0, -1, -1, false}},
                                   out_bytes, std::random_device{}());
  arena_->reset();
  int n;
  {
    std::lock_guard<std::mutex> lock(door_->mutex);
    n = door_->children++;
  }
  const auto& work = door_->session.work.path();
  const auto plan = work / fmt::format("bench-{}.plan", n);
  wire::Message m(kAttentionCalls);
  m.fields() = {{"layout", arena_->layout().to_json()}, {"make_calls", 1}, {"control", arena_control_layout()},
                {"arena_fd", arena_->fd()}};
  if (const auto sf = bench_scale_fmt(canonical.shape)) m.fields()["scale_fmt"] = to_string(*sf);
  wire::write(plan, m);
  std::vector<std::string> args{"--plan", plan.string()};
  if (empty) args.push_back("--empty");
  const auto argv = python_child_argv(*k.ref.python, "bench", args);
  ChildHooks hooks;
  {
    std::lock_guard<std::mutex> lock(door_->mutex);  // the session's servers are shared with check()
    use_door_server(door_->session, *k.ref.python, argv, hooks);
  }
  child_ = std::make_unique<BenchChild>(argv, arena_->fd(), work / fmt::format("bench-{}.log", n), k.info.name, hooks);
  try {
    // Importing torch on a busy machine can take long: the start gets at least the default.
    child_->wait_answer(std::max(timeout_s_, 120.0), "while starting (importing torch and the kernel, laying out the call)");
  } catch (...) {
    std::error_code ec;
    fs::remove(plan, ec);
    throw;
  }
  std::error_code ec;
  fs::remove(plan, ec);
  const auto& c = arena_->control();
  if (c.setup_state == ArenaState::unsupported) {
    throw UnsupportedError(fmt::format("{}: {}", k.info.name, bounded(c.setup_message)));
  }
  if (c.setup_state != ArenaState::not_started) throw Error(fmt::format("{}: {}", k.info.name, bounded(c.setup_message)));
}

void PythonPrepared::check_record(const char* what) const { check_call_record(*arena_, door_->kernel.info.name, what); }

void PythonPrepared::run() {
  ran_ = false;
  child_->round_trip(kRequestCall, timeout_s_, "during a call");
  check_record("the call");
  ran_ = true;
}

AttnOutputs PythonPrepared::results() {
  const Implementation& k = door_->kernel;
  if (!ran_) throw Error(fmt::format("{}: results() without a call that returned", k.info.name));
  if (k.info.backend == "cuda") {
    // Device outputs come back only now, never on a timed call.
    child_->round_trip(kRequestResults, timeout_s_, "while copying its outputs back");
    check_record("copying its outputs back");
  }
  const auto& c = arena_->layout().calls.front();
  return canonical_outputs(k.info, canonical_shape_, {arena_->data(c.out), arena_->bytes(c.out)},
                           {arena_->data(c.lse), arena_->bytes(c.lse)});
}

class PythonBench final : public AttentionImpl {
 public:
  PythonBench(std::shared_ptr<Door> door, bool empty) : door_(std::move(door)), empty_(empty), info_(door_->kernel.info) {
    if (empty_) {
      info_.name = overhead_name(info_.name);
      info_.description = fmt::format("the Python door's own cost for {}: the same call path, no decode",
                                      door_->kernel.info.name);
    }
  }
  const KernelInfo& info() const override { return info_; }
  std::optional<std::string> unavailable() const override { return door_->kernel.unavailable; }
  std::optional<std::string> check(const AttnShape& shape) const override;
  std::unique_ptr<PreparedAttention> prepare(const AttnInputs& in) const override;

 private:
  std::shared_ptr<Door> door_;
  bool empty_;
  KernelInfo info_;
};

std::optional<std::string> PythonBench::check(const AttnShape& shape) const {
  if (auto no = check_capabilities(info_.caps, shape)) return no;
  const Implementation& k = door_->kernel;
  if (!k.can_implement) return std::nullopt;
  std::lock_guard<std::mutex> lock(door_->mutex);
  const auto key = to_json(shape).dump();
  if (const auto it = door_->checked.find(key); it != door_->checked.end()) return it->second;
  std::optional<std::string> refusal;
  try {
    // The shape alone: check() sees no lengths, so the kernel is asked with none.
    const auto c = claim(door_->session, k, shape, bench_scale_fmt(shape), {});
    if (!c.claimed) refusal = c.reason;
  } catch (const std::exception& e) {
    // A predicate that fails claims nothing: the benchmark skips the shape, saying why.
    refusal = fmt::format("can_implement failed: {}", e.what());
  }
  door_->checked.emplace(key, refusal);
  return refusal;
}

std::unique_ptr<PreparedAttention> PythonBench::prepare(const AttnInputs& in) const {
  if (const auto why = unavailable()) throw UnsupportedError(fmt::format("{} is unavailable: {}", info_.name, *why));
  validate_attention_inputs(in, info_.name);
  if (const auto no = check(in.shape)) throw UnsupportedError(fmt::format("{}: {}", info_.name, *no));
  // The lengths are a claim too (varlen), one a shape cannot show.
  if (const auto no = check_varlen(info_.caps, in.cache_seqlens)) throw UnsupportedError(fmt::format("{}: {}", info_.name, *no));
  return std::make_unique<PythonPrepared>(door_, in, empty_);
}

// ---- the other entries ---------------------------------------------------------------------

// One prepared call of a Python kernel's other entry (prefill, merge, top-k, indexer logits,
// sparse prefill): its inputs (already in the entry's conventions) copied once and laid out as the
// certifier lays out that entry's call (entry_plans.hpp), one long-lived `child.py bench` child
// making the call per request, the outputs read back as the kind's outputs, in the entry's
// conventions, as a registered kernel's results() are.
template <class Prepared, class Buffers, class Outputs>
class PythonEntryPrepared final : public Prepared, public SelfTimed {
 public:
  using Plan = std::function<EntryPlan<Outputs>(const Buffers&)>;
  PythonEntryPrepared(std::shared_ptr<Door> door, const Implementation& entry, Buffers in, const Plan& plan, bool empty)
      : door_(std::move(door)), name_(entry.info.name), cuda_(entry.info.backend == "cuda"), in_(std::move(in)),
        timeout_s_(call_timeout_s()), empty_(empty) {
    plan_ = plan(in_);  // its spans point into in_, which lives as long as this call
    std::vector<ArenaBuffer> buffers = plan_.calls.inputs;
    json inputs = json::object();
    for (std::size_t i = 0; i < buffers.size(); ++i) inputs[buffers[i].name] = i;
    std::vector<int> own;
    for (const auto& b : plan_.calls.per_call) {
      own.push_back(static_cast<int>(buffers.size()));
      buffers.push_back(b);
    }
    own_ = own;
    // The canaries and the unwritten pattern need no secret here (nothing is audited), only bytes.
    arena_ = std::make_unique<Arena>(buffers, std::random_device{}());
    arena_->reset();
    int n;
    {
      std::lock_guard<std::mutex> lock(door_->mutex);
      n = door_->children++;
    }
    const auto& work = door_->session.work.path();
    const auto plan_file = work / fmt::format("bench-{}.plan", n);
    wire::Message m(kEntryCalls);
    m.fields() = {{"entry", plan_.calls.entry},   {"layout", arena_->layout().to_json()},
                  {"control", arena_control_layout()}, {"arena_fd", arena_->fd()},
                  {"make_calls", 1},                  {"inputs", inputs},
                  {"calls", std::vector<std::vector<int>>{own}}, {"args", plan_.calls.args}};
    wire::write(plan_file, m);
    std::vector<std::string> args{"--plan", plan_file.string()};
    if (empty) args.push_back("--empty");
    const auto argv = python_child_argv(*entry.ref.python, "bench", args);
    ChildHooks hooks;
    {
      std::lock_guard<std::mutex> lock(door_->mutex);  // the session's servers are shared
      use_door_server(door_->session, *entry.ref.python, argv, hooks);
    }
    child_ = std::make_unique<BenchChild>(argv, arena_->fd(), work / fmt::format("bench-{}.log", n), name_, hooks);
    std::error_code ec;
    try {
      child_->wait_answer(std::max(timeout_s_, 120.0), "while starting (importing torch and the kernel, laying out the call)");
    } catch (...) {
      fs::remove(plan_file, ec);
      throw;
    }
    fs::remove(plan_file, ec);
    const auto& c = arena_->control();
    if (c.setup_state == ArenaState::unsupported) throw UnsupportedError(fmt::format("{}: {}", name_, bounded(c.setup_message)));
    if (c.setup_state != ArenaState::not_started) throw Error(fmt::format("{}: {}", name_, bounded(c.setup_message)));
  }
  void run() override {
    ran_ = false;
    child_->round_trip(kRequestCall, timeout_s_, "during a call");
    check_record("the call");
    ran_ = true;
  }
  Outputs results() override {
    if (!ran_) throw Error(fmt::format("{}: results() without a call that returned", name_));
    if (cuda_) {
      // Device outputs come back only now, never on a timed call.
      child_->round_trip(kRequestResults, timeout_s_, "while copying its outputs back");
      check_record("copying its outputs back");
    }
    std::vector<std::vector<uint8_t>> b;
    for (const int region : own_) b.emplace_back(arena_->data(region), arena_->data(region) + arena_->bytes(region));
    return plan_.outputs(b);
  }
  // The kernel's own time, as the child measured it; the empty twin's whole cost is the round trip.
  std::optional<double> last_run_seconds() const override {
    if (empty_ || !ran_) return std::nullopt;
    return arena_->control().calls[0].seconds;
  }

 private:
  void check_record(const char* what) const { check_call_record(*arena_, name_, what); }
  std::shared_ptr<Door> door_;
  std::string name_;
  bool cuda_;
  Buffers in_;
  EntryPlan<Outputs> plan_;
  std::vector<int> own_;
  std::unique_ptr<Arena> arena_;
  std::unique_ptr<BenchChild> child_;  // declared last: killed before the buffers go
  double timeout_s_;
  bool empty_;
  bool ran_ = false;
};

// A Python kernel's other entry as an implementation of its kind: its validated declaration (the
// one `mla certify --python` records), the kind's default claims check and cost model, prepare()
// starting the entry's bench child. The overhead twin makes no call at all.
template <class Impl, class Info, class Inputs, class Prepared, class Buffers, class Outputs>
class PythonEntryBench final : public Impl {
 public:
  using Plan = typename PythonEntryPrepared<Prepared, Buffers, Outputs>::Plan;
  PythonEntryBench(std::shared_ptr<Door> door, Implementation entry, Info info, Plan plan, bool empty)
      : door_(std::move(door)), entry_(std::move(entry)), info_(std::move(info)), plan_(std::move(plan)), empty_(empty) {
    if (empty_) {
      const std::string of = info_.name;
      info_.name = overhead_name(of);
      info_.description = fmt::format("the Python door's own cost for {}: the same call path, no kernel call", of);
    }
  }
  const Info& info() const override { return info_; }
  std::optional<std::string> unavailable() const override { return entry_.unavailable; }
  std::unique_ptr<Prepared> prepare(const Inputs& in) const override {
    if (const auto why = unavailable()) throw UnsupportedError(fmt::format("{} is unavailable: {}", info_.name, *why));
    // The entry's own can_implement first, as `mla certify` asks it (in a child, once per call):
    // a point it does not claim is skipped in its words, never called.
    if (entry_.can_implement) {
      std::optional<std::string> refusal;
      {
        std::lock_guard<std::mutex> lock(door_->mutex);
        try {
          const auto c = claim_entry(door_->session, entry_, claim_question(in));
          if (!c.claimed) refusal = c.reason;
        } catch (const std::exception& e) {
          // A predicate that fails claims nothing: the benchmark skips the point, saying why.
          refusal = fmt::format("can_implement failed: {}", e.what());
        }
      }
      if (refusal) throw UnsupportedError(fmt::format("{}: {}", info_.name, *refusal));
    }
    return std::make_unique<PythonEntryPrepared<Prepared, Buffers, Outputs>>(door_, entry_, Buffers(in), plan_, empty_);
  }

 private:
  std::shared_ptr<Door> door_;
  Implementation entry_;
  Info info_;
  Plan plan_;
  bool empty_;
};

// The entry `e` (one of describe_python's implementations, not the decode) as its kind's
// benchmark implementation and overhead twin in `k`.
void open_python_entry(const std::shared_ptr<Door>& door, const Implementation& e, ExternalBenchKernel& k) {
  const auto both = [&](auto& impl, auto& overhead, auto make) { impl = make(false), overhead = make(true); };
  if (e.prefill) {
    using B = PythonEntryBench<PrefillImpl, PrefillKernelInfo, PrefillInputs, PreparedPrefill, PrefillBuffers, PrefillOutputs>;
    const auto info = e.prefill->info();
    both(k.prefill, k.prefill_overhead, [&](bool empty) {
      return std::make_unique<B>(door, e, info, [info](const PrefillBuffers& b) { return prefill_entry_plan(info, b.view()); }, empty);
    });
  } else if (e.merge) {
    using B = PythonEntryBench<MergeImpl, MergeKernelInfo, MergeInputs, PreparedMerge, MergeBuffers, MergeOutputs>;
    const auto info = e.merge->info();
    both(k.merge, k.merge_overhead, [&](bool empty) {
      return std::make_unique<B>(door, e, info, [](const MergeBuffers& b) { return merge_entry_plan(b.view()); }, empty);
    });
  } else if (e.topk) {
    using B = PythonEntryBench<TopkImpl, TopkKernelInfo, TopkInputs, PreparedTopk, TopkBuffers, TopkOutputs>;
    const auto info = e.topk->info();
    both(k.topk, k.topk_overhead, [&](bool empty) {
      return std::make_unique<B>(door, e, info, [info](const TopkBuffers& b) { return topk_entry_plan(info, b.view()); }, empty);
    });
  } else if (e.indexer_logits) {
    using B = PythonEntryBench<IndexerLogitsImpl, IndexerLogitsKernelInfo, IndexerLogitsInputs, PreparedIndexerLogits,
                               IndexerLogitsBuffers, std::vector<float>>;
    const auto info = e.indexer_logits->info();
    both(k.indexer_logits, k.indexer_logits_overhead, [&](bool empty) {
      return std::make_unique<B>(door, e, info, [](const IndexerLogitsBuffers& b) { return indexer_logits_entry_plan(b.view()); },
                                 empty);
    });
  } else if (e.sparse_prefill) {
    using B = PythonEntryBench<SparsePrefillImpl, SparsePrefillKernelInfo, SparsePrefillInputs, PreparedSparsePrefill,
                               SparsePrefillBuffers, SparsePrefillOutputs>;
    const auto info = e.sparse_prefill->info();
    both(k.sparse_prefill, k.sparse_prefill_overhead, [&](bool empty) {
      return std::make_unique<B>(door, e, info,
                                 [info](const SparsePrefillBuffers& b) { return sparse_prefill_entry_plan(info, b.view()); }, empty);
    });
  }
  // An indexer append writes a cache in place: the benchmark has no axis for it (nor for a C
  // plug-in's), so it is left out here as there.
}

}  // namespace

ExternalBenchKernel open_python_for_bench(const std::string& spec, const fs::path& self, const fs::path& python_exe) {
  auto door = std::make_shared<Door>();
  door->options.python_exe = python_exe;
  // The description and can_implement children import torch: the per-call deadline is no
  // measure for them (describe_python and claim bound them by their own limits below this).
  door->options.timeout_s = std::max(call_timeout_s(), 120.0);
  door->session.self = self;
  auto all = describe_python(door->session, spec, 0);
  // The decode comes first when the kernel has one; the door's session and servers serve every
  // entry (the same module, the same Python).
  door->kernel = all.front().first;
  const auto& r = all.front().second;
  // The facts `mla certify --python` records in its KernelReport, under the benchmark's names.
  const auto fact = [&](const char* key) { return r.origin.contains(key) ? r.origin.at(key) : json(); };
  ExternalBenchKernel k;
  k.origin = {{"kind", "python"},         {"spec", fact("spec")},      {"module_digest", fact("module_sha256")},
              {"python", fact("python_version")}, {"torch", fact("torch_version")}, {"executable", fact("python")},
              {"version", r.version}};
  for (const auto& [e, report] : all) {
    if (!e.decodes()) open_python_entry(door, e, k);
  }
  if (door->kernel.decodes()) {
    k.impl = std::make_unique<PythonBench>(door, false);
    k.overhead = std::make_unique<PythonBench>(door, true);
  } else if (!k.prefill && !k.merge && !k.topk && !k.indexer_logits && !k.sparse_prefill) {
    throw UsageError(fmt::format("--python {}: it has no entry the benchmark times (decode, prefill, merge, top-k, "
                                 "indexer logits, sparse prefill)",
                                 printable(spec)));
  }
  return k;
}

}  // namespace mla::certify
