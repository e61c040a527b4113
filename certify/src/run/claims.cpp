// THE claim decision (claims.hpp): the declared capabilities and lengths, then a plug-in's own
// can_implement, asked in a child process once per distinct shape.
#include "run/claims.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/certify/protocol.hpp"
#include "isolation/python_door.hpp"
#include "run/session.hpp"

namespace mla::certify {
namespace {

namespace fs = std::filesystem;

std::string question_key(const Implementation& k, const ClaimQuestion& q) {
  if (!q.entry.empty()) return fmt::format("{}|{}|{}", k.report_index, q.entry, q.call.dump());
  return fmt::format("{}|{}|{}|{}", k.report_index, to_json(q.shape).dump(), q.scale_fmt ? to_string(*q.scale_fmt) : "",
                     fmt::join(q.cache_seqlens, ","));
}

// One child asks the plug-in about every question; one answer per question, in order.
// `child_failed`: the child gave no answers (crashed, hung, wrote none): every answer is that error.
std::vector<ClaimAnswer> ask(Session& s, const Implementation& k, const std::vector<ClaimQuestion>& qs,
                             bool* child_failed = nullptr) {
  if (child_failed) *child_failed = false;
  const std::size_t n = s.claim_answers.size();
  const auto query = s.work.path() / fmt::format("claims-{}.query", n);
  const auto result = s.work.path() / fmt::format("claims-{}.result", n);
  const auto log = s.work.path() / fmt::format("claims-{}.log", n);
  std::vector<ClaimAnswer> answers;
  auto all_failed = [&](const std::string& why) {
    if (child_failed) *child_failed = true;
    ClaimAnswer a;
    a.reason = why;
    return std::vector<ClaimAnswer>(qs.size(), a);
  };
  try {
    wire::write(query, encode(qs));
    const std::vector<std::string> io{"--inputs", query.string(), "--result", result.string()};
    std::vector<std::string> argv;
    ChildHooks hooks;
    if (k.ref.python) {
      argv = python_child_argv(*k.ref.python, "claims", io);
      use_door_server(s, *k.ref.python, argv, hooks);
    } else {
      argv = {s.self.string(), "__child", "claims", "--plugin", k.ref.plugin->string()};
      argv.insert(argv.end(), io.begin(), io.end());
    }
    const auto outcome = run_child(argv, std::min(s.options.timeout_s, 60.0), log, hooks);
    std::error_code ec;
    if (!outcome.ok() || !fs::exists(result, ec)) {
      answers = all_failed(fmt::format("can_implement could not be asked: {}{}",
                                       outcome.ok() ? "no answer written" : outcome.describe(),
                                       outcome.stderr_tail.empty() ? "" : "; its last output: " + outcome.stderr_tail));
    } else {
      answers = decode_claim_answers(wire::read(result, kClaimAnswers));
      if (answers.size() != qs.size()) {
        answers = all_failed(fmt::format("can_implement: the child answered {} questions, asked {}", answers.size(), qs.size()));
      }
    }
  } catch (const std::exception& e) {
    answers = all_failed(fmt::format("can_implement could not be asked: {}", e.what()));
  }
  std::error_code ec;
  fs::remove(query, ec);
  fs::remove(result, ec);
  fs::remove(log, ec);
  return answers;
}

ClaimQuestion question(const AttnShape& shape, std::optional<ScaleFmt> scale_fmt, const std::vector<int32_t>& seqlens) {
  return {shape, shape.cache_format == CacheFormat::fp8 ? scale_fmt : std::nullopt, seqlens, {}, {}};
}
// A question as asked: the decode's normalized (no scale format for a bf16 cache), an entry's as given.
ClaimQuestion normalized(const ClaimQuestion& q) {
  return q.entry.empty() ? question(q.shape, q.scale_fmt, q.cache_seqlens) : q;
}

// The kernel's answer to `q`, asked now if it was not before: a Claim, or mla::Error when the
// predicate failed (another return code, a crash): an ERROR of the kernel, never a refusal.
Claim answer(Session& s, const Implementation& k, const ClaimQuestion& q) {
  Claim c;
  const auto key = question_key(k, q);
  if (!s.claim_answers.count(key)) ask_claims(s, k, {q});
  const ClaimAnswer& a = s.claim_answers.at(key);
  switch (a.kind) {
    case ClaimAnswer::Kind::ok: return c;
    case ClaimAnswer::Kind::unsupported:
      c.claimed = false;
      c.by_kernel = true;
      c.reason = fmt::format("{} (the kernel's can_implement)", a.reason);
      return c;
    case ClaimAnswer::Kind::error: break;
  }
  throw Error(a.reason);
}

}  // namespace

std::optional<std::string> claim_refusal(const Implementation& k, const AttnShape& shape,
                                         const std::vector<int32_t>* seqlens) {
  if (auto no = k.impl ? k.impl->check(shape) : check_capabilities(k.info.caps, shape)) return no;
  if (seqlens) {
    if (auto no = check_varlen(k.info.caps, *seqlens)) return no;
  }
  return std::nullopt;
}


void ask_claims(Session& s, const Implementation& k, const std::vector<ClaimQuestion>& questions) {
  if (!k.can_implement) return;
  std::vector<ClaimQuestion> open;
  std::vector<std::string> keys;
  for (const auto& q0 : questions) {
    const auto q = normalized(q0);
    auto key = question_key(k, q);
    if (s.claim_answers.count(key) || std::find(keys.begin(), keys.end(), key) != keys.end()) continue;
    open.push_back(q);
    keys.push_back(std::move(key));
  }
  if (open.empty()) return;
  bool batch_lost = false;
  auto answers = ask(s, k, open, &batch_lost);
  // A child that crashed or hung on one question took the whole batch with it: ask each question
  // in its own child, so only the shapes the predicate really fails on are the kernel's ERRORs.
  if (batch_lost && open.size() > 1) {
    for (std::size_t i = 0; i < open.size(); ++i) answers[i] = ask(s, k, {open[i]}).front();
  }
  for (std::size_t i = 0; i < keys.size(); ++i) s.claim_answers.emplace(keys[i], std::move(answers[i]));
}

Claim claim(Session& s, const Implementation& k, const AttnShape& shape, std::optional<ScaleFmt> scale_fmt,
            const std::vector<int32_t>& seqlens) {
  Claim c;
  if (auto no = claim_refusal(k, shape, &seqlens)) {
    c.claimed = false;
    c.reason = *no;
    return c;
  }
  if (!k.can_implement) return c;
  // A predicate that fails is a defect of the kernel: the case is its ERROR, not a refusal.
  return answer(s, k, question(shape, scale_fmt, seqlens));
}

Claim claim_entry(Session& s, const Implementation& k, const ClaimQuestion& q) {
  if (!k.can_implement || !k.external) return {};
  return answer(s, k, q);
}

}  // namespace mla::certify
