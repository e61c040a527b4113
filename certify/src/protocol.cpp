#include "mla/certify/protocol.hpp"

#include <cstring>

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla::certify {
namespace {

using nlohmann::json;

// Doubles travel as their bits: a decimal round trip must not move a softmax scale or an eps.
uint64_t bits_of(double x) {
  uint64_t b;
  std::memcpy(&b, &x, 8);
  return b;
}
double from_bits(uint64_t b) {
  double x;
  std::memcpy(&x, &b, 8);
  return x;
}

const char* status_name(RunResult::Status s) {
  switch (s) {
    case RunResult::Status::ran: return "ran";
    case RunResult::Status::unsupported: return "unsupported";
    case RunResult::Status::error: return "error";
  }
  return "error";
}

RunResult::Status status_from(const std::string& s) {
  if (s == "ran") return RunResult::Status::ran;
  if (s == "unsupported") return RunResult::Status::unsupported;
  if (s == "error") return RunResult::Status::error;
  throw Error(fmt::format("unknown run status '{}'", s));
}

template <class F>
auto decoding(const wire::Message& m, F&& f) {
  try {
    return f(m.fields());
  } catch (const json::exception& e) {
    throw Error(fmt::format("{} message: malformed field: {}", m.kind(), e.what()));
  }
}

}  // namespace

wire::Message encode(const AttnInputs& in) {
  wire::Message m(kAttentionInputs);
  m.fields() = {{"shape", to_json(in.shape)}, {"softmax_scale_bits", bits_of(in.softmax_scale)}};
  m.put("q", in.q);
  m.put("kv_cache", in.kv_cache);
  m.put("block_table", in.block_table);
  m.put("cache_seqlens", in.cache_seqlens);
  m.put("indices", in.indices);
  return m;
}

AttnBuffers decode_attention_inputs(const wire::Message& m) {
  AttnBuffers b = decoding(m, [](const json& f) {
    AttnBuffers x;
    x.shape = attn_shape_from_json(f.at("shape"));
    x.softmax_scale = from_bits(f.at("softmax_scale_bits").get<uint64_t>());
    return x;
  });
  b.q = m.get<uint16_t>("q");
  b.kv_cache = m.get<uint8_t>("kv_cache");
  b.block_table = m.get<int32_t>("block_table");
  b.cache_seqlens = m.get<int32_t>("cache_seqlens");
  b.indices = m.get<int32_t>("indices");
  return b;
}

wire::Message encode(const RunResult& r) {
  wire::Message m(kAttentionResult);
  m.fields() = {{"status", status_name(r.status)},
                {"message", r.message},
                {"dtype", to_string(r.outputs.dtype)},
                {"run_seconds", r.run_seconds},
                {"bytes", r.bytes ? json(*r.bytes) : json()},
                {"flops", r.flops ? json(*r.flops) : json()},
                {"reasons", r.reasons}};
  m.put("out", r.outputs.out);
  m.put("lse", r.outputs.lse);
  return m;
}

RunResult decode_run_result(const wire::Message& m) {
  RunResult r = decoding(m, [](const json& f) {
    RunResult x;
    x.status = status_from(f.at("status").get<std::string>());
    x.message = f.at("message").get<std::string>();
    x.outputs.dtype = out_dtype_from_string(f.at("dtype").get<std::string>());
    x.run_seconds = f.at("run_seconds").get<double>();
    if (!f.at("bytes").is_null()) x.bytes = f.at("bytes").get<double>();
    if (!f.at("flops").is_null()) x.flops = f.at("flops").get<double>();
    x.reasons = f.at("reasons").get<std::vector<std::string>>();
    return x;
  });
  r.outputs.out = m.get<double>("out");
  r.outputs.lse = m.get<double>("lse");
  return r;
}

wire::Message encode(const plugin::AppendCallInputs& in) {
  wire::Message m(kAppendInputs);
  m.fields() = {{"num_tokens", in.num_tokens},   {"batch", in.batch},           {"max_blocks", in.max_blocks},
                {"page_size", in.page_size},     {"num_blocks", in.num_blocks}, {"max_seq_len", in.max_seq_len},
                {"cache_format", in.cache_format}, {"scale_fmt", in.scale_fmt}, {"fp8_recipe", in.fp8_recipe},
                {"eps_bits", bits_of(in.eps)}};
  m.put("latent", in.latent);
  m.put("k_pe", in.k_pe);
  m.put("kv_norm_weight", in.kv_norm_weight);
  m.put("inv_freq", in.inv_freq);
  m.put("seq_ids", in.seq_ids);
  m.put("positions", in.positions);
  m.put("block_table", in.block_table);
  m.put("kv_cache", in.kv_cache);
  return m;
}

plugin::AppendCallInputs decode_append_inputs(const wire::Message& m) {
  plugin::AppendCallInputs a = decoding(m, [](const json& f) {
    plugin::AppendCallInputs x;
    x.num_tokens = f.at("num_tokens");
    x.batch = f.at("batch");
    x.max_blocks = f.at("max_blocks");
    x.page_size = f.at("page_size");
    x.num_blocks = f.at("num_blocks");
    x.max_seq_len = f.at("max_seq_len");
    x.cache_format = f.at("cache_format");
    x.scale_fmt = f.at("scale_fmt");
    x.fp8_recipe = f.at("fp8_recipe");
    x.eps = from_bits(f.at("eps_bits").get<uint64_t>());
    return x;
  });
  a.latent = m.get<uint16_t>("latent");
  a.k_pe = m.get<uint16_t>("k_pe");
  a.kv_norm_weight = m.get<uint16_t>("kv_norm_weight");
  a.inv_freq = m.get<double>("inv_freq");
  a.seq_ids = m.get<int32_t>("seq_ids");
  a.positions = m.get<int32_t>("positions");
  a.block_table = m.get<int32_t>("block_table");
  a.kv_cache = m.get<uint8_t>("kv_cache");
  return a;
}

wire::Message encode(const AppendRun& r) {
  wire::Message m(kAppendResult);
  m.fields() = {{"ran", r.ran}, {"message", r.message}, {"rc", r.rc}, {"reasons", r.reasons}, {"run_seconds", r.run_seconds}};
  m.put("kv_cache", r.kv_cache);
  return m;
}

AppendRun decode_append_run(const wire::Message& m) {
  AppendRun r = decoding(m, [](const json& f) {
    AppendRun x;
    x.ran = f.at("ran");
    x.message = f.at("message");
    x.rc = f.at("rc");
    x.reasons = f.at("reasons").get<std::vector<std::string>>();
    x.run_seconds = f.at("run_seconds");
    return x;
  });
  r.kv_cache = m.get<uint8_t>("kv_cache");
  return r;
}

wire::Message encode(const PluginDescription& d) {
  wire::Message m(kPluginDescription);
  m.fields() = {{"name", d.info.name},
                {"version", d.version},
                {"description", d.info.description},
                {"backend", d.info.backend},
                {"out_dtype", to_string(d.info.out_dtype)},
                {"abi_version", d.abi_version},
                {"abi_minor", d.abi_minor},
                {"device_memory", d.device_memory},
                {"append_formats", d.append_formats},
                {"append_scale_fmts", d.append_scale_fmts},
                {"append_fp8_recipes", d.append_fp8_recipes},
                {"can_implement", d.can_implement},
                {"capabilities", to_json(d.info.caps)},
                {"conventions", to_json(d.info.conventions)},
                {"compute", d.info.compute ? json{{"operands", to_string(d.info.compute->operands)},
                                                  {"accumulate", to_string(d.info.compute->accumulate)}}
                                           : json()},
                {"unavailable", d.unavailable ? json(*d.unavailable) : json()}};
  return m;
}

PluginDescription decode_plugin_description(const wire::Message& m) {
  return decoding(m, [](const json& f) {
    PluginDescription d;
    d.info.name = f.at("name").get<std::string>();
    d.info.backend = f.at("backend").get<std::string>();
    d.info.description = f.at("description").get<std::string>();
    d.info.role = KernelRole::optimized;
    d.info.out_dtype = out_dtype_from_string(f.at("out_dtype").get<std::string>());
    d.info.caps = capabilities_from_json(f.at("capabilities"));
    d.version = f.at("version").get<std::string>();
    if (!f.at("unavailable").is_null()) d.unavailable = f.at("unavailable").get<std::string>();
    d.abi_version = f.at("abi_version");
    d.abi_minor = f.at("abi_minor");
    d.device_memory = f.at("device_memory");
    d.append_formats = f.at("append_formats");
    d.append_scale_fmts = f.at("append_scale_fmts");
    d.append_fp8_recipes = f.at("append_fp8_recipes");
    d.can_implement = f.at("can_implement");
    d.info.conventions = conventions_from_json(f.at("conventions"));
    if (const auto& c = f.at("compute"); !c.is_null()) {
      d.info.compute = ComputePrecision{out_dtype_from_string(c.at("operands").get<std::string>()),
                                        out_dtype_from_string(c.at("accumulate").get<std::string>())};
    }
    return d;
  });
}

wire::Message encode(const std::vector<ClaimQuestion>& q) {
  wire::Message m(kClaimQuery);
  json shapes = json::array();
  for (const auto& x : q) {
    shapes.push_back({{"shape", to_json(x.shape)},
                      {"scale_fmt", x.scale_fmt ? json(to_string(*x.scale_fmt)) : json()},
                      {"cache_seqlens", x.cache_seqlens}});
  }
  m.fields() = {{"questions", shapes}};
  return m;
}

std::vector<ClaimQuestion> decode_claim_query(const wire::Message& m) {
  return decoding(m, [](const json& f) {
    std::vector<ClaimQuestion> q;
    for (const auto& x : f.at("questions")) {
      ClaimQuestion c;
      c.shape = attn_shape_from_json(x.at("shape"));
      if (!x.at("scale_fmt").is_null()) c.scale_fmt = scale_fmt_from_string(x.at("scale_fmt").get<std::string>());
      c.cache_seqlens = x.at("cache_seqlens").get<std::vector<int32_t>>();
      if (static_cast<int64_t>(c.cache_seqlens.size()) != c.shape.batch) {
        throw Error(fmt::format("a claim question with {} lengths for a batch of {}", c.cache_seqlens.size(), c.shape.batch));
      }
      q.push_back(std::move(c));
    }
    return q;
  });
}

namespace {
const char* claim_kind_name(ClaimAnswer::Kind k) {
  switch (k) {
    case ClaimAnswer::Kind::ok: return "ok";
    case ClaimAnswer::Kind::unsupported: return "unsupported";
    case ClaimAnswer::Kind::error: return "error";
  }
  return "error";
}
ClaimAnswer::Kind claim_kind_from(const std::string& s) {
  for (auto k : {ClaimAnswer::Kind::ok, ClaimAnswer::Kind::unsupported, ClaimAnswer::Kind::error}) {
    if (s == claim_kind_name(k)) return k;
  }
  throw Error(fmt::format("unknown claim answer '{}'", s));
}
}  // namespace

wire::Message encode(const std::vector<ClaimAnswer>& a) {
  wire::Message m(kClaimAnswers);
  json answers = json::array();
  for (const auto& x : a) answers.push_back({{"answer", claim_kind_name(x.kind)}, {"reason", x.reason}});
  m.fields() = {{"answers", answers}};
  return m;
}

std::vector<ClaimAnswer> decode_claim_answers(const wire::Message& m) {
  return decoding(m, [](const json& f) {
    std::vector<ClaimAnswer> a;
    for (const auto& x : f.at("answers")) a.push_back({claim_kind_from(x.at("answer").get<std::string>()), x.at("reason").get<std::string>()});
    return a;
  });
}

}  // namespace mla::certify
