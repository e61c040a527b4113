// The rehearsal's stand-in for a CUDA context's start-up (child.hpp, charge_simulated_context).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "mla/certify/child.hpp"
#include "mla/core/error.hpp"
#include "mla/core/text.hpp"

namespace mla::certify {

std::optional<double> simulated_context_seconds() {
  const char* env = std::getenv(kSimulatedContextEnv);
  if (env == nullptr || *env == '\0') return std::nullopt;
  const std::string text = env;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(text.c_str(), &end);
  // A budget check must not pass because of a typo: anything but a plain number in range is
  // refused, naming the variable and what it held.
  if (errno != 0 || end == text.c_str() || *end != '\0' || !std::isfinite(v) || v < 0 || v > kSimulatedContextMax) {
    throw Error(fmt::format("{}='{}' is not a number of seconds between 0 and {}", kSimulatedContextEnv,
                            printable(text.substr(0, 40)), kSimulatedContextMax));
  }
  return v;
}

void charge_simulated_context(const char* what) {
  // Once per process: a CUDA context is created once, by the process's first kernel.
  static bool charged = false;
  if (charged) return;
  const auto seconds = simulated_context_seconds();
  if (!seconds) return;
  charged = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(*seconds));
  // One line per charged process, so the rehearsal can say how many contexts each step paid for.
  if (const char* log = std::getenv(kSimulatedContextLogEnv); log && *log) {
    const int fd = ::open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) {
      throw Error(fmt::format("{}: cannot open {}: {}", kSimulatedContextLogEnv, log, std::strerror(errno)));
    }
    const auto line = fmt::format("{} {} {}\n", ::getpid(), what, *seconds);
    const auto n = ::write(fd, line.data(), line.size());  // O_APPEND: one write per line, never interleaved
    ::close(fd);
    if (n != static_cast<ssize_t>(line.size())) {
      throw Error(fmt::format("{}: cannot write to {}", kSimulatedContextLogEnv, log));
    }
  }
}

}  // namespace mla::certify
