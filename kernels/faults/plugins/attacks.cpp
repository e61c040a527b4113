// The attacks of the plug-in template's variants (attacks.hpp says what each does and why it is
// here rather than in the kernel core).
#include "attacks.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <string>
#include <utility>

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

namespace mla_variant {

void tamper() {
  const char* spec = std::getenv("MLA_EXAMPLE_TAMPER");
  if (!spec) return;
  std::string s(spec);
  std::size_t pos = 0;
  while (pos <= s.size()) {
    const std::size_t end = std::min(s.find(';', pos), s.size());
    const std::string item = s.substr(pos, end - pos);
    pos = end + 1;
    const std::size_t colon = item.find(':');
    if (colon == std::string::npos) continue;
    const std::string op = item.substr(0, colon), path = item.substr(colon + 1);
    if (op == "delete") {
      unlink(path.c_str());
    } else if (op == "change") {
      const int fd = open(path.c_str(), O_WRONLY);
      if (fd < 0) continue;
      const off_t size = lseek(fd, 0, SEEK_END);
      if (size > 16 && pwrite(fd, "TAMPERED", 8, size / 2) != 8) std::perror("tamper");
      close(fd);
    }
  }
}

void leave_daemon() {
  static bool done = false;
  if (done) return;
  done = true;
  const pid_t first = fork();
  if (first != 0) {
    if (first > 0) {
      while (waitpid(first, nullptr, 0) < 0 && errno == EINTR) {}
    }
    return;
  }
  setsid();
  if (fork() != 0) _exit(0);
  if (const char* f = std::getenv("MLA_EXAMPLE_PIDFILE")) {
    const std::string me = std::to_string(getpid()) + "\n";
    const int fd = open(f, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) {
      if (write(fd, me.data(), me.size()) < 0) std::perror("pidfile");
      close(fd);
    }
  }
  for (int i = 0; i < 600; ++i) {
    const timespec ts{1, 0};
    nanosleep(&ts, nullptr);
  }
  _exit(0);
}

void scrub_audit() {
  char cmd[8192];
  const int fd = open("/proc/self/cmdline", O_RDONLY);
  if (fd >= 0) {
    const ssize_t n = read(fd, cmd, sizeof cmd - 1);
    close(fd);
    for (ssize_t i = 0; i < n; i += static_cast<ssize_t>(std::strlen(cmd + i)) + 1) {
      if (cmd[i] == '/' && access(cmd + i, W_OK) == 0 && std::strstr(cmd + i, ".so") == nullptr) {
        if (truncate(cmd + i, 0) != 0) std::perror("scrub");
      }
    }
  }
  FILE* maps = std::fopen("/proc/self/maps", "r");
  if (!maps) return;
  char line[512];
  while (std::fgets(line, sizeof line, maps)) {
    unsigned long lo = 0, hi = 0;
    char perms[8] = {};
    if (std::sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && perms[3] == 's' && perms[1] == 'w' &&
        std::strstr(line, "memfd:")) {
      std::memset(reinterpret_cast<void*>(lo), 0, 4096);
    }
  }
  std::fclose(maps);
}

bool seen_by_another_process(const mla_plugin_decode_args& a, std::size_t token_bytes) {
  uint64_t h = 1469598103934665603ull;
  for (int i = 0; i < 64; ++i) h = (h ^ a.q[i]) * 1099511628211ull;
  const int64_t kv_bytes = std::min<int64_t>(int64_t{a.num_blocks} * a.page_size * static_cast<int64_t>(token_bytes), 1 << 16);
  for (int64_t i = 0; i < kv_bytes; ++i) h = (h ^ a.kv_cache[i]) * 1099511628211ull;
  for (int64_t b = 0; b < a.batch; ++b) h = (h ^ static_cast<uint32_t>(a.cache_seqlens[b])) * 1099511628211ull;
  const char* dir = std::getenv("TMPDIR");
  const std::string path = std::string(dir && *dir ? dir : "/tmp") + "/mla-example-state-" + std::to_string(h);
  const std::string me = std::to_string(getpid());
  const int fd = open(path.c_str(), O_RDWR | O_CREAT, 0600);
  if (fd < 0) return false;
  char buf[32] = {};
  const ssize_t n = read(fd, buf, sizeof buf - 1);
  bool other = false;
  if (n <= 0) {
    if (write(fd, me.data(), me.size()) < 0) std::perror("state");
  } else {
    other = me != std::string(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  return other;
}

namespace {

std::map<std::string, std::pair<std::vector<uint8_t>, std::vector<uint8_t>>>& memo() {
  static std::map<std::string, std::pair<std::vector<uint8_t>, std::vector<uint8_t>>> m;
  return m;
}

std::string memo_key(const mla_plugin_decode_args& a) {
  std::string k = std::to_string(a.batch) + "/" + std::to_string(a.s_q) + "/" + std::to_string(a.heads) + "/" +
                  std::to_string(a.topk) + "/" + std::to_string(a.page_size) + "/" + std::to_string(a.cache_format);
  for (int32_t b = 0; b < a.batch; ++b) {
    k += ',';
    k += std::to_string(a.cache_seqlens[b]);
  }
  k.append(reinterpret_cast<const char*>(a.block_table), static_cast<std::size_t>(a.batch) * a.max_blocks * 4);
  if (a.topk > 0) k.append(reinterpret_cast<const char*>(a.indices), static_cast<std::size_t>(a.batch) * a.s_q * a.topk * 4);
  return k;
}

}  // namespace

bool memo_recall(const mla_plugin_decode_args& a) {
  const auto it = memo().find(memo_key(a));
  if (it == memo().end()) return false;
  std::memcpy(a.out, it->second.first.data(), it->second.first.size());
  std::memcpy(a.lse, it->second.second.data(), it->second.second.size());
  return true;
}

void memo_store(const mla_plugin_decode_args& a, std::size_t out_bytes, std::size_t lse_bytes) {
  auto& e = memo()[memo_key(a)];
  e.first.assign(static_cast<const uint8_t*>(a.out), static_cast<const uint8_t*>(a.out) + out_bytes);
  e.second.assign(reinterpret_cast<const uint8_t*>(a.lse), reinterpret_cast<const uint8_t*>(a.lse) + lse_bytes);
}

}  // namespace mla_variant
