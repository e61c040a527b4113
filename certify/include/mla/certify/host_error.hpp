// HOST_ERROR, a failure the machine caused rather than the
// implementation (a file-size limit, a full disk, no file descriptors left, a fork or memory
// failure of the certifier itself). Such a case is never blamed on the implementation, never
// a PASS, and run again by --resume.
//
// The one classification, used wherever an outcome is read: the result of a child process
// (host_cause(ChildOutcome)), and an exception of the certifier's own work around a case
// (failure_verdict(exception): writing a case for a child, loading it, judging it).
#pragma once

#include <exception>
#include <optional>
#include <string>

#include "mla/certify/isolation.hpp"
#include "mla/core/tolerance.hpp"

namespace mla::certify {

// The exit status of `mla __child ...` when the child's own work failed for the host's reason
// (it could not write its result: disk full, file-size limit). EX_TEMPFAIL of sysexits.h:
// "a temporary failure, try again". A kernel that exits with it itself only makes its case a
// HOST_ERROR, which never passes.
inline constexpr int kChildHostFailure = 75;

// Whether errno `err` says the machine ran out of something or refused a size: ENOSPC, EDQUOT,
// EFBIG, EMFILE, ENFILE, ENOMEM, EAGAIN (fork), EIO.
bool is_host_errno(int err);

// Why a child's outcome is the host's failure, or nullopt when it is the implementation's: a
// child that could not be started (fork, the log file), one killed by SIGXFSZ (the file-size
// limit this run was given), one that exited with kChildHostFailure.
std::optional<std::string> host_cause(const ChildOutcome& o);

// Why an exception of the certifier's own work is the host's failure, or nullopt: memory
// (std::bad_alloc), a file it could not write or open for a host errno, a HostFailure.
std::optional<std::string> host_cause(const std::exception& e);

// HOST_ERROR when host_cause(e), else ERROR.
tol::Verdict failure_verdict(const std::exception& e);

}  // namespace mla::certify
