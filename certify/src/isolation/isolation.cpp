#include "mla/certify/isolation.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "mla/core/error.hpp"
#include "mla/reports/certificate.hpp"

namespace mla::certify {
namespace {

// What of a child's output is worth quoting in a verdict: the last few lines, bounded.
constexpr int kTailLines = 4;
constexpr std::size_t kTailChars = 600;

}  // namespace

std::string output_tail(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) return {};
  in.seekg(0, std::ios::end);
  const auto size = static_cast<std::streamoff>(in.tellg());
  const std::streamoff keep = std::min<std::streamoff>(size, 16 * 1024);
  in.seekg(size - keep);
  std::string text(static_cast<std::size_t>(keep), '\0');
  in.read(text.data(), keep);
  std::vector<std::string> lines;
  std::istringstream ss(text);
  for (std::string line; std::getline(ss, line);) {
    const auto b = line.find_first_not_of(" \t\r");
    if (b != std::string::npos) lines.push_back(line.substr(b));
  }
  std::string out;
  const std::size_t from = lines.size() > kTailLines ? lines.size() - kTailLines : 0;
  for (std::size_t i = from; i < lines.size(); ++i) out += (out.empty() ? "" : " | ") + lines[i];
  if (out.size() > kTailChars) out = "..." + out.substr(out.size() - kTailChars);
  return out;
}

std::string signal_description(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  const char* desc = strsignal(sig);
  return fmt::format("SIG{} ({})", abbrev ? abbrev : std::to_string(sig).c_str(), desc ? desc : "unknown signal");
}

std::string ChildOutcome::describe() const {
  switch (kind) {
    case Kind::exited:
      return exit_code == 0 ? "exited normally" : fmt::format("exited with status {}", exit_code);
    case Kind::signaled: return fmt::format("crashed: killed by signal {}", signal_description(signal));
    case Kind::timed_out: return fmt::format("timed out after {:g} s (killed)", timeout_s);
    case Kind::spawn_failed: return fmt::format("could not start a child process: {}", error);
  }
  return "unknown outcome";
}

namespace {

void remove_abandoned_work_dirs() {
  namespace fs = std::filesystem;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(fs::temp_directory_path(), ec)) {
    const auto name = e.path().filename().string();
    constexpr std::string_view prefix = "mla-certify-";
    if (name.rfind(prefix, 0) != 0) continue;
    const auto dash = name.find('-', prefix.size());
    const auto digits = name.substr(prefix.size(), dash == std::string::npos ? 0 : dash - prefix.size());
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const pid_t owner = static_cast<pid_t>(std::stol(digits));
    if (owner != ::getpid() && ::kill(owner, 0) != 0 && errno == ESRCH) {
      std::error_code rm;
      fs::remove_all(e.path(), rm);
    }
  }
}

}  // namespace

WorkDir::WorkDir() {
  namespace fs = std::filesystem;
  remove_abandoned_work_dirs();
  std::string tmpl = (fs::temp_directory_path() / fmt::format("mla-certify-{}-XXXXXX", ::getpid())).string();
  if (!mkdtemp(tmpl.data())) {
    // With the system's reason: a full TMPDIR or no descriptor left is the host's failure.
    const int err = errno;
    throw reports::WriteError(fmt::format("cannot create a temporary folder in {}: {}", fs::temp_directory_path().string(),
                                          std::strerror(err)),
                              err);
  }
  path_ = tmpl;
}

WorkDir::~WorkDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

namespace {

// Children run_child is waiting on right now (another thread may be running a case): never
// mistaken for a case's leftover.
std::mutex g_live_mutex;
std::set<pid_t> g_live;

// Field 22 of /proc/PID/stat (clock ticks after boot), and field 4, the parent: the
// comm field may hold spaces and parentheses, so fields are counted after the last ')'.
// Read with open/read, not a stream: a process may exit between the directory scan and the read,
// and then read() fails (ESRCH), which libstdc++'s filebuf turns into an exception whatever the
// stream's exception mask; such a process is simply not a leftover any more.
bool stat_of(pid_t pid, pid_t& ppid, unsigned long long& start) {
  const int fd = open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  std::string text;
  char buf[1024];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  const auto paren = text.rfind(')');
  if (paren == std::string::npos) return false;
  std::istringstream ss(text.substr(paren + 1));
  std::string field;
  std::vector<std::string> f;
  while (ss >> field && f.size() < 20) f.push_back(field);
  if (f.size() < 20) return false;
  ppid = static_cast<pid_t>(std::stol(f[1]));
  start = std::stoull(f[19]);
  return true;
}

}  // namespace

void set_live_child(pid_t pid, bool live) {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  if (live) {
    g_live.insert(pid);
  } else {
    g_live.erase(pid);
  }
}

bool become_child_subreaper() {
  // Once per process: from then on every orphan among the descendants of this process is
  // re-parented here instead of to init, so a case's daemons (setsid + double fork escapes a
  // process-group kill) can still be found and killed.
  static const bool ok = prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0;
  return ok;
}

int kill_leftover_descendants(unsigned long long started_after) {
  // A leftover of a case is a child of this process that run_child did not start and that
  // started no earlier than the case's child: the subreaper made it ours when its own parent
  // died. Killing one re-parents its children here, so repeat until a scan finds none; the
  // bound keeps a fork bomb from holding the certifier forever.
  const pid_t self = getpid();
  int killed = 0;
  for (int round = 0; round < 1000; ++round) {
    std::vector<pid_t> found;
    if (DIR* d = opendir("/proc")) {
      while (const dirent* e = readdir(d)) {
        char* end = nullptr;
        const long v = std::strtol(e->d_name, &end, 10);
        if (!end || *end != '\0' || v <= 0) continue;
        const pid_t pid = static_cast<pid_t>(v);
        pid_t ppid = 0;
        unsigned long long start = 0;
        if (!stat_of(pid, ppid, start) || ppid != self || start < started_after) continue;
        {
          std::lock_guard<std::mutex> lock(g_live_mutex);
          if (g_live.count(pid)) continue;
        }
        found.push_back(pid);
      }
      closedir(d);
    }
    if (found.empty()) break;
    for (const pid_t pid : found) kill(pid, SIGKILL);
    for (const pid_t pid : found) {
      while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    killed += static_cast<int>(found.size());
  }
  return killed;
}


std::filesystem::path self_executable() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::filesystem::path() : p;
}

ChildOutcome run_child(const std::vector<std::string>& argv, double timeout_s, const std::filesystem::path& log_file,
                       const ChildHooks& hooks) {
  ChildOutcome o;
  if (argv.empty()) {
    o.error = "empty command";
    return o;
  }
  // Everything the child needs is prepared before fork: between fork and exec only
  // async-signal-safe calls are allowed.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int log = open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (log < 0) {
    o.error = fmt::format("cannot create {}: {}", log_file.string(), std::strerror(errno));
    return o;
  }
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull < 0) {
    // No descriptor left (EMFILE): the host's failure, said as such (host_cause, spawn_failed).
    o.error = fmt::format("cannot open /dev/null: {}", std::strerror(errno));
    close(log);
    return o;
  }
  become_child_subreaper();
  const pid_t parent = getpid();
  pid_t pid = -1;
  if (hooks.server && hooks.server->serving()) {
    // A server that fails has stopped serving (its stop_reason says why, for the run's progress
    // line); this child then starts the usual way, below.
    pid = hooks.server->spawn(hooks.server_args, log, hooks.pass_fd);
  }
  if (pid < 0) pid = fork();
  if (pid < 0) {
    o.error = fmt::format("fork failed: {}", std::strerror(errno));
    close(log);
    close(devnull);
    return o;
  }
  if (pid == 0) {
    // Own process group, so a timeout kills whatever the kernel started too; and die with the
    // parent, so a killed certifier leaves no hung kernel behind.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(125);
    // Every step checked: a child that could not be set up is the host's failure
    // (kChildHostFailure), never a kernel that misbehaved. The shared buffers keep their number
    // (below any descriptor limit, since the parent holds it) and only lose close-on-exec.
    auto setup_failed = [](const char* msg, std::size_t n) {
      (void)!write(STDERR_FILENO, msg, n);
      _exit(kChildSetupFailed);
    };
    if (dup2(devnull, STDIN_FILENO) < 0 || dup2(log, STDOUT_FILENO) < 0 || dup2(log, STDERR_FILENO) < 0) {
      static const char msg[] = "the child's standard streams could not be set up\n";
      setup_failed(msg, sizeof msg - 1);
    }
    if (hooks.pass_fd >= 0) {
      const int flags = fcntl(hooks.pass_fd, F_GETFD);
      if (flags < 0 || fcntl(hooks.pass_fd, F_SETFD, flags & ~FD_CLOEXEC) < 0) {
        static const char msg[] = "the shared buffers could not be passed to the child\n";
        setup_failed(msg, sizeof msg - 1);
      }
    }
    execv(args[0], args.data());
    const char msg[] = "exec failed\n";
    (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
    _exit(126);
  }
  setpgid(pid, pid);  // also from this side: no window where a kill(-pid) misses the child
  {
    std::lock_guard<std::mutex> lock(g_live_mutex);
    g_live.insert(pid);
  }
  // The child's own start time bounds what counts as its leftover (its descendants started
  // after it); read now, while it surely exists (it may not have exec'd yet: same start).
  pid_t ignored_ppid = 0;
  unsigned long long child_start = 0;
  if (!stat_of(pid, ignored_ppid, child_start)) child_start = 0;
  struct Cleanup {
    pid_t pid;
    unsigned long long start;
    ~Cleanup() {
      {
        std::lock_guard<std::mutex> lock(g_live_mutex);
        g_live.erase(pid);
      }
      kill_leftover_descendants(start);
    }
  } cleanup{pid, child_start};
  close(log);
  close(devnull);

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto pause = std::chrono::microseconds(200);
  int status = 0;
  bool reaped = false;
  while (!reaped) {
    const pid_t w = waitpid(pid, &status, WNOHANG | WUNTRACED);
    if (w == pid && WIFSTOPPED(status)) {
      if (hooks.on_stop) hooks.on_stop();
      kill(pid, SIGCONT);
      pause = std::chrono::microseconds(200);
      // A child that stops itself over and over must still meet its deadline.
      if (std::chrono::steady_clock::now() < deadline) continue;
    }
    if (w == pid && !WIFSTOPPED(status)) {
      reaped = true;
      break;
    }
    if (w < 0 && errno != EINTR) {
      o.error = fmt::format("waitpid failed: {}", std::strerror(errno));
      kill(-pid, SIGKILL);
      return o;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      o.kind = ChildOutcome::Kind::timed_out;
      o.timeout_s = timeout_s;
      o.stderr_tail = output_tail(log_file);
      return o;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
  // Anything the kernel left running in the group goes with it.
  kill(-pid, SIGKILL);
  if (WIFSIGNALED(status)) {
    o.kind = ChildOutcome::Kind::signaled;
    o.signal = WTERMSIG(status);
  } else {
    o.kind = ChildOutcome::Kind::exited;
    o.exit_code = WEXITSTATUS(status);
  }
  o.stderr_tail = output_tail(log_file);
  return o;
}

// ---- the fork server --------------------------------------------------------------------------

std::unique_ptr<ForkServer> ForkServer::start(std::vector<std::string> argv, double ready_timeout_s,
                                              const std::filesystem::path& log_file, std::string& why) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    why = fmt::format("socketpair failed: {}", std::strerror(errno));
    return nullptr;
  }
  argv.insert(argv.end(), {"--socket-fd", std::to_string(sv[1])});
  std::vector<char*> args;
  for (auto& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const int log = open(log_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  auto close_all = [&] {
    for (const int fd : {log, devnull, sv[0], sv[1]}) {
      if (fd >= 0) close(fd);
    }
  };
  if (log < 0 || devnull < 0) {
    why = fmt::format("cannot open its log {} or /dev/null: {}", log_file.string(), std::strerror(errno));
    close_all();
    return nullptr;
  }
  // Its copies must be re-parented here, and its leftovers found: subreaper before it exists.
  become_child_subreaper();
  const pid_t parent = getpid();
  std::unique_ptr<ForkServer> server(new ForkServer());
  {
    // Registered as live while it runs: no child's leftover scan may take it for one.
    std::lock_guard<std::mutex> lock(g_live_mutex);
    server->pid_ = fork();
    if (server->pid_ > 0) g_live.insert(server->pid_);
  }
  if (server->pid_ < 0) {
    why = fmt::format("fork failed: {}", std::strerror(errno));
    close_all();
    return nullptr;
  }
  if (server->pid_ == 0) {
    // As for any child: its own group (a Ctrl-C to the certifier's group is the certifier's to
    // handle), dies with the certifier, the socket the one descriptor it inherits.
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(125);
    const int flags = fcntl(sv[1], F_GETFD);
    if (dup2(devnull, STDIN_FILENO) < 0 || dup2(log, STDOUT_FILENO) < 0 || dup2(log, STDERR_FILENO) < 0 || flags < 0 ||
        fcntl(sv[1], F_SETFD, flags & ~FD_CLOEXEC) < 0) {
      _exit(kChildSetupFailed);
    }
    execv(args[0], args.data());
    _exit(126);
  }
  setpgid(server->pid_, server->pid_);
  close(sv[1]);
  close(log);
  close(devnull);
  server->sock_ = sv[0];
  // Its start-up (importing torch) happens now, once; it says when it is done.
  pollfd p{server->sock_, POLLIN, 0};
  const int ready = poll(&p, 1, static_cast<int>(std::min(ready_timeout_s, 3600.0) * 1000));
  char buf[4096];
  const ssize_t n = ready > 0 ? recv(server->sock_, buf, sizeof buf, 0) : -1;
  std::string said = n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string();
  try {
    const auto j = nlohmann::json::parse(said);
    if (j.value("ready", false)) return server;
    why = j.value("error", std::string("it answered without saying it is ready"));
  } catch (const std::exception&) {
    why = ready == 0 ? fmt::format("not ready after {:g} s", ready_timeout_s)
                     : fmt::format("it ended before it was ready{}", [&] {
                         const auto t = output_tail(log_file);
                         return t.empty() ? std::string() : ": " + t;
                       }());
  }
  server->stop();
  return nullptr;
}

pid_t ForkServer::spawn(const std::vector<std::string>& args, int log_fd, int pass_fd) {
  return spawn(args, log_fd, pass_fd >= 0 ? std::vector<int>{pass_fd} : std::vector<int>{});
}

pid_t ForkServer::spawn(const std::vector<std::string>& args, int log_fd, const std::vector<int>& pass_fds) {
  if (sock_ < 0) return -1;  // stopped before: stop_reason_ holds why
  if (pass_fds.size() > kMaxPassFds) {
    throw std::logic_error(fmt::format("ForkServer::spawn: {} descriptors to pass, at most {}", pass_fds.size(), kMaxPassFds));
  }
  const std::string request = nlohmann::json{{"argv", args}, {"pass_fds", pass_fds}}.dump();
  int fds[1 + kMaxPassFds] = {log_fd};
  std::copy(pass_fds.begin(), pass_fds.end(), fds + 1);
  const std::size_t nfds = 1 + pass_fds.size();
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof fds)] = {};
  iovec iov{const_cast<char*>(request.data()), request.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
  std::memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
  // The new child is live from the moment it exists: held so, no leftover scan (another thread's
  // case) can see it between its re-parenting and its registration.
  std::lock_guard<std::mutex> lock(g_live_mutex);
  auto fail = [&](std::string why) {
    stop_reason_ = std::move(why);
    stop_locked();
    return pid_t{-1};
  };
  if (sendmsg(sock_, &msg, MSG_NOSIGNAL) < 0) return fail(fmt::format("cannot ask it: {}", std::strerror(errno)));
  pollfd p{sock_, POLLIN, 0};
  // A fork of a process that has imported torch takes milliseconds; a server that takes longer
  // than this is broken, and children start the usual way from then on.
  if (poll(&p, 1, 30000) <= 0) return fail("it did not answer within 30 s");
  char buf[4096];
  const ssize_t n = recv(sock_, buf, sizeof buf, 0);
  if (n <= 0) return fail("it ended without answering");
  pid_t pid = -1;
  try {
    const auto j = nlohmann::json::parse(std::string(buf, static_cast<std::size_t>(n)));
    if (!j.contains("pid")) return fail(j.value("error", std::string("it answered without a pid")));
    pid = j.at("pid").get<pid_t>();
  } catch (const std::exception& e) {
    return fail(fmt::format("unreadable answer: {}", e.what()));
  }
  // Only a child of this process can be waited on, stopped and continued like a forked one.
  pid_t ppid = 0;
  unsigned long long start = 0;
  if (pid <= 0 || !stat_of(pid, ppid, start) || ppid != getpid()) {
    return fail(fmt::format("its child {} is not a child of this process", pid));
  }
  g_live.insert(pid);
  return pid;
}

void ForkServer::stop() {
  std::lock_guard<std::mutex> lock(g_live_mutex);
  stop_locked();
}

void ForkServer::stop_locked() {
  if (sock_ >= 0) close(sock_);
  sock_ = -1;
  if (pid_ > 0) {
    // Its socket closed, it exits by itself; a broken one is killed.
    int status = 0;
    for (int i = 0; i < 200 && waitpid(pid_, &status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (waitpid(pid_, &status, WNOHANG) == 0) {
      kill(-pid_, SIGKILL);
      kill(pid_, SIGKILL);
      while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
      }
    }
    g_live.erase(pid_);
  }
  pid_ = -1;
}

ForkServer::~ForkServer() { stop(); }

}  // namespace mla::certify
