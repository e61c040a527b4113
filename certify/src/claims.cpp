// THE claim decision (claims.hpp): the declared capabilities and lengths, then a plug-in's own
// can_implement, asked in a child process once per distinct shape.
#include "claims.hpp"

#include <fmt/format.h>

#include "mla/certify/protocol.hpp"
#include "python_door.hpp"
#include "session.hpp"

namespace mla::certify {
namespace {

namespace fs = std::filesystem;

std::string question_key(const Implementation& k, const AttnShape& shape, std::optional<ScaleFmt> scale_fmt) {
  return fmt::format("{}|{}|{}", k.report_index, to_json(shape).dump(), scale_fmt ? to_string(*scale_fmt) : "");
}

// One child asks the plug-in about one shape.
ClaimAnswer ask(Session& s, const Implementation& k, const ClaimQuestion& q) {
  const std::size_t n = s.claim_answers.size();
  const auto query = s.work.path() / fmt::format("claims-{}.query", n);
  const auto result = s.work.path() / fmt::format("claims-{}.result", n);
  const auto log = s.work.path() / fmt::format("claims-{}.log", n);
  ClaimAnswer a;
  try {
    wire::write(query, encode(std::vector<ClaimQuestion>{q}));
    const std::vector<std::string> io{"--inputs", query.string(), "--result", result.string()};
    std::vector<std::string> argv;
    if (k.ref.python) {
      argv = python_child_argv(*k.ref.python, "claims", io);
    } else {
      argv = {s.self.string(), "__child", "claims", "--plugin", k.ref.plugin->string()};
      argv.insert(argv.end(), io.begin(), io.end());
    }
    const auto outcome = run_child(argv, std::min(s.options.timeout_s, 60.0), log);
    std::error_code ec;
    if (!outcome.ok() || !fs::exists(result, ec)) {
      a.reason = fmt::format("can_implement could not be asked: {}{}", outcome.ok() ? "no answer written" : outcome.describe(),
                             outcome.stderr_tail.empty() ? "" : "; its last output: " + outcome.stderr_tail);
    } else {
      const auto answers = decode_claim_answers(wire::read(result, kClaimAnswers));
      if (answers.size() == 1) a = answers.front();
      else a.reason = fmt::format("can_implement: the child answered {} questions, asked 1", answers.size());
    }
  } catch (const std::exception& e) {
    a = ClaimAnswer{};
    a.reason = fmt::format("can_implement could not be asked: {}", e.what());
  }
  std::error_code ec;
  fs::remove(query, ec);
  fs::remove(result, ec);
  fs::remove(log, ec);
  return a;
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

tol::Verdict not_claimed_verdict(const Claim&) { return tol::Verdict::not_claimed; }

Claim claim(Session& s, const Implementation& k, const AttnShape& shape, std::optional<ScaleFmt> scale_fmt) {
  Claim c;
  if (auto no = claim_refusal(k, shape, nullptr)) {
    c.claimed = false;
    c.reason = *no;
    return c;
  }
  if (!k.can_implement) return c;
  const auto key = question_key(k, shape, scale_fmt);
  auto it = s.claim_answers.find(key);
  if (it == s.claim_answers.end()) {
    it = s.claim_answers.emplace(key, ask(s, k, {shape, shape.cache_format == CacheFormat::fp8 ? scale_fmt : std::nullopt})).first;
  }
  const ClaimAnswer& a = it->second;
  switch (a.kind) {
    case ClaimAnswer::Kind::ok: return c;
    case ClaimAnswer::Kind::unsupported:
      c.claimed = false;
      c.by_kernel = true;
      c.reason = fmt::format("{} (the kernel's can_implement)", a.reason);
      return c;
    case ClaimAnswer::Kind::error: break;
  }
  // A predicate that fails is a defect of the kernel: the case is its ERROR, not a refusal.
  throw Error(a.reason);
}

}  // namespace mla::certify
