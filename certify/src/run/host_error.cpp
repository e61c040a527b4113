#include "mla/certify/host_error.hpp"

#include <signal.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <system_error>

#include <fmt/format.h>

#include "mla/certify/certify.hpp"
#include "mla/reports/certificate.hpp"

namespace mla::certify {

// A child whose setup failed before exec says so with the same status (isolation.hpp).
static_assert(kChildSetupFailed == kChildHostFailure);

bool is_host_errno(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
    case EMFILE:
    case ENFILE:
    case ENOMEM:
    case EAGAIN:
    case EIO:
      return true;
    default:
      return false;
  }
}

std::optional<std::string> host_cause(const ChildOutcome& o) {
  switch (o.kind) {
    case ChildOutcome::Kind::spawn_failed:
      return fmt::format("the certifier could not run a child process ({})", o.error);
    case ChildOutcome::Kind::signaled:
      if (o.signal == SIGXFSZ) {
        return fmt::format("the child was killed by {}: a file grew past the file-size limit this run was given "
                           "(ulimit -f)",
                           signal_description(o.signal));
      }
      return std::nullopt;
    case ChildOutcome::Kind::exited:
      if (o.exit_code == kChildHostFailure) {
        return fmt::format("the child could not finish its own work for a reason of the machine{}",
                           o.stderr_tail.empty() ? "" : ": " + o.stderr_tail);
      }
      return std::nullopt;
    case ChildOutcome::Kind::timed_out: return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::string> host_cause(const std::exception& e) {
  if (dynamic_cast<const HostFailure*>(&e)) return std::string(e.what());
  if (dynamic_cast<const std::bad_alloc*>(&e)) return std::string("the certifier ran out of memory");
  if (const auto* w = dynamic_cast<const reports::WriteError*>(&e); w && is_host_errno(w->err())) {
    return std::string(e.what());
  }
  if (const auto* s = dynamic_cast<const std::system_error*>(&e); s && is_host_errno(s->code().value())) {
    return std::string(e.what());
  }
  return std::nullopt;
}

tol::Verdict failure_verdict(const std::exception& e) {
  return host_cause(e) ? tol::Verdict::host_error : tol::Verdict::error;
}

}  // namespace mla::certify
