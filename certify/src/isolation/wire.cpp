#include "mla/certify/wire.hpp"

#include <fstream>
#include <iterator>

#include <fmt/format.h>

#include "mla/core/error.hpp"
#include "mla/reports/certificate.hpp"

namespace mla::certify::wire {
namespace {

using nlohmann::json;

constexpr const char* kFormat = "mla-certify-wire";
constexpr int kVersion = 1;
// A header line is small; a longer one means the file is not ours.
constexpr std::size_t kMaxHeader = 1 << 20;
// No array of a case comes near this; a larger count is a corrupt header, not a reason to
// allocate.
constexpr uint64_t kMaxArrayBytes = uint64_t{1} << 40;

std::size_t element_size(std::string_view dtype) {
  if (dtype == "u8") return 1;
  if (dtype == "u16") return 2;
  if (dtype == "i32") return 4;
  if (dtype == "f64") return 8;
  return 0;
}

}  // namespace

const Message::Array& Message::array(const std::string& name, const char* dtype) const {
  const auto it = arrays_.find(name);
  if (it == arrays_.end()) throw Error(fmt::format("{} message: no array '{}'", kind_, name));
  if (it->second.dtype != dtype) {
    throw Error(fmt::format("{} message: array '{}' holds {}, expected {}", kind_, name, it->second.dtype, dtype));
  }
  return it->second;
}

void write(const std::filesystem::path& file, const Message& m) {
  json arrays = json::array();
  std::size_t total = 0;
  for (const auto& name : m.order_) {
    const auto& a = m.arrays_.at(name);
    arrays.push_back({{"name", name}, {"dtype", a.dtype}, {"count", a.count}});
    total += a.bytes.size();
  }
  const json h = {{"format", kFormat}, {"version", kVersion}, {"kind", m.kind_}, {"fields", m.fields_}, {"arrays", arrays}};
  std::string text = h.dump() + "\n";
  text.reserve(text.size() + total);
  for (const auto& name : m.order_) {
    const auto& b = m.arrays_.at(name).bytes;
    text.append(reinterpret_cast<const char*>(b.data()), b.size());
  }
  reports::write_file_atomically(file, text);
}

Message read(const std::filesystem::path& file, std::string_view kind) { return read(file, kind, kind); }

Message read(const std::filesystem::path& file, std::string_view kind, std::string_view or_kind) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error(fmt::format("cannot read {}", file.string()));
  std::string line;
  char c = 0;
  while (in.get(c) && c != '\n') {
    line += c;
    if (line.size() > kMaxHeader) throw Error(fmt::format("{}: header line too long", file.string()));
  }
  if (c != '\n') throw Error(fmt::format("{}: truncated header", file.string()));
  Message m;
  try {
    const json h = json::parse(line);
    if (h.at("format") != kFormat || h.at("version") != kVersion) {
      throw Error(fmt::format("{} is not a {} file of version {}", file.string(), kFormat, kVersion));
    }
    m.kind_ = h.at("kind").get<std::string>();
    if (m.kind_ != kind && m.kind_ != or_kind) {
      throw Error(fmt::format("{} holds a '{}' message, expected '{}'{}", file.string(), m.kind_, kind,
                              kind == or_kind ? "" : fmt::format(" or '{}'", or_kind)));
    }
    m.fields_ = h.at("fields");
    for (const auto& a : h.at("arrays")) {
      Message::Array arr;
      const std::string name = a.at("name").get<std::string>();
      arr.dtype = a.at("dtype").get<std::string>();
      const std::size_t size = element_size(arr.dtype);
      if (size == 0) throw Error(fmt::format("{}: array '{}' has unknown type '{}'", file.string(), name, arr.dtype));
      const uint64_t count = a.at("count").get<uint64_t>();
      if (count > kMaxArrayBytes / size) throw Error(fmt::format("{}: array '{}' is implausibly large", file.string(), name));
      arr.count = static_cast<std::size_t>(count);
      arr.owned.resize(arr.count * size);
      in.read(reinterpret_cast<char*>(arr.owned.data()), static_cast<std::streamsize>(arr.owned.size()));
      if (!in) throw Error(fmt::format("{}: truncated in {}", file.string(), name));
      arr.bytes = arr.owned;
      if (!m.arrays_.emplace(name, std::move(arr)).second) {
        throw Error(fmt::format("{}: array '{}' appears twice", file.string(), name));
      }
      m.order_.push_back(name);
    }
  } catch (const json::exception& e) {
    throw Error(fmt::format("{}: malformed header: {}", file.string(), e.what()));
  }
  if (in.peek() != std::char_traits<char>::eof()) throw Error(fmt::format("{}: trailing bytes", file.string()));
  return m;
}

}  // namespace mla::certify::wire
