#include "device_call.hpp"

#include "mla/core/error.hpp"

namespace mla::plugin::detail {

namespace {
constexpr const char* kNoCuda =
    "the plug-in asks for CUDA device memory, and this mla was built without CUDA (rebuild with a CUDA toolkit)";
}

std::optional<std::string> device_unavailable() { return std::string(kNoCuda); }

struct DeviceCall::Impl {};

DeviceCall::DeviceCall() { throw Error(kNoCuda); }
DeviceCall::~DeviceCall() = default;
void* DeviceCall::add(std::string, std::span<const uint8_t>, Role) { throw Error(kNoCuda); }
void* DeviceCall::stream() const { return nullptr; }
std::vector<std::string> DeviceCall::finish() { throw Error(kNoCuda); }
const std::vector<uint8_t>& DeviceCall::result(std::size_t) const { throw Error(kNoCuda); }

}  // namespace mla::plugin::detail
