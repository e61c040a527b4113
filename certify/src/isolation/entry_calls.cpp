#include "isolation/entry_calls.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "mla/certify/host_error.hpp"
#include "mla/certify/protocol.hpp"
#include "mla/core/text.hpp"
#include "mla/plugin/host.hpp"
#include "isolation/python_door.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {

namespace fs = std::filesystem;

// A child's words, bounded and made printable (they are the plug-in's bytes).

void note(std::vector<std::string>& v, std::string why) {
  if (std::find(v.begin(), v.end(), why) == v.end()) v.push_back(std::move(why));
}

// The first row (of `row` int32 values) whose values differ between `a` and `b` once each row is
// sorted; nullopt when every row holds the same values (perhaps in another order).
std::optional<std::size_t> first_row_with_other_values(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                                                       std::size_t row) {
  if (a.size() != b.size() || a.size() % (4 * row) != 0) return 0;
  std::vector<int32_t> ra(row), rb(row);
  for (std::size_t r = 0; r < a.size() / (4 * row); ++r) {
    std::memcpy(ra.data(), a.data() + 4 * row * r, 4 * row);
    std::memcpy(rb.data(), b.data() + 4 * row * r, 4 * row);
    std::sort(ra.begin(), ra.end());
    std::sort(rb.begin(), rb.end());
    if (ra != rb) return r;
  }
  return std::nullopt;
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

EntryRun run_entry_in_child(Session& s, const Implementation& k, const EntryCalls& plan, const std::string& tag) {
  EntryRun r;
  r.entry = plan.entry;
  const int calls = std::min(kArenaMaxCalls, std::max(2, s.options.repeats));
  std::vector<ArenaBuffer> buffers = plan.inputs;
  nlohmann::json inputs = nlohmann::json::object();
  for (std::size_t i = 0; i < plan.inputs.size(); ++i) inputs[plan.inputs[i].name] = i;
  // Region indices of each call's own buffers, call by call: a call must not depend on what an
  // earlier one wrote, so none shares a buffer with another.
  std::vector<std::vector<int>> own(static_cast<std::size_t>(calls));
  for (int c = 0; c < calls; ++c) {
    for (const auto& b : plan.per_call) {
      own[static_cast<std::size_t>(c)].push_back(static_cast<int>(buffers.size()));
      buffers.push_back(b);
      if (c > 0) buffers.back().name = fmt::format("{} (of call {})", b.name, c + 1);
    }
  }
  std::unique_ptr<Arena> arena;
  const auto plan_file = s.work.path() / (tag + ".plan");
  const auto log = s.work.path() / (tag + ".log");
  try {
    arena = std::make_unique<Arena>(buffers, s.secret ^ hash_text(0, tag));
    arena->reset();
    wire::Message m(kEntryCalls);
    m.fields() = {{"entry", plan.entry},         {"layout", arena->layout().to_json()},
                  {"control", arena_control_layout()}, {"arena_fd", arena->fd()},
                  {"make_calls", calls},          {"inputs", inputs},
                  {"calls", own},                 {"args", plan.args}};
    wire::write(plan_file, m);
  } catch (const std::exception& e) {
    // The host could not make the buffers or the plan: never the plug-in's fault (it has not run).
    r.message = fmt::format("the certifier cannot create the shared buffers for the child: {}", e.what());
    r.host_caused = true;
    return r;
  }

  const auto& l = arena->layout();
  // Each call's buffers, copied while the child was stopped right after that call.
  std::vector<std::vector<std::vector<uint8_t>>> taken;
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
    if (taken.size() >= own.size()) return;
    auto& t = taken.emplace_back();
    for (const int region : own[taken.size() - 1]) t.emplace_back(arena->data(region), arena->data(region) + arena->bytes(region));
    audit(fmt::format("by call {}", taken.size()));
  };
  // A plug-in's calls are made by this executable's child; a Python kernel's by the door's
  // (child.py), forked from its server when one runs.
  std::vector<std::string> argv;
  if (k.ref.python) {
    argv = python_child_argv(*k.ref.python, "call", {"--plan", plan_file.string()});
    use_door_server(s, *k.ref.python, argv, hooks);
  } else {
    argv = {s.self.string(), "__child", "call", "--plan", plan_file.string(), "--plugin", k.ref.plugin->string()};
  }
  const auto outcome = run_child(argv, s.options.timeout_s, log, hooks);
  audit("after the last call");
  ArenaControl control{};
  std::memcpy(&control, &arena->control(), sizeof control);
  // A Python kernel's refusal (mla_door.Unsupported) is recorded as the state, a plug-in's as its
  // return code: one returned call with MLA_PLUGIN_UNSUPPORTED either way.
  for (auto& c : control.calls) {
    if (c.state == ArenaState::unsupported) c.state = ArenaState::ok, c.rc = MLA_PLUGIN_UNSUPPORTED;
  }
  std::error_code ec;
  fs::remove(plan_file, ec);
  fs::remove(log, ec);

  if (auto why = host_cause(outcome)) {
    r = EntryRun{};
    r.entry = plan.entry;
    r.host_caused = true;
    r.message = *why + " (" + outcome.describe() + ")";
    return r;
  }
  if (auto why = failure(outcome, control, l, own.size(), taken.size())) {
    // What this process saw in its own buffers comes with the error.
    r.message = *why;
    for (const auto& v : r.reasons) r.message += "; " + v;
    r.reasons.clear();
    return r;
  }
  const auto name = [&](std::size_t b) { return plan.per_call[b].name; };
  // A call's buffers are its own: nothing may change them after the call returned.
  for (std::size_t c = 0; c < own.size(); ++c) {
    for (std::size_t b = 0; b < own[c].size(); ++b) {
      if (!std::equal(taken[c][b].begin(), taken[c][b].end(), arena->data(own[c][b]))) {
        note(r.reasons, fmt::format("{} of call {} was changed after that call returned", name(b), c + 1));
      }
    }
  }
  r.ran = true;
  r.rc = control.calls[0].rc;
  r.message = bounded(control.calls[0].message);
  r.buffers = taken[0];
  // Output elements call 1 never wrote: the prefilled pattern (a NaN with this run's payload,
  // which no computation produces) is still there.
  for (std::size_t b = 0; b < plan.per_call.size(); ++b) {
    const auto& pb = plan.per_call[b];
    if (pb.output_bytes == 0 || r.rc != MLA_PLUGIN_OK) continue;
    const auto [n, first] = arena->unwritten(r.buffers[b], pb.elem);
    if (n > 0) note(r.reasons, fmt::format("{}: {} elements never written, first at flat index {}", name(b), n, first));
  }
  r.run_seconds = std::numeric_limits<double>::infinity();
  for (std::size_t c = 0; c < own.size(); ++c) {
    const double t = control.calls[c].seconds;
    if (std::isfinite(t) && t >= 0) r.run_seconds = std::min(r.run_seconds, t);
    const std::string said = bounded(control.calls[c].message);
    if (said.rfind("device audit: ", 0) == 0) note(r.reasons, said.substr(14));
    if (c == 0) continue;
    if (control.calls[c].rc != r.rc) {
      note(r.reasons, fmt::format("{} returned {} on call 1 and {} on call {}", plan.entry, plugin::describe_rc(r.rc),
                                  plugin::describe_rc(control.calls[c].rc), c + 1));
      continue;
    }
    for (std::size_t b = 0; b < taken[c].size(); ++b) {
      if (taken[c][b] == r.buffers[b]) continue;
      if (const std::size_t row = plan.per_call[b].unordered_row; row > 0) {
        if (const auto at = first_row_with_other_values(r.buffers[b], taken[c][b], row)) {
          note(r.reasons, fmt::format("{} differs between repeated calls (call 1 vs {}) in the values of row {}, "
                                      "not only in their order",
                                      name(b), c + 1, *at));
        }
        continue;
      }
      std::size_t first = 0;
      while (first < r.buffers[b].size() && r.buffers[b][first] == taken[c][b][first]) ++first;
      note(r.reasons,
           fmt::format("{} differs between repeated calls (call 1 vs {}), first at byte {}", name(b), c + 1, first));
    }
  }
  if (!std::isfinite(r.run_seconds)) r.run_seconds = 0;
  return r;
}

}  // namespace mla::certify
