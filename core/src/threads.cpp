#include "mla/core/threads.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla {

namespace {

std::atomic<int> g_threads{0};  // set_threads' value; 0: not set

int env_or_hardware_threads() {
  if (const char* e = std::getenv("MLA_THREADS"); e != nullptr && *e != '\0') {
    errno = 0;
    char* end = nullptr;
    const long v = std::strtol(e, &end, 10);
    if (errno != 0 || end == e || *end != '\0' || v < 1 || v > 4096)
      throw Error(fmt::format("MLA_THREADS='{}': expected a thread count between 1 and 4096", e));
    return static_cast<int>(v);
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

}  // namespace

int threads() {
  const int t = g_threads.load(std::memory_order_relaxed);
  return t > 0 ? t : env_or_hardware_threads();
}

void set_threads(int n) {
  if (n < 0 || n > 4096) throw Error(fmt::format("set_threads({}): expected 0 (default) or 1..4096", n));
  g_threads.store(n, std::memory_order_relaxed);
}

void parallel_for(std::size_t n, std::size_t min_per_thread, const std::function<void(std::size_t, std::size_t)>& body,
                  int nthreads) {
  if (n == 0) return;
  const std::size_t want = static_cast<std::size_t>(nthreads > 0 ? nthreads : threads());
  const std::size_t pieces = std::clamp<std::size_t>(n / std::max<std::size_t>(min_per_thread, 1), 1, want);
  if (pieces == 1) {
    body(0, n);
    return;
  }
  // Piece boundaries on multiples of 64 items: whole cache lines per thread for every element
  // type the fills write, so no two threads share a line.
  auto bound = [&](std::size_t p) { return p == pieces ? n : std::min(n, (n / pieces * p) & ~std::size_t{63}); };
  std::exception_ptr error;
  std::mutex m;
  auto run = [&](std::size_t p) {
    try {
      if (bound(p) < bound(p + 1)) body(bound(p), bound(p + 1));
    } catch (...) {
      std::lock_guard<std::mutex> lock(m);
      if (!error) error = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(pieces - 1);
  for (std::size_t p = 1; p < pieces; ++p) pool.emplace_back(run, p);
  run(0);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

int task_workers(std::size_t n, int workers) {
  const std::size_t want = static_cast<std::size_t>(workers > 0 ? workers : threads());
  return static_cast<int>(std::clamp<std::size_t>(std::min(n, want), 1, 4096));
}

void parallel_tasks(std::size_t n, int workers, const std::function<void(std::size_t, int)>& task) {
  if (n == 0) return;
  const int w = task_workers(n, workers);
  if (w == 1) {
    for (std::size_t i = 0; i < n; ++i) task(i, 0);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::atomic<std::size_t> stop{n};  // tasks at or above the lowest failed index are not started
  std::exception_ptr error;
  std::mutex m;
  auto run = [&](int worker) {
    for (;;) {
      const std::size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= stop.load(std::memory_order_acquire)) return;
      try {
        task(i, worker);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (i < stop.load(std::memory_order_relaxed)) {
          error = std::current_exception();
          stop.store(i, std::memory_order_release);
        }
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(static_cast<std::size_t>(w - 1));
  for (int t = 1; t < w; ++t) pool.emplace_back(run, t);
  run(0);
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace mla
