// Child processes with a deadline: the certifier runs every kernel call in one, so a crash (a
// signal), a hang (the deadline) or a sticky CUDA error (the process ends with it) costs one
// verdict, not the run. What they exchange is the wire format of wire.hpp, in files of a
// private work folder.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mla::certify {

struct ChildOutcome {
  enum class Kind { exited, signaled, timed_out, spawn_failed };
  Kind kind = Kind::spawn_failed;
  int exit_code = 0;    // exited
  int signal = 0;       // signaled
  double timeout_s = 0; // timed_out: the deadline it ran past
  std::string error;    // spawn_failed: why
  std::string stderr_tail;  // the last lines the child wrote to stderr/stdout (trimmed)

  bool ok() const { return kind == Kind::exited && exit_code == 0; }
  // "crashed: killed by signal SIGSEGV (Segmentation fault)", "timed out after 2 s (killed)",
  // "exited with status 3" — without timings, so a rerun words it identically.
  std::string describe() const;
};

// fork + execv(argv[0], argv) in a new process group that dies with this process
// (PR_SET_PDEATHSIG), stdin from /dev/null, stdout and stderr into `log_file`. Waits at most
// `timeout_s` seconds, then kills the whole group. Never throws.
// What a child gets besides its argv: a descriptor it inherits under the same number (the
// shared buffers; never a fixed number, which a descriptor limit could put out of reach: the
// number travels in the child's own instructions), and what to do each time it stops itself
// (SIGSTOP): the parent looks at its buffers while nothing runs in the child, then the child is
// continued.
class ForkServer;
struct ChildHooks {
  int pass_fd = -1;
  std::function<void()> on_stop;
  // When set (and still serving), the child is forked by this server with `server_args`
  // instead of fork + exec of argv; everything else (the deadline, the stops, the group kill,
  // the leftovers) is the same. A server that has stopped serving falls back to argv.
  ForkServer* server = nullptr;
  std::vector<std::string> server_args;
};

// A process that has already paid a child's start-up (the Python door's: importing torch, ~1-2 s
// per process on a small machine) and forks a copy of itself for each child instead. It never
// runs a kernel's code itself, so every child still starts from the same clean state, in its
// own process. The copy is made by a short-lived intermediate process that exits at once, so
// the copy is re-parented to this process (a child subreaper): run_child waits on it, sees its
// stops and kills its group exactly as for a child it forked itself.
//
// Protocol, one SOCK_SEQPACKET message each way: this process sends {"argv": [...],
// "pass_fds": [N...]} with the child's log and then the passed descriptors as SCM_RIGHTS; the
// server answers {"pid": P} or {"error": "..."}. At start it says {"ready": true} (or
// {"error": ...}) once its start-up is done.
class ForkServer {
 public:
  // Starts `argv` with the server's end of the socket as descriptor `--socket-fd N` (appended),
  // its output to `log_file`; waits up to `ready_timeout_s` for its ready message. nullptr and
  // `why` when it could not start or said it cannot serve.
  static std::unique_ptr<ForkServer> start(std::vector<std::string> argv, double ready_timeout_s,
                                           const std::filesystem::path& log_file, std::string& why);
  ~ForkServer();
  ForkServer(const ForkServer&) = delete;
  ForkServer& operator=(const ForkServer&) = delete;

  bool serving() const { return sock_ >= 0; }
  // A new child running `args`, stdout and stderr on `log_fd`, `pass_fd` under its own number;
  // its pid, a child of this process in its own process group. -1 when the server has stopped
  // or failed now (it is then stopped, stop_reason says why: later children fall back to exec).
  pid_t spawn(const std::vector<std::string>& args, int log_fd, int pass_fd);
  // The same with several descriptors passed, each under its own number (a benchmark's
  // long-lived child keeps its shared buffers and its socket).
  static constexpr std::size_t kMaxPassFds = 4;
  pid_t spawn(const std::vector<std::string>& args, int log_fd, const std::vector<int>& pass_fds);
  pid_t pid() const { return pid_; }
  // Why it stopped serving (the error of the request that failed); empty while it serves.
  const std::string& stop_reason() const { return stop_reason_; }

 private:
  ForkServer() = default;
  void stop();
  void stop_locked();
  pid_t pid_ = -1;
  int sock_ = -1;
  std::string stop_reason_;
};
// The exit status of a child whose setup between fork and exec failed (its standard streams, the
// inherited buffers): the host's failure, the same status as kChildHostFailure (host_error.hpp).
inline constexpr int kChildSetupFailed = 75;

ChildOutcome run_child(const std::vector<std::string>& argv, double timeout_s, const std::filesystem::path& log_file,
                       const ChildHooks& hooks = {});

// The last lines a child wrote to `file` (its log), bounded, as ChildOutcome::stderr_tail holds them.
std::string output_tail(const std::filesystem::path& file);

// A child this process started and waits on itself, outside run_child (a benchmark's long-lived
// kernel process): while it is marked live, kill_leftover_descendants never takes it for the
// leftover of a case run meanwhile.
void set_live_child(pid_t pid, bool live);

// "SIGSEGV (Segmentation fault)".
std::string signal_description(int sig);

// Makes this process a child subreaper (prctl PR_SET_CHILD_SUBREAPER), once; run_child does it
// before its first fork. False when the kernel refused (the group kill still applies).
bool become_child_subreaper();
// Kills (SIGKILL) and reaps every process re-parented to this one that started at or after
// `started_after` (clock ticks since boot, /proc/PID/stat field 22) and is not a child run_child
// is waiting on, repeating until none is left; returns how many. run_child calls it after every
// child, so nothing a case started (a setsid double-forked daemon included) outlives it.
int kill_leftover_descendants(unsigned long long started_after);
// The path of the running executable (/proc/self/exe), for re-executing it as a child.
std::filesystem::path self_executable();

// A private folder for the files exchanged with children, named after this process: one left
// behind by a certifier that was killed (its pid gone) is removed by the next.
class WorkDir {
 public:
  WorkDir();  // throws reports::WriteError (with errno) when no folder can be created
  ~WorkDir();
  WorkDir(const WorkDir&) = delete;
  WorkDir& operator=(const WorkDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace mla::certify
