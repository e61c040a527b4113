// Private to mla_certify: one certifier at a time per report folder. Two runs writing into one
// --out each reported a certificate, and only the second one's results survived. The lock is
// an flock(2) on <out>/.mla-certify.lock, so the kernel releases it when its holder dies, however
// it dies: a lock left by a dead process is simply taken over (and said so, by its pid).
#pragma once

#include <filesystem>
#include <iosfwd>

namespace mla::certify {

class ReportLock {
 public:
  // Throws UsageError naming the folder and the pid of the certifier that holds it.
  ReportLock(const std::filesystem::path& dir, std::ostream& progress);
  ~ReportLock();
  ReportLock(const ReportLock&) = delete;
  ReportLock& operator=(const ReportLock&) = delete;

  static constexpr const char* kFileName = ".mla-certify.lock";

 private:
  int fd_ = -1;
};

}  // namespace mla::certify
