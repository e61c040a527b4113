// Stopping a run on SIGINT, SIGTERM or SIGHUP: the handler only records the signal; every phase
// of the run (golden read-through, plug-in description, planning, catalog cases, fresh cases,
// appends) looks at it between two steps, so a stop takes effect within one case and what was
// recorded is kept, marked INCOMPLETE.
#include <signal.h>

#include <algorithm>
#include <csignal>

#include <fmt/format.h>

#include "run/session.hpp"

namespace mla::certify {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
void on_stop(int sig) { g_stop_signal = sig; }
// SIGXFSZ must not kill the certifier: past the file-size limit a write fails (EFBIG) and the
// case becomes a HOST_ERROR. A handler (not SIG_IGN) so that children, after exec, get the
// default action back and die of it, which host_cause() recognizes.
void on_file_size_limit(int) {}

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

}  // namespace

void install_stop_handlers() {
  // SA_RESETHAND: a second signal ends the process the default way (a user who insists).
  struct sigaction stop {};
  stop.sa_handler = on_stop;
  stop.sa_flags = SA_RESETHAND;
  sigemptyset(&stop.sa_mask);
  for (const int sig : kStopSignals) sigaction(sig, &stop, nullptr);
  struct sigaction fsz {};
  fsz.sa_handler = on_file_size_limit;
  sigemptyset(&fsz.sa_mask);
  sigaction(SIGXFSZ, &fsz, nullptr);
}

int stop_signal() { return g_stop_signal; }

StopHandlers::StopHandlers() {
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) sigaction(kStopSignals[i], nullptr, &old_[i]);
  sigaction(SIGXFSZ, nullptr, &old_fsz_);
  // A signal that arrived before (`mla certify` installs the handlers as its first step) stays
  // recorded: the run stops at its first look.
  install_stop_handlers();
}

StopHandlers::~StopHandlers() {
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) sigaction(kStopSignals[i], &old_[i], nullptr);
  sigaction(SIGXFSZ, &old_fsz_, nullptr);
  g_stop_signal = 0;  // consumed by the run that saw it
}

bool stop_requested(Session& s) {
  const int sig = g_stop_signal;
  if (sig == 0) return false;
  const auto note = fmt::format("stopped by {} before every selected case was run", signal_description(sig));
  if (std::find(s.cert.notes.begin(), s.cert.notes.end(), note) == s.cert.notes.end()) {
    s.cert.notes.push_back(note);
    s.progress << "mla certify: " << note << "; the certificate is INCOMPLETE (--resume finishes it)\n";
  }
  return true;
}

void stop_point(Session& s) {
  if (stop_requested(s)) throw Stopped();
}

}  // namespace mla::certify
