// One append case of a plug-in in a child process on shared buffers this process created
// (arena.hpp), as decode calls are: the parent lays out the append's inputs and one copy of the
// cache per call between guard regions, the child only calls the plug-in on them, and every fact
// the verdict rests on (inputs unchanged, guard bytes intact, each call's cache, the calls
// agreeing) is read here from the raw bytes, while the child is stopped after each call and
// after it has exited. The child's record of a call (return code, message, time) can only word
// the outcome the judge sees; the cache it is judged on is the one this process reads.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "kinds/append/append_arena.hpp"
#include "isolation/arena.hpp"
#include "mla/certify/host_error.hpp"
#include "mla/core/text.hpp"
#include "mla/plugin/host.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {

namespace fs = std::filesystem;

template <class T>
std::span<const uint8_t> bytes_of(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

// A child's words, bounded and made printable (they are the plug-in's bytes).
std::string bounded(const char* s) { return printable(std::string_view(s, strnlen(s, kArenaMessage - 1))); }

void note(std::vector<std::string>& v, std::string why) {
  if (std::find(v.begin(), v.end(), why) == v.end()) v.push_back(std::move(why));
}

// The plan the child is told: the layout, the call's scalars, which region is which.
void write_plan(const fs::path& file, const Arena& arena, const plugin::AppendCallInputs& in,
                const std::vector<int>& caches) {
  wire::Message m(kAppendCalls);
  nlohmann::json regions;
  const char* const names[] = {"latent", "k_pe", "kv_norm_weight", "inv_freq", "seq_ids", "positions", "block_table"};
  for (int i = 0; i < 7; ++i) regions[names[i]] = i;
  m.fields() = {{"layout", arena.layout().to_json()},
                {"control", arena_control_layout()},
                {"arena_fd", arena.fd()},
                {"make_calls", caches.size()},
                {"regions", regions},
                {"caches", caches},
                {"args",
                 {{"num_tokens", in.num_tokens},
                  {"batch", in.batch},
                  {"max_blocks", in.max_blocks},
                  {"page_size", in.page_size},
                  {"num_blocks", in.num_blocks},
                  {"max_seq_len", in.max_seq_len},
                  {"cache_format", in.cache_format},
                  {"scale_fmt", in.scale_fmt},
                  {"fp8_recipe", in.fp8_recipe},
                  {"eps", in.eps}}}};
  wire::write(file, m);
}

// Why the child did not deliver every call, as the message of an ERROR; nullopt when it did.
std::optional<std::string> failure(const ChildOutcome& outcome, const ArenaControl& c, const ArenaLayout& l,
                                   std::size_t calls, std::size_t stops) {
  if (c.setup_state == ArenaState::error || c.setup_state == ArenaState::unsupported) return bounded(c.setup_message);
  for (std::size_t i = 0; i < calls; ++i) {
    if (c.calls[i].state == ArenaState::error) return bounded(c.calls[i].message);
  }
  bool all_returned = true;
  for (std::size_t i = 0; i < calls; ++i) all_returned = all_returned && c.calls[i].state == ArenaState::ok;
  if (outcome.ok() && stops >= calls && all_returned) return std::nullopt;
  std::string why = !outcome.ok() ? outcome.describe()
                    : stops < calls ? "the child exited before making every call"
                                    : "the child's record of its calls is missing or was overwritten (it stopped after "
                                      "each call, so they returned)";
  if (outcome.kind == ChildOutcome::Kind::signaled && c.fault_signal == outcome.signal && c.child_base &&
      c.fault_addr >= c.child_base && c.fault_addr < c.child_base + l.size) {
    why += fmt::format(" at an access {}", l.where(static_cast<std::size_t>(c.fault_addr - c.child_base)));
  }
  if (!outcome.stderr_tail.empty()) why += "; its last output: " + outcome.stderr_tail;
  return why;
}

}  // namespace

AppendRun run_append_in_child(Session& s, const Implementation& k, const AppendCase& c, const std::string& tag) {
  AppendRun r;
  const auto& in = c.in;
  const int calls = std::min(kArenaMaxCalls, std::max(2, s.options.repeats));
  std::vector<ArenaBuffer> buffers{{"latent", bytes_of(in.latent), false, 2},
                                   {"k_pe", bytes_of(in.k_pe), false, 2},
                                   {"kv_norm_weight", bytes_of(in.kv_norm_weight), false, 2},
                                   {"inv_freq", bytes_of(in.inv_freq), false, 8},
                                   {"seq_ids", bytes_of(in.seq_ids), false, 4},
                                   {"positions", bytes_of(in.positions), false, 4},
                                   {"block_table", bytes_of(in.block_table), false, 4}};
  std::vector<int> caches;
  for (int i = 0; i < calls; ++i) {
    // Every call on its own copy of the cache as it was before the append: a call must not
    // depend on what an earlier one did.
    caches.push_back(static_cast<int>(buffers.size()));
    buffers.push_back({i == 0 ? std::string("kv_cache") : fmt::format("kv_cache (of call {})", i + 1),
                       bytes_of(in.kv_cache), true, 1});
  }
  std::unique_ptr<Arena> arena;
  const auto plan_file = s.work.path() / (tag + ".plan");
  const auto log = s.work.path() / (tag + ".log");
  try {
    arena = std::make_unique<Arena>(buffers, s.secret ^ hash_text(0, tag));
    arena->reset();
    write_plan(plan_file, *arena, in, caches);
  } catch (const std::exception& e) {
    // The host could not make the buffers or the plan: never the plug-in's fault (it has not run).
    r.message = fmt::format("the certifier cannot create the shared buffers for the child: {}", e.what());
    r.host_caused = true;
    return r;
  }

  const auto& l = arena->layout();
  std::vector<std::vector<uint8_t>> taken;  // each call's cache, copied while the child was stopped
  std::set<std::string> changed;
  auto audit = [&](const std::string& by) {
    for (auto& [name, detail] : arena->changed_inputs()) {
      if (changed.insert(name).second) note(r.reasons, fmt::format("input {} changed {} ({})", name, by, detail));
    }
    for (auto& v : arena->check_canaries()) note(r.reasons, v);
  };
  ChildHooks hooks;
  hooks.pass_fd = arena->fd();
  hooks.on_stop = [&] {
    if (taken.size() >= caches.size()) return;
    const int region = caches[taken.size()];
    taken.emplace_back(arena->data(region), arena->data(region) + arena->bytes(region));
    audit(fmt::format("by call {}", taken.size()));
  };
  const std::vector<std::string> argv{s.self.string(), "__child", "call", "--plan", plan_file.string(), "--plugin",
                                      k.ref.plugin->string()};
  const auto outcome = run_child(argv, s.options.timeout_s, log, hooks);
  audit("after the last call");
  ArenaControl control{};
  std::memcpy(&control, &arena->control(), sizeof control);
  std::error_code ec;
  fs::remove(plan_file, ec);
  fs::remove(log, ec);

  if (auto why = host_cause(outcome)) {
    r = AppendRun{};
    r.host_caused = true;
    r.message = *why + " (" + outcome.describe() + ")";
    return r;
  }
  if (auto why = failure(outcome, control, l, caches.size(), taken.size())) {
    // What this process saw in its own buffers comes with the error.
    r.message = *why;
    for (const auto& v : r.reasons) r.message += "; " + v;
    r.reasons.clear();
    return r;
  }
  // A call's cache is its own: nothing may change it after the call returned.
  for (std::size_t i = 0; i < caches.size(); ++i) {
    if (!std::equal(taken[i].begin(), taken[i].end(), arena->data(caches[i]))) {
      note(r.reasons, fmt::format("the cache of call {} was changed after that call returned", i + 1));
    }
  }
  r.ran = true;
  r.rc = control.calls[0].rc;
  r.message = bounded(control.calls[0].message);
  r.kv_cache = taken[0];
  r.run_seconds = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < caches.size(); ++i) {
    const double t = control.calls[i].seconds;
    if (std::isfinite(t) && t >= 0) r.run_seconds = std::min(r.run_seconds, t);
    const std::string said = bounded(control.calls[i].message);
    if (said.rfind("device audit: ", 0) == 0) note(r.reasons, said.substr(14));
    if (i == 0) continue;
    if (control.calls[i].rc != r.rc) {
      note(r.reasons, fmt::format("append returned {} on call 1 and {} on call {}", plugin::describe_rc(r.rc),
                                  plugin::describe_rc(control.calls[i].rc), i + 1));
    } else if (taken[i] != r.kv_cache) {
      std::size_t first = 0;
      while (first < r.kv_cache.size() && r.kv_cache[first] == taken[i][first]) ++first;
      note(r.reasons, fmt::format("the cache differs between repeated calls (call 1 vs {}), first at byte {}", i + 1, first));
    }
  }
  if (!std::isfinite(r.run_seconds)) r.run_seconds = 0;
  return r;
}

}  // namespace mla::certify
