#include "isolation/arena.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include <fmt/format.h>

#include "mla/core/conventions.hpp"
#include "mla/core/generator.hpp"

#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"

namespace mla::certify {
namespace {

using nlohmann::json;

// The generator's own mixer (one definition of splitmix64 in the suite).
uint64_t mix(uint64_t z) { return gen::mix64(z + 0x9E3779B97F4A7C15ull); }

constexpr std::size_t kMinCanary = 4096;

std::size_t round_up(std::size_t n, std::size_t page) { return (n + page - 1) / page * page; }

template <class T>
std::span<const uint8_t> bytes_of(std::span<const T> v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()};
}

}  // namespace

uint64_t arena_unwritten_bits(uint64_t key, int value_bytes) {
  const uint64_t r = mix(key ^ 0x5157A11ull);
  switch (value_bytes) {
    case 2: return 0x7FC0u | (r & 0x3Fu) | 1u;                         // bf16 quiet NaN
    case 4: return 0x7FC00000u | (r & 0x3FFFFFu) | 1u;                 // f32 quiet NaN
    default: return 0x7FF8000000000000ull | (r & 0x7FFFFFFFFFFFFull) | 1u;  // f64 quiet NaN
  }
}

std::vector<int64_t> int32_values(std::span<const uint8_t> b) {
  std::vector<int64_t> v(b.size() / 4);
  for (std::size_t i = 0; i < v.size(); ++i) {
    int32_t x;
    std::memcpy(&x, b.data() + 4 * i, 4);
    v[i] = x;
  }
  return v;
}

std::vector<double> widen_values(std::span<const uint8_t> b, int value_bytes) {
  std::vector<double> v(b.size() / static_cast<std::size_t>(value_bytes));
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (value_bytes == 2) {
      uint16_t x;
      std::memcpy(&x, b.data() + 2 * i, 2);
      v[i] = static_cast<double>(bf16_to_float(x));
    } else if (value_bytes == 4) {
      float x;
      std::memcpy(&x, b.data() + 4 * i, 4);
      v[i] = static_cast<double>(x);
    } else {
      std::memcpy(&v[i], b.data() + 8 * i, 8);
    }
  }
  return v;
}

AttnOutputs canonical_outputs(const KernelInfo& k, const AttnShape& canonical_shape, std::span<const uint8_t> out,
                              std::span<const uint8_t> lse) {
  AttnOutputs o;
  o.dtype = k.out_dtype;
  o.out = widen_values(out, static_cast<int>(out_bytes_per_value(k.out_dtype)));
  o.lse = widen_values(lse, static_cast<int>(sizeof(float)));
  outputs_to_canonical(k.conventions, canonical_shape, o);  // kernel -> canonical
  return o;
}

json arena_control_layout() {
  return {{"child_base", offsetof(ArenaControl, child_base)},
          {"fault_addr", offsetof(ArenaControl, fault_addr)},
          {"fault_signal", offsetof(ArenaControl, fault_signal)},
          {"setup_state", offsetof(ArenaControl, setup_state)},
          {"setup_message", offsetof(ArenaControl, setup_message)},
          {"calls", offsetof(ArenaControl, calls)},
          {"call_size", sizeof(ArenaCall)},
          {"call",
           {{"state", offsetof(ArenaCall, state)},
            {"rc", offsetof(ArenaCall, rc)},
            {"seconds", offsetof(ArenaCall, seconds)},
            {"message", offsetof(ArenaCall, message)}}},
          {"message_bytes", kArenaMessage},
          {"max_calls", kArenaMaxCalls}};
}

json ArenaLayout::to_json() const {
  json j;
  j["page"] = page;
  j["size"] = size;
  j["value_bytes"] = value_bytes;
  // Present even when empty (an append's layout has no attention inputs or calls).
  j["regions"] = json::array();
  j["inputs"] = json::array();
  j["calls"] = json::array();
  for (const auto& r : regions) {
    j["regions"].push_back({{"name", r.name}, {"input", r.input}, {"start", r.start}, {"data", r.data},
                            {"bytes", r.bytes}, {"body", r.body}, {"end", r.end}});
  }
  for (const auto& in : inputs) {
    j["inputs"].push_back({{"shape", mla::to_json(in.shape)},
                           {"softmax_scale", in.softmax_scale},
                           {"regions", {in.q, in.kv_cache, in.block_table, in.cache_seqlens, in.indices}}});
  }
  for (const auto& c : calls) j["calls"].push_back({c.inputs, c.out, c.lse, c.stop});
  return j;
}

ArenaLayout ArenaLayout::from_json(const json& j) {
  ArenaLayout l;
  l.page = j.at("page");
  l.size = j.at("size");
  l.value_bytes = j.at("value_bytes");
  for (const auto& r : j.at("regions")) {
    l.regions.push_back({r.at("name"), r.at("input"), r.at("start"), r.at("data"), r.at("bytes"), r.at("body"), r.at("end")});
  }
  for (const auto& in : j.at("inputs")) {
    ArenaInputs x;
    x.shape = attn_shape_from_json(in.at("shape"));
    x.softmax_scale = in.at("softmax_scale");
    const auto& r = in.at("regions");
    x.q = r.at(0);
    x.kv_cache = r.at(1);
    x.block_table = r.at(2);
    x.cache_seqlens = r.at(3);
    x.indices = r.at(4);
    l.inputs.push_back(x);
  }
  for (const auto& c : j.at("calls")) l.calls.push_back({c.at(0), c.at(1), c.at(2), c.at(3)});
  return l;
}

std::string ArenaLayout::where(std::size_t off) const {
  // Inside a buffer, or in the guard region after one (an overrun runs forwards far more often
  // than backwards): named by the buffer whose data ends last before the address.
  const ArenaRegion* before = nullptr;
  for (const auto& r : regions) {
    if (off >= r.data && off < r.data + r.bytes) return fmt::format("inside {}", r.name);
    if (r.data + r.bytes <= off && (!before || r.data + r.bytes > before->data + before->bytes)) before = &r;
  }
  if (before) return fmt::format("{} bytes past the end of {}", off - (before->data + before->bytes) + 1, before->name);
  if (!regions.empty() && off < regions.front().data) {
    return fmt::format("{} bytes before {}", regions.front().data - off, regions.front().name);
  }
  return "outside every buffer the certifier handed over";
}

std::size_t Arena::add_region(std::string name, std::size_t bytes, bool input, std::size_t elem, std::size_t cursor,
                              bool other) {
  auto& l = layout_;
  ArenaRegion r;
  r.elem = elem;
  r.other = other;
  r.name = std::move(name);
  r.input = input;
  r.bytes = bytes;
  r.start = cursor;
  if (input) {
    r.body = round_up(bytes + kMinCanary, l.page);
    r.data = r.start + l.page + r.body - bytes;  // flush against the back guard page
  } else {
    r.body = round_up(kMinCanary + bytes + kMinCanary, l.page);
    r.data = r.start + l.page + kMinCanary;
  }
  r.end = r.start + l.page + r.body + l.page;
  l.regions.push_back(std::move(r));
  initial_.emplace_back();
  prefill_.push_back(0);
  return l.regions.back().end;
}

Arena::Arena(const std::vector<AttnInputs>& sets, const std::vector<ArenaCallPlan>& calls, int value_bytes,
             uint64_t key)
    : key_(key) {
  auto& l = layout_;
  l.page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  l.value_bytes = value_bytes;
  std::size_t cursor = round_up(sizeof(ArenaControl), l.page);
  // `other`: the region belongs to the case called in between (index > 0), whose faults are that
  // case's, not this one's.
  auto add = [&](std::string name, std::span<const uint8_t> initial, bool input, std::size_t bytes, std::size_t elem,
                 bool other) {
    cursor = add_region(std::move(name), bytes, input, elem, cursor, other);
    initial_.back() = initial;
    return static_cast<int>(l.regions.size() - 1);
  };
  for (std::size_t i = 0; i < sets.size(); ++i) {
    const auto& b = sets[i];
    const std::string suffix = i == 0 ? "" : " (of the case called in between)";
    ArenaInputs in;
    in.shape = b.shape;
    in.softmax_scale = b.softmax_scale;
    auto input = [&](const char* name, std::span<const uint8_t> v, std::size_t elem) {
      return add(name + suffix, v, true, v.size(), elem, i > 0);
    };
    in.q = input("q", bytes_of(b.q), 2);
    in.kv_cache = input("kv_cache", bytes_of(b.kv_cache), 1);
    in.block_table = input("block_table", bytes_of(b.block_table), 4);
    in.cache_seqlens = input("cache_seqlens", bytes_of(b.cache_seqlens), 4);
    in.indices = input("indices", bytes_of(b.indices), 4);
    l.inputs.push_back(in);
  }
  if (calls.size() > static_cast<std::size_t>(kArenaMaxCalls)) throw Error("too many calls for one child");
  for (std::size_t c = 0; c < calls.size(); ++c) {
    ArenaCallPlan p = calls[c];
    const auto& s = l.inputs.at(static_cast<std::size_t>(p.inputs)).shape;
    const std::size_t n_out = static_cast<std::size_t>(s.batch) * s.s_q * s.heads * s.d_v;
    const std::size_t n_lse = static_cast<std::size_t>(s.batch) * s.heads * s.s_q;
    const std::string which = p.inputs == 0 ? "" : " (of the case called in between)";
    const auto vb = static_cast<std::size_t>(value_bytes);
    const std::size_t lse_vb = value_bytes == 8 ? 8 : 4;
    p.out = add("out" + which, {}, false, n_out * vb, vb, p.inputs != 0);
    prefill_.back() = vb;
    p.lse = add("lse" + which, {}, false, n_lse * lse_vb, lse_vb, p.inputs != 0);
    prefill_.back() = lse_vb;
    l.calls.push_back(p);
  }
  l.size = cursor;
  map();
}

Arena::Arena(const std::vector<ArenaBuffer>& buffers, uint64_t key) : key_(key) {
  auto& l = layout_;
  l.page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  std::size_t cursor = round_up(sizeof(ArenaControl), l.page);
  for (const auto& b : buffers) {
    // An in-place buffer is laid out as an output (canaries on both sides): a write just
    // before or past it is measured, not a fault.
    if (b.output_bytes > 0) {
      cursor = add_region(b.name, b.output_bytes, false, b.elem, cursor, false);
      prefill_.back() = b.elem;
      continue;
    }
    cursor = add_region(b.name, b.initial.size(), !b.inout, b.elem, cursor, false);
    l.regions.back().inout = b.inout;
    initial_.back() = b.initial;
  }
  l.size = cursor;
  map();
}

void Arena::map() {
  auto& l = layout_;
  // Failures carry errno (std::system_error): no descriptor or memory left is the host's failure
  // (host_cause), never the kernel's.
  fd_ = memfd_create("mla-certify-arena", MFD_CLOEXEC);
  if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "memfd_create failed");
  if (fd_ <= STDERR_FILENO) {
    // A certifier started with a standard stream closed: the child's streams are set up on 0-2,
    // so the buffers it inherits under this number must not be one of them.
    const int moved = fcntl(fd_, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    const int e = errno;
    close(fd_);
    fd_ = moved;
    if (fd_ < 0) throw std::system_error(e, std::generic_category(), "cannot move the shared buffers' descriptor");
  }
  if (ftruncate(fd_, static_cast<off_t>(l.size)) != 0) {
    const int e = errno;
    close(fd_);
    fd_ = -1;
    throw std::system_error(e, std::generic_category(), fmt::format("cannot size the shared buffers ({} bytes)", l.size));
  }
  void* m = mmap(nullptr, l.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (m == MAP_FAILED) {
    const int e = errno;
    close(fd_);
    fd_ = -1;
    throw std::system_error(e, std::generic_category(), fmt::format("cannot map the shared buffers ({} bytes)", l.size));
  }
  base_ = static_cast<uint8_t*>(m);
}

Arena::~Arena() {
  if (base_) munmap(base_, layout_.size);
  if (fd_ >= 0) close(fd_);
}

uint8_t Arena::canary(int region, std::size_t i) const {
  // Keyed by a secret of this run: a kernel cannot know the bytes without reading them.
  return static_cast<uint8_t>(mix(key_ ^ (static_cast<uint64_t>(region) << 40) ^ i));
}

void Arena::reset() {
  std::memset(base_, 0, sizeof(ArenaControl));
  const auto& l = layout_;
  for (std::size_t r = 0; r < l.regions.size(); ++r) {
    const auto& g = l.regions[r];
    uint8_t* body = base_ + g.start + l.page;
    const std::size_t front = g.data - (g.start + l.page);
    for (std::size_t i = 0; i < front; ++i) body[front - 1 - i] = canary(static_cast<int>(r), i);
    uint8_t* back = base_ + g.data + g.bytes;
    const std::size_t back_len = (g.start + l.page + g.body) - (g.data + g.bytes);
    for (std::size_t i = 0; i < back_len; ++i) back[i] = canary(static_cast<int>(r), (std::size_t{1} << 32) + i);
  }
  for (std::size_t r = 0; r < l.regions.size(); ++r) {
    uint8_t* p = base_ + l.regions[r].data;
    if (!initial_[r].empty()) std::memcpy(p, initial_[r].data(), initial_[r].size());
    if (const std::size_t vb = prefill_[r]) {
      const uint64_t bits = arena_unwritten_bits(key_, static_cast<int>(vb));
      for (std::size_t i = 0; i < l.regions[r].bytes / vb; ++i) std::memcpy(p + i * vb, &bits, vb);
    }
  }
}

std::vector<std::pair<std::string, std::string>> Arena::changed_inputs() const {
  std::vector<std::pair<std::string, std::string>> v;
  // The case's own inputs; those of the case called in between are that case's.
  for (std::size_t r = 0; r < layout_.regions.size(); ++r) {
    const auto& g = layout_.regions[r];
    const auto want = initial_[r];
    if (!g.input || g.other) continue;
    const uint8_t* have = base_ + g.data;
    if (want.empty() || std::memcmp(have, want.data(), want.size()) == 0) continue;
    std::size_t first = 0, n = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (have[i] != want[i] && n++ == 0) first = i;
    }
    v.emplace_back(g.name, fmt::format("{} bytes, first at byte {}", n, first));
  }
  return v;
}

std::vector<std::string> Arena::check_canaries() const {
  std::vector<std::string> v;
  // How far a kernel wrote is the farthest canary byte that changed, counted in whole elements
  // of the buffer: a kernel writes elements, and a written byte that happens to equal its canary
  // byte (1 in 256) must not make the count depend on the run's secret.
  auto extent = [](std::size_t changed, std::size_t elem, std::size_t len) {
    return std::min(len, (changed + elem - 1) / elem * elem);
  };
  const auto& l = layout_;
  for (std::size_t r = 0; r < l.regions.size(); ++r) {
    const auto& g = l.regions[r];
    if (g.other) continue;
    const uint8_t* body = base_ + g.start + l.page;
    const std::size_t front = g.data - (g.start + l.page);
    for (std::size_t i = front; i-- > 0;) {
      if (body[front - 1 - i] != canary(static_cast<int>(r), i)) {
        v.push_back(fmt::format("wrote {} bytes before {}", extent(i + 1, g.elem, front), g.name));
        break;
      }
    }
    const uint8_t* back = base_ + g.data + g.bytes;
    const std::size_t back_len = (g.start + l.page + g.body) - (g.data + g.bytes);
    for (std::size_t i = back_len; i-- > 0;) {
      if (back[i] != canary(static_cast<int>(r), (std::size_t{1} << 32) + i)) {
        v.push_back(fmt::format("wrote {} bytes past {}", extent(i + 1, g.elem, back_len), g.name));
        break;
      }
    }
  }
  return v;
}

std::pair<std::size_t, std::size_t> Arena::unwritten(std::span<const uint8_t> b, std::size_t vb) const {
  const uint64_t bits = arena_unwritten_bits(key_, static_cast<int>(vb));
  const uint8_t* p = b.data();
  std::size_t n = 0, first = 0;
  for (std::size_t i = 0; i < b.size() / vb; ++i) {
    if (std::memcmp(p + i * vb, &bits, vb) == 0 && n++ == 0) first = i;
  }
  return {n, first};
}

}  // namespace mla::certify
