// One (kernel, case) in child processes on shared buffers this process created (arena.hpp):
// everything a verdict rests on is read here, from the raw bytes, while the child is stopped
// after each call and after it has exited.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "mla/core/conventions.hpp"
#include "mla/judge/attention.hpp"
#include "mla/core/generator.hpp"

#include "isolation/arena.hpp"
#include "mla/certify/host_error.hpp"
#include "mla/core/error.hpp"
#include "mla/core/numeric.hpp"
#include "mla/core/text.hpp"
#include "isolation/python_door.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {

namespace fs = std::filesystem;

// The generator's own mixer (one definition of splitmix64 in the suite).
uint64_t mix(uint64_t z) { return gen::mix64(z + 0x9E3779B97F4A7C15ull); }


// A child's words, bounded and made printable: they are the kernel's bytes (a control sequence
// must not reach a terminal, invalid UTF-8 would make the JSON certificate unwritable).

void note(std::vector<std::string>& v, std::string why) {
  if (std::find(v.begin(), v.end(), why) == v.end()) v.push_back(std::move(why));
}

// One call's outputs as the parent copied them while the child was stopped.
struct Snapshot {
  std::vector<uint8_t> out, lse;
};

// What one child process did.
struct ProcessRun {
  ChildOutcome outcome;
  std::vector<Snapshot> calls;  // the case's own calls, in order
  std::vector<std::string> findings;
  ArenaControl control{};       // copied after exit
};

std::optional<std::string> first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b,
                                            std::size_t value_bytes, const char* what, const std::string& calls) {
  if (a == b) return std::nullopt;
  std::size_t n = 0, first = 0;
  for (std::size_t i = 0; i < a.size() / value_bytes; ++i) {
    if (std::memcmp(a.data() + i * value_bytes, b.data() + i * value_bytes, value_bytes) != 0 && n++ == 0) first = i;
  }
  return fmt::format("{} differs between repeated runs ({}) at {} elements, first flat index {}", what, calls, n, first);
}

ProcessRun run_process(Session& s, const Implementation& k, Arena& arena, const std::vector<int>& case_calls,
                       const CallSchedule& plan, const std::string& tag) {
  const bool enforce_caps = plan.enforce_caps;
  ProcessRun p;
  arena.reset();
  const auto plan_file = s.work.path() / (tag + ".plan");
  const auto log = s.work.path() / (tag + ".log");
  {
    wire::Message m(kAttentionCalls);
    // The child makes the planned calls up to the last one of the case it is asked for.
    // The shared buffers' descriptor number in the child is this process's (run_child keeps it).
    m.fields() = {{"layout", arena.layout().to_json()}, {"make_calls", case_calls.back() + 1},
                  {"control", arena_control_layout()}, {"arena_fd", arena.fd()}};
    if (plan.scale_fmt) m.fields()["scale_fmt"] = to_string(*plan.scale_fmt);
    wire::write(plan_file, m);
  }
  // A Python kernel's child is the user's Python running the door (python_door.hpp); it reads
  // the same plan and writes the same control block, so everything below is the same for it.
  std::vector<std::string> argv = k.ref.python ? python_child_argv(*k.ref.python, "call", {"--plan", plan_file.string()})
                                               : std::vector<std::string>{s.self.string(), "__child", "call", "--plan",
                                                                          plan_file.string()};
  if (k.ref.plugin) argv.insert(argv.end(), {"--plugin", k.ref.plugin->string()});
  if (k.ref.fault) argv.insert(argv.end(), {"--fault", *k.ref.fault});
  if (k.ref.builtin) argv.insert(argv.end(), {"--kernel", *k.ref.builtin});
  if (!enforce_caps) argv.push_back("--unclaimed");

  const auto& l = arena.layout();
  std::set<std::string> changed;  // each input reported once, against the call that changed it
  auto audit = [&](const std::string& by) {
    for (auto& [name, detail] : arena.changed_inputs()) {
      if (changed.insert(name).second) note(p.findings, fmt::format("input {} changed {} ({})", name, by, detail));
    }
    for (auto& v : arena.check_canaries()) note(p.findings, v);
  };
  ChildHooks hooks;
  hooks.pass_fd = arena.fd();
  hooks.on_stop = [&] {
    // The child stopped after a call of the case: its outputs now are that call's outputs.
    if (p.calls.size() >= case_calls.size()) return;
    const auto& c = l.calls[static_cast<std::size_t>(case_calls[p.calls.size()])];
    Snapshot snap;
    snap.out.assign(arena.data(c.out), arena.data(c.out) + arena.bytes(c.out));
    snap.lse.assign(arena.data(c.lse), arena.data(c.lse) + arena.bytes(c.lse));
    p.calls.push_back(std::move(snap));
    audit(fmt::format("by call {}", p.calls.size()));
  };
  if (k.ref.python) use_door_server(s, *k.ref.python, argv, hooks);
  p.outcome = run_child(argv, s.options.timeout_s, log, hooks);
  audit("after the last call");
  std::memcpy(&p.control, &arena.control(), sizeof p.control);
  // A call's outputs are its own: nothing may change them after it returned.
  for (std::size_t i = 0; i < p.calls.size(); ++i) {
    const auto& c = l.calls[static_cast<std::size_t>(case_calls[i])];
    const bool same = std::equal(p.calls[i].out.begin(), p.calls[i].out.end(), arena.data(c.out)) &&
                      std::equal(p.calls[i].lse.begin(), p.calls[i].lse.end(), arena.data(c.lse));
    if (!same) note(p.findings, fmt::format("the outputs of call {} were changed after that call returned", i + 1));
  }
  std::error_code ec;
  fs::remove(plan_file, ec);
  fs::remove(log, ec);
  return p;
}

// Why a process did not deliver all its calls, as an ERROR / UNSUPPORTED message; nullopt when
// it did.
// `plugin`: a C plug-in (its return code is part of an error's words); a Python kernel's child
// writes the exception itself.
std::optional<std::pair<RunResult::Status, std::string>> failure(const ProcessRun& p, const ArenaLayout& l,
                                                                 std::size_t calls, std::size_t case_calls, bool plugin) {
  using St = RunResult::Status;
  const auto& c = p.control;
  if (c.setup_state == ArenaState::unsupported) {
    return std::pair{St::unsupported, fmt::format("prepare refused it: {}", bounded(c.setup_message))};
  }
  if (c.setup_state == ArenaState::error) return std::pair{St::error, bounded(c.setup_message)};
  for (std::size_t i = 0; i < calls; ++i) {
    const auto& rec = c.calls[i];
    if (rec.state == ArenaState::unsupported) {
      return std::pair{St::unsupported, plugin ? fmt::format("plug-in refused the shape: {}", bounded(rec.message))
                                               : fmt::format("refused at run time: {}", bounded(rec.message))};
    }
    if (rec.state == ArenaState::error) {
      return std::pair{St::error, plugin ? fmt::format("exception: plug-in decode returned {}: {}", rec.rc, bounded(rec.message))
                                         : bounded(rec.message)};
    }
  }
  bool all_returned = true;
  for (std::size_t i = 0; i < calls; ++i) all_returned = all_returned && c.calls[i].state == ArenaState::ok;
  if (!p.outcome.ok() || p.calls.size() < case_calls || !all_returned) {
    std::string why = !p.outcome.ok() ? p.outcome.describe()
                      : p.calls.size() < case_calls
                          ? "the child exited before making every call"
                          : "the child's record of its calls is missing or was overwritten (it stopped after each call "
                            "of the case, so they returned)";
    if (p.outcome.kind == ChildOutcome::Kind::signaled && c.fault_signal == p.outcome.signal && c.child_base &&
        c.fault_addr >= c.child_base && c.fault_addr < c.child_base + l.size) {
      why += fmt::format(" at an access {}", l.where(static_cast<std::size_t>(c.fault_addr - c.child_base)));
    }
    if (!p.outcome.stderr_tail.empty()) why += "; its last output: " + p.outcome.stderr_tail;
    return std::pair{St::error, why};
  }
  return std::nullopt;
}

}  // namespace

AttnBuffers negated_q(const AttnInputs& in) {
  AttnBuffers b(in);
  for (auto& x : b.q) x ^= 0x8000u;
  return b;
}

uint64_t hash_text(uint64_t h, const std::string& s) {
  for (const unsigned char ch : s) h = mix(h ^ ch);
  return h;
}

int calls_per_case(uint64_t seed, const std::string& kernel, const std::string& case_key) {
  return 3 + static_cast<int>(hash_text(hash_text(mix(seed), kernel), case_key) % 3);
}

RunResult run_in_children(Session& s, const Implementation& k, const AttnInputs& in, const CallSchedule& plan,
                          const std::string& tag) {
  RunResult r;
  const int out_bytes = k.external ? (k.info.out_dtype == OutDType::bf16 ? 2 : 4) : 8;
  const int lse_bytes = k.external ? 4 : 8;
  try {
    const auto cost = mla_cost_model(in, k.info.out_dtype);
    r.bytes = cost.bytes;
    r.flops = cost.flops;
  } catch (const std::exception&) {
    // The cost model is informational; a shape it cannot price still runs.
  }
  // Calls: the case, then (plug-ins) the other case between every two of its calls.
  std::vector<AttnInputs> sets{in};
  if (plan.between) sets.push_back(*plan.between);
  std::vector<ArenaCallPlan> calls;
  std::vector<int> case_calls, between_calls;
  for (int i = 0; i < plan.calls; ++i) {
    if (i > 0 && plan.between) {
      between_calls.push_back(static_cast<int>(calls.size()));
      calls.push_back({1, -1, -1, false});
    }
    case_calls.push_back(static_cast<int>(calls.size()));
    calls.push_back({0, -1, -1, true});
  }
  std::unique_ptr<Arena> arena;
  try {
    arena = std::make_unique<Arena>(sets, calls, out_bytes, s.secret ^ hash_text(0, tag));
  } catch (const std::exception& e) {
    // The host could not make the buffers: never the kernel's fault.
    r.status = RunResult::Status::error;
    r.host_caused = true;
    r.message = fmt::format("the certifier cannot create the shared buffers for the child: {}", e.what());
    return r;
  }
  const auto first = run_process(s, k, *arena, case_calls, plan, tag);
  // The host's fault (the child could not start, hit this run's file-size limit, or could not
  // do its own part for a reason of the machine): HOST_ERROR, never the kernel's ERROR.
  if (auto why = host_cause(first.outcome)) {
    r.status = RunResult::Status::error;
    r.host_caused = true;
    r.message = *why + " (" + first.outcome.describe() + ")";
    return r;
  }
  std::vector<std::string> late;  // a failure after the audit found faults: one more reason
  if (auto f = failure(first, arena->layout(), calls.size(), case_calls.size(), k.ref.plugin.has_value())) {
    // What this process saw in its own buffers outranks anything the child says or fails to
    // say: with a finding and a call's outputs in hand, the case FAILs for the finding.
    if (first.findings.empty() || first.calls.empty() || f->first == RunResult::Status::unsupported) {
      r.status = f->first;
      r.message = f->second;
      for (const auto& v : first.findings) r.message += "; " + v;
      return r;
    }
    late.push_back(f->second);
  }
  r.reasons = first.findings;
  // The calls in between returned (failure() saw every call's record), and nothing runs in this
  // arena after them until the second process: their outputs are still where they wrote them.
  for (const int b : between_calls) {
    const auto& c = arena->layout().calls[static_cast<std::size_t>(b)];
    const std::vector<uint8_t> out(arena->data(c.out), arena->data(c.out) + arena->bytes(c.out));
    const std::vector<uint8_t> lse(arena->data(c.lse), arena->data(c.lse) + arena->bytes(c.lse));
    std::vector<std::string> never;
    for (const auto& [bytes, vb, what] : {std::tuple{&out, out_bytes, "out"}, std::tuple{&lse, lse_bytes, "lse"}}) {
      const auto [n, at] = arena->unwritten(*bytes, static_cast<std::size_t>(vb));
      if (n) never.push_back(fmt::format("{}: {} elements never written (first flat index {})", what, n, at));
    }
    r.between.push_back({k.info.out_dtype, widen_values(out, out_bytes), widen_values(lse, lse_bytes)});
    r.between_unwritten.push_back(std::move(never));
  }
  const auto& c0 = first.calls.front();
  for (std::size_t i = 1; i < first.calls.size(); ++i) {
    const auto which = fmt::format("call 1 vs call {} of {}", i + 1, first.calls.size());
    if (auto d = first_difference(c0.out, first.calls[i].out, out_bytes, "out", which)) note(r.reasons, *d);
    if (auto d = first_difference(c0.lse, first.calls[i].lse, lse_bytes, "lse", which)) note(r.reasons, *d);
  }
  for (auto& v : late) note(r.reasons, std::move(v));
  if (plan.second_process && late.empty()) {
    const std::vector<int> only_first{case_calls.front()};
    auto second = run_process(s, k, *arena, only_first, plan, tag + "-again");
    if (auto f = failure(second, arena->layout(), 1, 1, k.ref.plugin.has_value())) {
      note(r.reasons, fmt::format("a second, fresh process did not repeat the run: {}", f->second));
    } else {
      for (auto& v : second.findings) note(r.reasons, v + " [second process]");
      const auto which = std::string("first process vs a second, fresh one");
      if (auto d = first_difference(c0.out, second.calls.front().out, out_bytes, "out", which)) note(r.reasons, *d);
      if (auto d = first_difference(c0.lse, second.calls.front().lse, lse_bytes, "lse", which)) note(r.reasons, *d);
    }
  }
  // Every element written: an element still holding this run's secret NaN was never written.
  for (const auto& [bytes, vb, what] : {std::tuple{&c0.out, out_bytes, "out"}, std::tuple{&c0.lse, lse_bytes, "lse"}}) {
    const auto [n, at] = arena->unwritten(*bytes, static_cast<std::size_t>(vb));
    if (n) note(r.reasons, fmt::format("{}: {} elements never written (first flat index {})", what, n, at));
  }
  r.outputs.dtype = k.info.out_dtype;
  r.outputs.out = widen_values(c0.out, out_bytes);
  r.outputs.lse = widen_values(c0.lse, lse_bytes);
  r.run_seconds = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < case_calls.size(); ++i) {
    const double t = first.control.calls[case_calls[i]].seconds;
    if (std::isfinite(t) && t >= 0) r.run_seconds = std::min(r.run_seconds, t);
  }
  if (!std::isfinite(r.run_seconds)) r.run_seconds = 0;
  r.status = RunResult::Status::ran;
  return r;
}

RunResult run_declared(Session& s, const Implementation& k, const AttnInputs& canonical, const CallSchedule& plan,
                       const std::string& tag) {
  const auto kernel_inputs = inputs_to_kernel(k.info.conventions, canonical);  // canonical -> kernel
  const AttnInputs in = kernel_inputs ? kernel_inputs->view() : canonical;
  CallSchedule p = plan;
  if (p.between && kernel_inputs) {
    // The case called in between differs from this one in q alone, which no convention touches.
    const auto q = p.between->q;
    p.between = in;
    p.between->q = q;
  }
  if (!s.isolated(k)) charge_simulated_context("in-process");
  RunResult r = s.isolated(k) ? run_in_children(s, k, in, p, tag) : execute(*k.impl, in, std::max(1, p.calls), p.enforce_caps);
  outputs_to_canonical(k.info.conventions, canonical.shape, r.outputs);  // kernel -> canonical
  for (auto& o : r.between) outputs_to_canonical(k.info.conventions, canonical.shape, o);
  // The cost model reads indices as positions: with another numbering, count on the canonical ones.
  if (kernel_inputs && r.bytes) {
    try {
      const auto cost = mla_cost_model(canonical, k.info.out_dtype);
      r.bytes = cost.bytes;
      r.flops = cost.flops;
    } catch (const std::exception&) {
      // Informational, as in run_in_children.
    }
  }
  return r;
}

void judge_run(reports::CaseResult& r, const Implementation& k, const AttnShape& shape, const RunResult& run,
               const AttentionTruth& truth, const AttentionTruth* between_truth, bool claimed) {
  r.bytes = run.bytes;
  r.flops = run.flops;
  switch (run.status) {
    case RunResult::Status::unsupported:
      if (claimed) {
        // The kernel claimed this shape (capabilities, lengths and its own can_implement all said
        // yes) and then refused it: a broken claim, counted against it. Were it free, a kernel
        // could claim everything and refuse whatever it cannot look up.
        r.verdict = tol::Verdict::fail;
        r.cause = reports::Cause::broken_claim;
        r.reasons.push_back(fmt::format("refused a shape it claims (its capabilities and can_implement accepted it): {}",
                                        run.message));
        return;
      }
      r.verdict = tol::Verdict::unsupported;
      r.reasons.push_back(run.message);
      return;
    case RunResult::Status::error:
      r.verdict = run.host_caused ? tol::Verdict::host_error : tol::Verdict::error;
      r.reasons.push_back(run.message);
      return;
    case RunResult::Status::ran: break;
  }
  r.run_seconds = run.run_seconds;
  // What this process found in the raw buffers comes first: an output never written reads as
  // such, not as the NaN mismatch it also causes.
  for (const auto& why : run.reasons) r.reasons.push_back(why);
  const Declaration declared{k.info.out_dtype, k.info.compute};
  try {
    auto j = judge_attention(shape, declared, run.outputs, truth);
    r.out = std::move(j.out);
    r.lse = std::move(j.lse);
    r.out_vs_unquantized = std::move(j.out_vs_unquantized);
    r.lse_vs_unquantized = std::move(j.lse_vs_unquantized);
    for (auto& why : j.reasons) r.reasons.push_back(std::move(why));
  } catch (const std::exception& e) {
    r.verdict = failure_verdict(e);
    r.reasons.push_back(fmt::format("the results could not be judged: {}", e.what()));
    return;
  }
  // Every call is judged: the other case's calls in between against that case's own truth.
  if (between_truth) {
    for (std::size_t i = 0; i < run.between.size(); ++i) {
      const auto which = fmt::format("the other case called between calls {} and {} (q negated)", i + 1, i + 2);
      for (const auto& why : run.between_unwritten[i]) r.reasons.push_back(fmt::format("{}: {}", which, why));
      if (!run.between_unwritten[i].empty()) break;
      try {
        const auto j = judge_attention(shape, declared, run.between[i], *between_truth);
        for (const auto& why : j.reasons) r.reasons.push_back(fmt::format("{}: {}", which, why));
        if (!j.reasons.empty()) break;  // one wrong call says it; the others add nothing
      } catch (const std::exception& e) {
        r.reasons.push_back(fmt::format("{}: could not be judged: {}", which, e.what()));
        break;
      }
    }
  }
  r.verdict = r.reasons.empty() ? tol::Verdict::pass : tol::Verdict::fail;
}

}  // namespace mla::certify
