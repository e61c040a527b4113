// The host side of the plug-in C ABI (mla/plugin/mla_plugin.h): loading a shared library,
// validating its descriptor, and calling its decode entry point under guard.
//
// Every call goes through audited buffers: inputs are private copies checksummed (sha256)
// before and after each call, outputs are fresh, NaN-filled, and surrounded by canary bytes and
// inaccessible pages, so a plug-in that writes its inputs, leaves an output element unwritten
// or writes outside its output is caught and named. These checks find the bug; the separate
// process the certifier runs the plug-in in (suites/certify) contains the damage.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/kernels/attention.hpp"
#include "mla/plugin/mla_plugin.h"

namespace mla::plugin {

// A library that cannot be loaded, lacks the entry symbol, or returns an invalid descriptor.
class PluginError : public Error {
 public:
  using Error::Error;
};

// Capabilities in the C ABI's form <-> the kernel interface's.
Capabilities capabilities_from(const mla_plugin_capabilities& c);
// Throws PluginError naming the first invalid field.
void validate_descriptor(const mla_plugin_descriptor& d);

class Library {
 public:
  // dlopen (RTLD_NOW | RTLD_LOCAL) and validation. Running this executes the library's
  // initializers: call it only in a process that may crash.
  static std::shared_ptr<Library> open(const std::filesystem::path& path);
  ~Library();
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const mla_plugin_descriptor& descriptor() const { return *desc_; }
  const KernelInfo& info() const { return info_; }
  const std::string& version() const { return version_; }
  // The plug-in's own unavailable() answer (nullopt when it has none or it returns NULL).
  std::optional<std::string> unavailable() const;

 private:
  Library() = default;
  std::filesystem::path path_;
  void* handle_ = nullptr;
  const mla_plugin_descriptor* desc_ = nullptr;
  KernelInfo info_;
  std::string version_;
};

// Calls that the host audited and found at fault, for the certifier to report as FAIL reasons.
class AuditedCall {
 public:
  virtual ~AuditedCall() = default;
  // Each distinct violation once: "wrote 2048 bytes past out", "input q changed by call 1 ...".
  virtual const std::vector<std::string>& violations() const = 0;
};

// A plug-in as an AttentionImpl. `enforce_caps` false lets the certifier run a shape the
// plug-in does not claim, to note (for information) whether it would have handled it.
std::unique_ptr<AttentionImpl> make_plugin_kernel(std::shared_ptr<Library> library, bool enforce_caps = true);

// An output buffer with canaries: [inaccessible page | canary | data | canary | inaccessible page].
// A write a little past the data changes canary bytes (found by check()); one far past it hits
// an inaccessible page and faults at once instead of corrupting the process.
class GuardedBuffer {
 public:
  static constexpr std::size_t kCanaryBytes = 64 * 1024;
  explicit GuardedBuffer(std::size_t bytes);
  ~GuardedBuffer();
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }

  // How far outside the data a write reached: the number of bytes from the data's edge to the
  // farthest changed canary byte, on each side (0: untouched).
  struct Overrun {
    std::size_t before = 0, after = 0;
  };
  Overrun check() const;

 private:
  uint8_t* base_ = nullptr;  // the mapping
  std::size_t mapped_ = 0;
  uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
  uint8_t* front_ = nullptr;  // first canary byte
  std::size_t front_len_ = 0;
  uint8_t* back_ = nullptr;  // first byte after the data
  std::size_t back_len_ = 0;
};

// The canary byte at offset `i` of a canary region: varied, so that no single written value
// (0, a NaN pattern, 0xFF) can match a run of it by accident.
uint8_t canary_byte(std::size_t i);

}  // namespace mla::plugin
