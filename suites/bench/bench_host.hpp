// The host facts of mla-bench and of the tools beside it (mla-input-rates): taking their own
// --mla_* flags out of argv, handing the rest to Google Benchmark, and what they record about
// the machine (CPU model, MemAvailable, the CPU time the process and the others got).
// Header-only: the device side and the input-rate tool do not link the CPU ceilings.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <exception>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla::bench {

inline std::vector<std::string> split_csv(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

// One --mla_key[=value] flag; need()/num() throw mla::Error naming the flag.
struct MlaFlag {
  std::string key, val;
  bool has_value = false;
  void need() const {
    if (!has_value || val.empty()) throw Error(key + " needs a value (" + key + "=...)");
  }
  // The value as a number >= lo.
  double num(double lo) const {
    need();
    std::size_t pos = 0;
    double v = 0;
    try {
      v = std::stod(val, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos != val.size() || v < lo) throw Error(fmt::format("{}: bad value '{}'", key, val));
    return v;
  }
};

// Removes every --mla_* flag from argv (the rest is Google Benchmark's) and hands it to `take`,
// which returns false for a flag it does not know: that is an mla::Error.
// The certifier's kernel selectors as `mla certify` spells them, taken as the flag each stands
// for, so one command line names the same kernels to both: `--kernel NAME` (repeatable),
// `--plugin LIB.so`, `--python SPEC`, `--python-exe PATH`, with the value after '=' or next.
inline const char* certify_spelling(const std::string& key) {
  if (key == "--kernel") return "--mla_kernel";
  if (key == "--plugin") return "--mla_plugin";
  if (key == "--python") return "--mla_python";
  if (key == "--python-exe") return "--mla_python_exe";
  return nullptr;
}

inline void take_mla_flags(int& argc, char** argv, const std::function<bool(const MlaFlag&)>& take) {
  int w = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    if (const char* as = certify_spelling(a.substr(0, eq))) {
      if (eq == std::string::npos && i + 1 >= argc) throw Error(a + " needs a value");
      MlaFlag f{as, eq == std::string::npos ? std::string(argv[++i]) : a.substr(eq + 1), true};
      if (!take(f)) throw Error("unknown flag " + a);
      continue;
    }
    if (a.rfind("--mla_", 0) != 0) {
      argv[w++] = argv[i];
      continue;
    }
    MlaFlag f{a.substr(0, eq), eq == std::string::npos ? "" : a.substr(eq + 1), eq != std::string::npos};
    if (!take(f)) throw Error("unknown flag " + f.key);
  }
  argc = w;
  argv[argc] = nullptr;
}

inline bool has_flag(int argc, char** argv, const char* prefix) {
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix, std::strlen(prefix)) == 0) return true;
  return false;
}

// Google Benchmark on what take_mla_flags left in argv. --mla_quick (`quick`) supplies defaults
// the user did not set (ours go first, so an explicit flag later on the line wins either way).
// False when an argument is not Google Benchmark's either (it has been reported).
inline bool init_google_benchmark(int argc, char** argv, bool quick) {
  std::vector<char*> args(argv, argv + argc);
  std::string reps = "--benchmark_repetitions=5", min_time = "--benchmark_min_time=0.05";
  if (quick) {
    if (!has_flag(argc, argv, "--benchmark_repetitions")) args.insert(args.begin() + 1, reps.data());
    if (!has_flag(argc, argv, "--benchmark_min_time")) args.insert(args.begin() + 1, min_time.data());
  }
  int gargc = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&gargc, args.data());
  return !benchmark::ReportUnrecognizedArguments(gargc, args.data());
}

// CPU seconds this process has used, all threads.
inline double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// What the whole machine's CPUs were doing, as the kernel counts it, so a row can say whether
// other processes held the cores while it ran (a cpu_share below 1 on a machine others share is
// their time, not a serial section of ours). All in seconds since boot, summed over CPUs:
// busy = user + nice + system + irq + softirq of /proc/stat (guest time is inside user; the
// kernel samples these at its tick, so an interval shorter than a few ticks reads coarsely);
// steal = time the hypervisor ran something else on our virtual CPUs; waited = time in which at
// least one runnable task waited for a CPU (/proc/pressure/cpu "some", microseconds; psi false
// where the kernel has no pressure accounting).
struct MachineCpu {
  double busy = 0, steal = 0, waited = 0;
  bool ok = false, psi = false;
};

inline MachineCpu machine_cpu() {
  MachineCpu m;
  {
    std::ifstream f("/proc/stat");
    std::string cpu;
    double user = 0, nice = 0, sys = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    if (f >> cpu >> user >> nice >> sys >> idle >> iowait >> irq >> softirq >> steal && cpu == "cpu") {
      const double hz = static_cast<double>(sysconf(_SC_CLK_TCK));
      m.busy = (user + nice + sys + irq + softirq) / hz;
      m.steal = steal / hz;
      m.ok = hz > 0;
    }
  }
  std::ifstream p("/proc/pressure/cpu");
  std::string line;
  while (std::getline(p, line))
    if (line.rfind("some ", 0) == 0) {
      const auto at = line.find("total=");
      if (at == std::string::npos) break;
      m.waited = 1e-6 * std::strtod(line.c_str() + at + 6, nullptr);
      m.psi = true;
    }
  return m;
}

// Over an interval of `wall` seconds in which this process used `own_cpu` CPU seconds, what the
// rest of the machine did: CPUs' worth of other processes' work (0: the other cores were idle;
// 1: something else held a whole core), of the hypervisor's stealing, and the fraction of the
// time some task waited for a CPU. Tick sampling can read an interval of a few ticks as less
// than nothing or as more than the machine has: the figures are clamped to what is possible (0
// to the CPUs this process did not use; 0 to every CPU; 0 to 1 of the interval).
struct MachineLoad {
  double others_cpus = 0, steal_cpus = 0, cpu_wait = 0;
  bool ok = false, psi = false;
};

inline MachineLoad machine_load(const MachineCpu& a, const MachineCpu& b, double own_cpu, double wall) {
  MachineLoad l;
  if (!a.ok || !b.ok || wall <= 0) return l;
  l.ok = true;
  const double ncpu = static_cast<double>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  l.others_cpus = std::clamp(((b.busy - a.busy) - own_cpu) / wall, 0.0, std::max(0.0, ncpu - own_cpu / wall));
  l.steal_cpus = std::clamp((b.steal - a.steal) / wall, 0.0, ncpu);
  l.psi = a.psi && b.psi;
  // A fraction of the interval; the kernel adds to the PSI total in steps, so a short interval
  // on a loaded machine can read more waiting than its whole length (3.7 was seen under ctest -j2).
  if (l.psi) l.cpu_wait = std::clamp((b.waited - a.waited) / wall, 0.0, 1.0);
  return l;
}

// Bytes of MemAvailable (0 if unknown).
inline std::size_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  std::size_t v = 0;
  while (f >> key >> v >> unit)
    if (key == "MemAvailable:") return v * 1024;
  return 0;
}

// The CPU model name from /proc/cpuinfo ("unknown" if absent). The regression gate keys
// machines on it, so both benchmarks must spell it the same way.
inline std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) break;
      std::string v = line.substr(colon + 1);
      v.erase(0, v.find_first_not_of(" \t"));
      return v;
    }
  return "unknown";
}

}  // namespace mla::bench
