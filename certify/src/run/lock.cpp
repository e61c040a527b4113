#include "run/lock.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ostream>
#include <string>

#include <fmt/format.h>

#include "mla/certify/certify.hpp"

namespace mla::certify {
namespace {

// What the lock file says about its last holder: "pid N", or empty.
std::string read_all(int fd) {
  std::string text;
  char buf[256];
  ssize_t n;
  if (::lseek(fd, 0, SEEK_SET) < 0) return text;
  while ((n = ::read(fd, buf, sizeof buf)) > 0 && text.size() < 4096) text.append(buf, static_cast<std::size_t>(n));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  return text;
}

}  // namespace

ReportLock::ReportLock(const std::filesystem::path& dir, std::ostream& progress) {
  const auto path = dir / kFileName;
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw UsageError(fmt::format("report folder {}: cannot create its lock file {}: {}", dir.string(), path.string(),
                                 std::strerror(errno)));
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = read_all(fd_);
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK) {
      throw UsageError(fmt::format("report folder {} is in use by another mla certify ({}); wait for it to finish, "
                                   "or write to another --out",
                                   dir.string(), holder.empty() ? "its pid not yet written" : holder));
    }
    throw UsageError(fmt::format("report folder {}: cannot lock {}: {}", dir.string(), path.string(), std::strerror(err)));
  }
  // Held: whoever wrote the file before is gone (the kernel released its lock when it died).
  const std::string before = read_all(fd_);
  if (!before.empty()) {
    progress << fmt::format("mla certify: taking over the lock of {} in {}, which is no longer running\n", before,
                            dir.string());
  }
  const std::string mine = fmt::format("pid {}\n", ::getpid());
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, mine.data(), mine.size(), 0) != static_cast<ssize_t>(mine.size())) {
    progress << fmt::format("warning: could not write the pid into {}: {}\n", path.string(), std::strerror(errno));
  }
}

ReportLock::~ReportLock() {
  if (fd_ < 0) return;
  // Emptied, not removed: removing it would let a waiting second run lock a file no third run
  // can see. An empty file says that nobody holds it.
  if (::ftruncate(fd_, 0) != 0) {
  }
  ::close(fd_);
}

}  // namespace mla::certify
