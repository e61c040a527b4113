// How many threads the host code uses, and the two ways it splits work over them.
//
// One setting for the whole process: the generator's fills, the input builders, the fp64 oracle
// and the host kernels all read threads(), so `MLA_THREADS=1` (or mla-bench --mla_threads=1)
// makes every one of them single-threaded at once, and a benchmark's ceilings are measured with
// the thread count its kernels use.
//
// Results never depend on the count: callers split work into pieces whose boundaries are fixed
// by the problem (parallel_tasks), or whose items are independent (parallel_for), so a run on one
// thread and a run on sixteen produce the same bits.
#pragma once

#include <cstddef>
#include <functional>

namespace mla {

// The last set_threads(n) (n >= 1), else MLA_THREADS from the environment (a positive integer;
// anything else is an mla::Error naming it), else every hardware thread.
int threads();
// 1..4096; 0 returns to the environment's value or the default. Other values: mla::Error.
void set_threads(int n);

// Runs body(begin, end) over [0, n) cut into at most `threads` (0: threads()) contiguous pieces
// of at least `min_per_thread` items, the calling thread taking the first piece; rethrows the
// first exception a piece threw. For items that are independent (a fill, per-token work).
void parallel_for(std::size_t n, std::size_t min_per_thread,
                  const std::function<void(std::size_t, std::size_t)>& body, int threads = 0);

// Runs task(i, worker) once for every i in [0, n) on at most `workers` threads (0: threads();
// never more than n), the calling thread being worker 0; tasks are handed out in index order to
// whichever worker is free, and `worker` (< the count returned by task_workers) indexes
// per-worker scratch space. When tasks throw, every task below the lowest-indexed one that threw
// still runs and that lowest one's exception is rethrown, so the error a caller sees does not
// depend on the thread count or the timing either.
void parallel_tasks(std::size_t n, int workers, const std::function<void(std::size_t task, int worker)>& task);
// The number of workers parallel_tasks(n, workers, ...) starts: min(n, workers or threads()), >= 1.
int task_workers(std::size_t n, int workers);

}  // namespace mla
