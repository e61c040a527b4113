// Plug-ins whose descriptor breaks one rule each, for the loader's refusals
// (suites/certify/test_plugin_host.cpp, test_mla_cli.cpp). See
// kernels/plugin/examples/example_plugin.cpp for a working plug-in.
#include <cstdint>

#include "mla/plugin/mla_plugin.h"

namespace {

int32_t decode(const mla_plugin_decode_args*, char*, size_t) { return MLA_PLUGIN_ERROR; }

mla_plugin_descriptor make() {
  mla_plugin_descriptor d{};
  d.abi_version = MLA_PLUGIN_ABI_VERSION;
  d.struct_size = sizeof d;
  d.name = "bad_plugin";
  d.version = "0";
  d.description = "broken descriptor";
  d.backend = "cpu";
  d.out_dtype = MLA_PLUGIN_OUT_F32;
  d.caps.cache_formats = MLA_PLUGIN_CACHE_BF16;
  d.caps.features = MLA_PLUGIN_DENSE;
  d.caps.min_heads = 1;
  d.caps.max_heads = 128;
  d.caps.min_s_q = 1;
  d.caps.max_s_q = 4;
  d.decode = decode;
#if defined(MLA_BAD_ABI_VERSION)
  d.abi_version = MLA_PLUGIN_ABI_VERSION + 98;  // built against a future header
#elif defined(MLA_BAD_NULL_NAME)
  d.name = nullptr;
#elif defined(MLA_BAD_BAD_CAPS)
  d.caps.min_heads = 64;  // an empty range
  d.caps.max_heads = 8;
#endif
  return d;
}

const mla_plugin_descriptor kDescriptor = make();

}  // namespace

#if !defined(MLA_BAD_NO_ENTRY)
extern "C" MLA_PLUGIN_EXPORT const mla_plugin_descriptor* mla_plugin_get_descriptor(uint32_t) { return &kDescriptor; }
#else
// Exported under another name: the host must say which symbol it looked for.
extern "C" MLA_PLUGIN_EXPORT const mla_plugin_descriptor* get_descriptor(uint32_t) { return &kDescriptor; }
#endif
