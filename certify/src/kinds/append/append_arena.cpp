// One append case of a plug-in in a child process on shared buffers this process created and
// audits (isolation/entry_calls.hpp): the append's inputs once, and one copy of the cache per
// call, written in place.
#include "kinds/append/append_arena.hpp"

#include "isolation/entry_calls.hpp"

namespace mla::certify {
namespace {

template <class T>
std::span<const uint8_t> bytes_of(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

}  // namespace

AppendRun run_append_in_child(Session& s, const Implementation& k, const AppendCase& c, const std::string& tag) {
  const auto& in = c.in;
  EntryCalls plan;
  plan.entry = kEntryAppend;
  plan.inputs = {{"latent", bytes_of(in.latent), false, 2},
                 {"k_pe", bytes_of(in.k_pe), false, 2},
                 {"kv_norm_weight", bytes_of(in.kv_norm_weight), false, 2},
                 {"inv_freq", bytes_of(in.inv_freq), false, 8},
                 {"seq_ids", bytes_of(in.seq_ids), false, 4},
                 {"positions", bytes_of(in.positions), false, 4},
                 {"block_table", bytes_of(in.block_table), false, 4}};
  // Every call on its own copy of the cache as it was before the append.
  plan.per_call = {{"kv_cache", bytes_of(in.kv_cache), true, 1}};
  plan.args = {{"num_tokens", in.num_tokens}, {"batch", in.batch},         {"max_blocks", in.max_blocks},
               {"page_size", in.page_size},   {"num_blocks", in.num_blocks}, {"max_seq_len", in.max_seq_len},
               {"cache_format", in.cache_format}, {"scale_fmt", in.scale_fmt}, {"fp8_recipe", in.fp8_recipe},
               {"eps", in.eps}};
  auto e = run_entry_in_child(s, k, plan, tag);
  AppendRun r;
  r.ran = e.ran;
  r.message = std::move(e.message);
  r.rc = e.rc;
  if (!e.buffers.empty()) r.kv_cache = std::move(e.buffers[0]);
  r.reasons = std::move(e.reasons);
  r.run_seconds = e.run_seconds;
  r.host_caused = e.host_caused;
  return r;
}

}  // namespace mla::certify
