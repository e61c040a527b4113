#include "mla/certify/protocol.hpp"

#include <fmt/format.h>

#include "mla/core/error.hpp"

namespace mla::certify {
namespace {

using nlohmann::json;

template <class F>
auto decoding(const wire::Message& m, F&& f) {
  try {
    return f(m.fields());
  } catch (const json::exception& e) {
    throw Error(fmt::format("{} message: malformed field: {}", m.kind(), e.what()));
  }
}

json compute_json(const std::optional<ComputePrecision>& c) {
  return c ? json{{"operands", to_string(c->operands)}, {"accumulate", to_string(c->accumulate)}} : json();
}
std::optional<ComputePrecision> compute_from_json(const json& c) {
  if (c.is_null()) return std::nullopt;
  return ComputePrecision{out_dtype_from_string(c.at("operands").get<std::string>()),
                          out_dtype_from_string(c.at("accumulate").get<std::string>())};
}

json prefill_json(const std::optional<PrefillKernelInfo>& p) {
  if (!p) return json();
  return {{"name", p->name},
          {"backend", p->backend},
          {"description", p->description},
          {"out_dtype", to_string(p->out_dtype)},
          {"compute", compute_json(p->compute)},
          {"capabilities", to_json(p->caps)},
          {"conventions", to_json(p->conventions)}};
}
std::optional<PrefillKernelInfo> prefill_from_json(const json& j) {
  if (j.is_null()) return std::nullopt;
  PrefillKernelInfo p;
  p.name = j.at("name").get<std::string>();
  p.backend = j.at("backend").get<std::string>();
  p.description = j.at("description").get<std::string>();
  p.role = KernelRole::optimized;
  p.out_dtype = out_dtype_from_string(j.at("out_dtype").get<std::string>());
  p.compute = compute_from_json(j.at("compute"));
  p.caps = prefill_capabilities_from_json(j.at("capabilities"));
  p.conventions = prefill_conventions_from_json(j.at("conventions"));
  return p;
}

json merge_json(const std::optional<MergeKernelInfo>& m) {
  if (!m) return json();
  json dtypes = json::array();
  for (const auto d : m->dtypes) dtypes.push_back(to_string(d));
  return {{"name", m->name},         {"backend", m->backend},       {"description", m->description},
          {"dtypes", dtypes},        {"head_dims", m->head_dims},   {"conventions", to_json(m->conventions)}};
}
std::optional<MergeKernelInfo> merge_from_json(const json& j) {
  if (j.is_null()) return std::nullopt;
  MergeKernelInfo m;
  m.name = j.at("name").get<std::string>();
  m.backend = j.at("backend").get<std::string>();
  m.description = j.at("description").get<std::string>();
  m.role = KernelRole::optimized;
  for (const auto& d : j.at("dtypes")) m.dtypes.push_back(state_dtype_from_string(d.get<std::string>()));
  m.head_dims = j.at("head_dims").get<std::vector<int>>();
  m.conventions = merge_conventions_from_json(j.at("conventions"));
  return m;
}

json topk_json(const std::optional<TopkKernelInfo>& t) {
  if (!t) return json();
  return {{"name", t->name},   {"backend", t->backend}, {"description", t->description},
          {"ks", t->ks},       {"max_n", t->max_n},     {"precision", to_string(t->precision)},
          {"range_all_valid", t->range_all_valid},      {"conventions", to_json(t->conventions)}};
}
std::optional<TopkKernelInfo> topk_from_json(const json& j) {
  if (j.is_null()) return std::nullopt;
  TopkKernelInfo t;
  t.name = j.at("name").get<std::string>();
  t.backend = j.at("backend").get<std::string>();
  t.description = j.at("description").get<std::string>();
  t.role = KernelRole::optimized;
  t.ks = j.at("ks").get<std::vector<int>>();
  t.max_n = j.at("max_n").get<int64_t>();
  t.range_all_valid = j.at("range_all_valid").get<bool>();
  t.precision = logits_precision_from_string(j.at("precision").get<std::string>());
  t.conventions = topk_conventions_from_json(j.at("conventions"));
  return t;
}


json indexer_logits_json(const std::optional<IndexerLogitsKernelInfo>& t) {
  if (!t) return json();
  std::vector<std::string> layouts;
  for (const auto l : t->layouts) layouts.emplace_back(to_string(l));
  return {{"name", t->name},       {"backend", t->backend},         {"description", t->description},
          {"layouts", layouts},    {"next_ns", t->next_ns},         {"heads", t->heads},
          {"block_sizes", t->block_sizes}, {"max_context", t->max_context}};
}
std::optional<IndexerLogitsKernelInfo> indexer_logits_from_json(const json& j) {
  if (j.is_null()) return std::nullopt;
  IndexerLogitsKernelInfo t;
  t.name = j.at("name").get<std::string>();
  t.backend = j.at("backend").get<std::string>();
  t.description = j.at("description").get<std::string>();
  t.role = KernelRole::optimized;
  for (const auto& l : j.at("layouts")) t.layouts.push_back(indexer_logits_layout_from_string(l.get<std::string>()));
  t.next_ns = j.at("next_ns").get<std::vector<int>>();
  t.heads = j.at("heads").get<std::vector<int64_t>>();
  t.block_sizes = j.at("block_sizes").get<std::vector<int64_t>>();
  t.max_context = j.at("max_context").get<int64_t>();
  return t;
}



json indexer_append_json(const std::optional<IndexerAppendKernelInfo>& t) {
  if (!t) return json();
  std::vector<std::string> fmts;
  for (const auto f : t->scale_fmts) fmts.emplace_back(to_string(f));
  return {{"name", t->name},       {"backend", t->backend},         {"description", t->description},
          {"scale_fmts", fmts},    {"block_sizes", t->block_sizes},
          {"fp32_scale_op", to_string(t->conventions.fp32_scale_op)}};
}
std::optional<IndexerAppendKernelInfo> indexer_append_from_json(const json& j) {
  if (j.is_null()) return std::nullopt;
  IndexerAppendKernelInfo t;
  t.name = j.at("name").get<std::string>();
  t.backend = j.at("backend").get<std::string>();
  t.description = j.at("description").get<std::string>();
  t.role = KernelRole::optimized;
  for (const auto& f : j.at("scale_fmts")) t.scale_fmts.push_back(scale_fmt_from_string(f.get<std::string>()));
  t.block_sizes = j.at("block_sizes").get<std::vector<int64_t>>();
  t.conventions.fp32_scale_op = indexer_scale_op_from_string(j.at("fp32_scale_op").get<std::string>());
  return t;
}

json sparse_prefill_json(const std::optional<SparsePrefillKernelInfo>& t) {
  if (!t) return json();
  return {{"name", t->name},           {"backend", t->backend},       {"description", t->description},
          {"out_dtype", to_string(t->out_dtype)}, {"compute", compute_json(t->compute)},
          {"heads", t->heads},         {"topk_multiple", t->topk_multiple}, {"d_qks", t->d_qks},
          {"sink", t->sink},           {"topk_length", t->topk_length}};
}
std::optional<SparsePrefillKernelInfo> sparse_prefill_from_json(const json& j) {
  if (j.is_null()) return std::nullopt;
  SparsePrefillKernelInfo t;
  t.name = j.at("name").get<std::string>();
  t.backend = j.at("backend").get<std::string>();
  t.description = j.at("description").get<std::string>();
  t.role = KernelRole::optimized;
  t.out_dtype = out_dtype_from_string(j.at("out_dtype").get<std::string>());
  t.compute = compute_from_json(j.at("compute"));
  t.heads = j.at("heads").get<std::vector<int>>();
  t.topk_multiple = j.at("topk_multiple").get<int>();
  t.d_qks = j.at("d_qks").get<std::vector<int>>();
  t.sink = j.at("sink").get<bool>();
  t.topk_length = j.at("topk_length").get<bool>();
  return t;
}

}  // namespace

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
                {"entry_can_implement", d.entry_can_implement},
                {"capabilities", to_json(d.info.caps)},
                {"conventions", to_json(d.info.conventions)},
                {"compute", compute_json(d.info.compute)},
                {"decodes", d.decodes},
                {"prefill", prefill_json(d.prefill)},
                {"merge", merge_json(d.merge)},
                {"topk", topk_json(d.topk)},
                {"indexer_logits", indexer_logits_json(d.indexer_logits)},
                {"indexer_append", indexer_append_json(d.indexer_append)},
                {"sparse_prefill", sparse_prefill_json(d.sparse_prefill)},
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
    d.entry_can_implement = f.at("entry_can_implement").get<std::vector<std::string>>();
    d.info.conventions = conventions_from_json(f.at("conventions"));
    d.info.compute = compute_from_json(f.at("compute"));
    d.decodes = f.at("decodes").get<bool>();
    d.prefill = prefill_from_json(f.at("prefill"));
    d.merge = merge_from_json(f.at("merge"));
    d.topk = topk_from_json(f.at("topk"));
    d.indexer_logits = indexer_logits_from_json(f.at("indexer_logits"));
    d.indexer_append = indexer_append_from_json(f.at("indexer_append"));
    d.sparse_prefill = sparse_prefill_from_json(f.at("sparse_prefill"));
    return d;
  });
}

wire::Message encode(const std::vector<ClaimQuestion>& q) {
  wire::Message m(kClaimQuery);
  json shapes = json::array();
  for (const auto& x : q) {
    if (!x.entry.empty()) {
      shapes.push_back({{"entry", x.entry}, {"call", x.call}});
      continue;
    }
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
      if (x.contains("entry")) {
        c.entry = x.at("entry").get<std::string>();
        c.call = x.at("call");
        q.push_back(std::move(c));
        continue;
      }
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
