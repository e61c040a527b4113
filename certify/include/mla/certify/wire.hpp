// The one wire format between the certifier and its child processes: every message either way
// (the case a child runs, the results it returns, a plug-in's description, an append call and
// its outcome) is a `Message` of a named kind, with scalar fields and named, typed arrays.
//
// On disk: one JSON header line {"format": "mla-certify-wire", "version": 1, "kind": ...,
// "fields": {...}, "arrays": [{"name", "dtype", "count"}, ...]}, then the arrays' bytes in that
// order (little endian, as every host this suite builds for). Reading checks the kind and the
// version, every array's type and size, and that the bytes end exactly where the header says,
// so a truncated or foreign file is an mla::Error naming the file, never a half-believed result.
//
// Why one format with named arrays: the parent decides what a verdict rests on, so it must be
// able to check what it reads in one place. The arrays are the part a later transport can place
// in memory the parent owns (e.g. shared mappings it created), leaving the rest unchanged.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace mla::certify::wire {

// The element types an array may have.
template <class T>
constexpr const char* dtype_name() {
  if constexpr (std::is_same_v<T, uint8_t>) return "u8";
  else if constexpr (std::is_same_v<T, uint16_t>) return "u16";
  else if constexpr (std::is_same_v<T, int32_t>) return "i32";
  else if constexpr (std::is_same_v<T, double>) return "f64";
  else static_assert(sizeof(T) == 0, "the wire carries u8, u16, i32 and f64 arrays");
}

class Message {
 public:
  Message() = default;
  explicit Message(std::string kind) : kind_(std::move(kind)) {}
  // Arrays may refer to memory the message does not own: a copy would alias it.
  Message(const Message&) = delete;
  Message& operator=(const Message&) = delete;
  Message(Message&&) = default;
  Message& operator=(Message&&) = default;

  const std::string& kind() const { return kind_; }
  nlohmann::json& fields() { return fields_; }
  const nlohmann::json& fields() const { return fields_; }

  // Adds an array that refers to `values` (not copied): they must outlive write().
  template <class T>
  void put(const std::string& name, std::span<const T> values) {
    arrays_[name] = Array{dtype_name<T>(), values.size(), {reinterpret_cast<const uint8_t*>(values.data()), values.size_bytes()}, {}};
    order_.push_back(name);
  }
  template <class T>
  void put(const std::string& name, const std::vector<T>& values) {
    put(name, std::span<const T>(values));
  }
  // A copy of array `name`; throws mla::Error when it is absent or of another type.
  template <class T>
  std::vector<T> get(const std::string& name) const {
    const Array& a = array(name, dtype_name<T>());
    std::vector<T> v(a.count);
    if (!v.empty()) std::memcpy(v.data(), a.bytes.data(), a.bytes.size());
    return v;
  }
  bool has(const std::string& name) const { return arrays_.count(name) != 0; }

 private:
  struct Array {
    std::string dtype;
    std::size_t count = 0;
    std::span<const uint8_t> bytes;  // into `owned` (read) or the caller's memory (put)
    std::vector<uint8_t> owned;
  };
  const Array& array(const std::string& name, const char* dtype) const;

  friend void write(const std::filesystem::path& file, const Message& m);
  friend Message read(const std::filesystem::path& file, std::string_view kind, std::string_view or_kind);

  std::string kind_;
  nlohmann::json fields_ = nlohmann::json::object();
  std::map<std::string, Array> arrays_;
  std::vector<std::string> order_;
};

// Atomically (a temporary file and a rename): a child killed while writing leaves no half
// message for the parent to believe. Throws mla::Error naming the file.
void write(const std::filesystem::path& file, const Message& m);
// Throws mla::Error naming the file and what is wrong, also when its kind is not `kind`.
Message read(const std::filesystem::path& file, std::string_view kind);
// The same, for a file that may hold either of two kinds (kind() says which).
Message read(const std::filesystem::path& file, std::string_view kind, std::string_view or_kind);

}  // namespace mla::certify::wire
