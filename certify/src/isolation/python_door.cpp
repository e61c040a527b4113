// The Python front door (python_door.hpp): finding the door and a python3 that imports torch,
// reading a Python kernel's declaration in a child and validating it here.
#include "isolation/python_door.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "mla/certify/host_error.hpp"
#include "mla/certify/wire.hpp"
#include "mla/core/sha256.hpp"
#include "mla/core/text.hpp"
#include "mla/plugin/host.hpp"
#include "mla/plugin/mla_plugin.h"
#include "kinds/merge/merge_rows.hpp"
#include "kinds/prefill/prefill_rows.hpp"

#ifndef MLA_SOURCE_DIR
#define MLA_SOURCE_DIR ""
#endif

namespace mla::certify {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kPythonDescription = "python-description";

bool has_child(const fs::path& dir) {
  std::error_code ec;
  return !dir.empty() && fs::is_regular_file(dir / "mla_door" / "child.py", ec);
}

bool executable_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

// Every `name` on PATH, in PATH order, each once.
std::vector<fs::path> on_path(const std::string& name) {
  std::vector<fs::path> found;
  std::set<std::string> seen;
  const char* path = std::getenv("PATH");
  std::string_view rest = path ? path : "";
  while (true) {
    const auto colon = rest.find(':');
    const std::string dir(rest.substr(0, colon));
    const fs::path cand = fs::path(dir.empty() ? "." : dir) / name;
    if (executable_file(cand) && seen.insert(cand.string()).second) found.push_back(cand);
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  return found;
}

// The name a kernel is reported under before its declaration could be read: its module's last
// component (a file's stem) and its ATTR, in the words a name allows; two kernels of one run named
// by the same ATTR in different modules (every example's KERNEL) stay apart.
std::string fallback_name(const std::string& where, const std::string& attr) {
  const std::string module = where.size() > 3 && where.compare(where.size() - 3, 3, ".py") == 0
                                 ? fs::path(where).stem().string()
                                 : where.substr(where.rfind('.') == std::string::npos ? 0 : where.rfind('.') + 1);
  std::string n = "python_";
  for (const char c : module + "_" + attr) {
    n += (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ? c : (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : '_';
  }
  return n;
}

// The field `key` of `j` (named `where` in messages), of JSON type `type`.
const json& field(const json& j, const std::string& where, const char* key, json::value_t type, const char* what) {
  if (!j.is_object() || !j.contains(key)) throw Error(fmt::format("declaration has no field '{}{}'", where, key));
  const json& v = j.at(key);
  const bool ok = type == json::value_t::number_integer ? (v.is_number_integer()) : v.type() == type;
  if (!ok) throw Error(fmt::format("declaration field '{}{}' is {}, expected {}", where, key, v.dump(), what));
  return v;
}
std::string string_field(const json& j, const std::string& where, const char* key) {
  return field(j, where, key, json::value_t::string, "a string").get<std::string>();
}
int int_field(const json& j, const std::string& where, const char* key) {
  const json& v = field(j, where, key, json::value_t::number_integer, "an integer");
  const auto x = v.get<int64_t>();
  if (x < -(int64_t{1} << 31) || x >= (int64_t{1} << 31)) {
    throw Error(fmt::format("declaration field '{}{}' = {} is out of range", where, key, x));
  }
  return static_cast<int>(x);
}
bool bool_field(const json& j, const std::string& where, const char* key) {
  return field(j, where, key, json::value_t::boolean, "true or false").get<bool>();
}
// A word of `known`, the field named in the error otherwise.
template <class Parse>
auto word_field(const json& j, const std::string& where, const char* key, const std::vector<std::string>& known, Parse parse) {
  const auto w = string_field(j, where, key);
  if (std::find(known.begin(), known.end(), w) == known.end()) {
    throw Error(fmt::format("declaration field '{}{}' is '{}', not one of {}", where, key, printable(w), fmt::join(known, ", ")));
  }
  return parse(w);
}

// An entry's C ABI validation (plugin::*_info_from) on a Python declaration: its refusal worded
// as the declaration's, so both doors refuse the same entry with the same words.
template <class F>
auto by_the_c_abis_rules(F validate) {
  try {
    return validate();
  } catch (const plugin::PluginError& ex) {
    throw Error(fmt::format("declaration: {}", ex.what()));
  }
}

// A Python kernel's prefill entry, in the words of mla_door.Prefill, checked field by field and
// then by the C ABI's rules for a prefill entry (one rule set for both doors).
PrefillKernelInfo validate_python_prefill(const json& p) {
  const std::string w = "prefill.";
  mla_plugin_prefill_entry e{};
  e.struct_size = sizeof e;
  const std::string name = string_field(p, w, "name"), description = string_field(p, w, "description");
  e.name = name.c_str();
  e.description = description.c_str();
  e.out_dtype = word_field(p, w, "out_dtype", {"f32", "bf16"},
                           [](const std::string& x) { return x == "bf16" ? MLA_PLUGIN_OUT_BF16 : MLA_PLUGIN_OUT_F32; });
  const json& caps = field(p, w, "caps", json::value_t::object, "an object");
  const std::string c = w + "caps.";
  e.min_heads = int_field(caps, c, "min_heads");
  e.max_heads = int_field(caps, c, "max_heads");
  e.calls = (bool_field(caps, c, "causal") ? MLA_PLUGIN_PREFILL_CAUSAL : 0u) |
            (bool_field(caps, c, "non_causal") ? MLA_PLUGIN_PREFILL_NON_CAUSAL : 0u) |
            (bool_field(caps, c, "varlen") ? MLA_PLUGIN_PREFILL_VARLEN : 0u);
  const json& tokens = field(caps, c, "max_total_tokens", json::value_t::number_integer, "an integer");
  e.max_total_tokens = tokens.get<int64_t>();
  const json& conv = field(p, w, "conventions", json::value_t::object, "an object");
  const std::string cv = w + "conventions.";
  const auto one_of = [&](const char* key, const std::string& zero, const std::string& one) {
    return word_field(conv, cv, key, {zero, one}, [&](const std::string& x) { return x == one ? 1u : 0u; });
  };
  e.lse_base = one_of("lse_base", "e", "2");
  e.lse_layout = one_of("lse_layout", "[b,h,s_q]", "[b,s_q,h]");
  e.empty_row_lse = one_of("empty_row_lse", "+inf", "-inf");
  e.v_padded = bool_field(conv, cv, "v_padded") ? 1u : 0u;
  e.causal_alignment = one_of("causal_alignment", "bottom_right", "top_left");
  if (!p.contains("precision")) throw Error("declaration has no field 'prefill.precision' (null: the class out_dtype implies)");
  if (!p.at("precision").is_null()) {
    const json& pr = field(p, w, "precision", json::value_t::object, "an object or null");
    const auto abi = [](const std::string& x) {
      return x == "f64" ? MLA_PLUGIN_PRECISION_FP64 : x == "f32" ? MLA_PLUGIN_PRECISION_FP32 : MLA_PLUGIN_PRECISION_BF16;
    };
    e.operand_precision = word_field(pr, w + "precision.", "operands", {"f64", "f32", "bf16"}, abi);
    e.accum_precision = word_field(pr, w + "precision.", "accumulate", {"f64", "f32", "bf16"}, abi);
  }
  e.prefill = [](const mla_plugin_prefill_args*, char*, size_t) -> int32_t { return MLA_PLUGIN_ERROR; };  // never called
  return by_the_c_abis_rules([&] { return plugin::prefill_info_from(e); });
}

// A Python kernel's merge entry, in the words of mla_door.Merge, then the C ABI's rules for a
// merge entry.
MergeKernelInfo validate_python_merge(const json& m) {
  const std::string w = "merge.";
  mla_plugin_merge_entry e{};
  e.struct_size = sizeof e;
  const std::string name = string_field(m, w, "name"), description = string_field(m, w, "description");
  e.name = name.c_str();
  e.description = description.c_str();
  const json& dtypes = field(m, w, "dtypes", json::value_t::array, "a list");
  for (const auto& x : dtypes) {
    if (!x.is_string() || (x != "bf16" && x != "f16" && x != "f32")) {
      throw Error(fmt::format("declaration field 'merge.dtypes' holds {}, not one of bf16, f16, f32", x.dump()));
    }
    e.dtypes |= x == "bf16" ? MLA_PLUGIN_STATE_BF16 : x == "f16" ? MLA_PLUGIN_STATE_F16 : MLA_PLUGIN_STATE_F32;
  }
  const json& dims = field(m, w, "head_dims", json::value_t::array, "a list");
  if (dims.size() > MLA_PLUGIN_MAX_HEAD_DIMS) {
    throw Error(fmt::format("declaration field 'merge.head_dims' has {} entries, at most {}", dims.size(),
                            MLA_PLUGIN_MAX_HEAD_DIMS));
  }
  e.num_head_dims = static_cast<int32_t>(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (!dims[i].is_number_integer() || dims[i].get<int64_t>() < 1 || dims[i].get<int64_t>() > 65536) {
      throw Error(fmt::format("declaration field 'merge.head_dims[{}]' = {} is not a positive head dim", i, dims[i].dump()));
    }
    e.head_dims[i] = dims[i].get<int32_t>();
  }
  const json& conv = field(m, w, "conventions", json::value_t::object, "an object");
  const std::string cv = w + "conventions.";
  const auto one_of = [&](const char* key, const std::string& zero, const std::string& one) {
    return word_field(conv, cv, key, {zero, one}, [&](const std::string& x) { return x == one ? 1u : 0u; });
  };
  e.lse_base = one_of("lse_base", "e", "2");
  e.lse_layout = one_of("lse_layout", "[h,n]", "[n,h]");
  e.both_empty_lse = one_of("both_empty_lse", "-inf", "+inf");
  e.merge = [](const mla_plugin_merge_args*, char*, size_t) -> int32_t { return MLA_PLUGIN_ERROR; };  // never called
  return by_the_c_abis_rules([&] { return plugin::merge_info_from(e); });
}

// A list of positive integers of a declaration (at most `most`), into `dst` / `count`.
template <class T>
void positive_list(const json& t, const std::string& w, const char* key, std::size_t most, T* dst, int32_t& count,
                   const char* noun = "a positive integer") {
  const json& v = field(t, w, key, json::value_t::array, "a list");
  if (v.size() > most) {
    throw Error(fmt::format("declaration field '{}{}' has {} entries, at most {}", w, key, v.size(), most));
  }
  count = static_cast<int32_t>(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_integer() || v[i].get<int64_t>() < 1 || v[i].get<int64_t>() > (int64_t{1} << 30)) {
      throw Error(fmt::format("declaration field '{}{}[{}]' = {} is not {}", w, key, i, v[i].dump(), noun));
    }
    dst[i] = static_cast<T>(v[i].get<int64_t>());
  }
}

// A Python kernel's indexer logits entry, in the words of mla_door.IndexerLogits, then the C ABI's
// rules for an indexer logits entry.
IndexerLogitsKernelInfo validate_python_indexer_logits(const json& t) {
  const std::string w = "indexer_logits.";
  mla_plugin_indexer_logits_entry e{};
  e.struct_size = sizeof e;
  const std::string name = string_field(t, w, "name"), description = string_field(t, w, "description");
  e.name = name.c_str();
  e.description = description.c_str();
  const json& layouts = field(t, w, "layouts", json::value_t::array, "a list");
  for (const auto& l : layouts) {
    if (!l.is_string() || (l != "paged" && l != "ragged")) {
      throw Error(fmt::format("declaration field '{}layouts' holds {}, not \"paged\" or \"ragged\"", w, l.dump()));
    }
    e.layouts |= l == "paged" ? MLA_PLUGIN_INDEXER_PAGED : MLA_PLUGIN_INDEXER_RAGGED;
  }
  const json& next_ns = field(t, w, "next_ns", json::value_t::array, "a list");
  for (const auto& n : next_ns) {
    if (!n.is_number_integer() || (n != 1 && n != 2)) {
      throw Error(fmt::format("declaration field '{}next_ns' holds {}, not 1 or 2", w, n.dump()));
    }
    e.next_ns |= n == 1 ? MLA_PLUGIN_NEXT_N_1 : MLA_PLUGIN_NEXT_N_2;
  }
  positive_list(t, w, "heads", MLA_PLUGIN_MAX_HEAD_COUNTS, e.heads, e.num_heads);
  positive_list(t, w, "block_sizes", MLA_PLUGIN_MAX_PAGE_SIZES, e.block_sizes, e.num_block_sizes);
  e.max_context = field(t, w, "max_context", json::value_t::number_integer, "an integer").get<int64_t>();
  e.indexer_logits = [](const mla_plugin_indexer_logits_args*, char*, size_t) -> int32_t {
    return MLA_PLUGIN_ERROR;  // never called
  };
  return by_the_c_abis_rules([&] { return plugin::indexer_logits_info_from(e); });
}

// A Python kernel's indexer append entry, in the words of mla_door.IndexerAppend, then the C ABI's
// rules for an indexer append entry.
IndexerAppendKernelInfo validate_python_indexer_append(const json& t) {
  const std::string w = "indexer_append.";
  mla_plugin_indexer_append_entry e{};
  e.struct_size = sizeof e;
  const std::string name = string_field(t, w, "name"), description = string_field(t, w, "description");
  e.name = name.c_str();
  e.description = description.c_str();
  for (const auto& f : field(t, w, "scale_fmts", json::value_t::array, "a list")) {
    if (!f.is_string() || (f != "fp32" && f != "ue8m0")) {
      throw Error(fmt::format("declaration field '{}scale_fmts' holds {}, not \"fp32\" or \"ue8m0\"", w, f.dump()));
    }
    e.scale_fmts |= f == "ue8m0" ? MLA_PLUGIN_SCALE_UE8M0 : MLA_PLUGIN_SCALE_FP32;
  }
  e.fp32_scale_op = word_field(t, w, "fp32_scale_op", {"divide", "times_reciprocal"},
                               [](const std::string& x) { return x == "times_reciprocal" ? 1u : 0u; });
  positive_list(t, w, "block_sizes", MLA_PLUGIN_MAX_PAGE_SIZES, e.block_sizes, e.num_block_sizes);
  e.indexer_append = [](const mla_plugin_indexer_append_args*, char*, size_t) -> int32_t {
    return MLA_PLUGIN_ERROR;  // never called
  };
  return by_the_c_abis_rules([&] { return plugin::indexer_append_info_from(e); });
}

// A Python kernel's sparse prefill entry, in the words of mla_door.SparsePrefill, then the C ABI's
// rules for a sparse prefill entry.
SparsePrefillKernelInfo validate_python_sparse_prefill(const json& t) {
  const std::string w = "sparse_prefill.";
  mla_plugin_sparse_prefill_entry e{};
  e.struct_size = sizeof e;
  const std::string name = string_field(t, w, "name"), description = string_field(t, w, "description");
  e.name = name.c_str();
  e.description = description.c_str();
  e.out_dtype = word_field(t, w, "out_dtype", {"f32", "bf16"},
                           [](const std::string& x) { return x == "bf16" ? MLA_PLUGIN_OUT_BF16 : MLA_PLUGIN_OUT_F32; });
  if (!t.contains("precision")) throw Error("declaration has no field 'sparse_prefill.precision' (null: the class out_dtype implies)");
  if (!t.at("precision").is_null()) {
    const json& p = field(t, w, "precision", json::value_t::object, "an object or null");
    const auto code = [](const std::string& x) {
      return x == "f64" ? MLA_PLUGIN_PRECISION_FP64 : x == "f32" ? MLA_PLUGIN_PRECISION_FP32 : MLA_PLUGIN_PRECISION_BF16;
    };
    e.operand_precision = word_field(p, w + "precision.", "operands", {"f64", "f32", "bf16"}, code);
    e.accum_precision = word_field(p, w + "precision.", "accumulate", {"f64", "f32", "bf16"}, code);
  }
  positive_list(t, w, "heads", MLA_PLUGIN_MAX_HEAD_COUNTS, e.heads, e.num_heads);
  e.topk_multiple = static_cast<int32_t>(field(t, w, "topk_multiple", json::value_t::number_integer, "an integer").get<int64_t>());
  for (const auto& d : field(t, w, "d_qks", json::value_t::array, "a list")) {
    if (!d.is_number_integer() || (d != 576 && d != 512)) {
      throw Error(fmt::format("declaration field '{}d_qks' holds {}, not 576 or 512", w, d.dump()));
    }
    e.d_qks |= d == 576 ? MLA_PLUGIN_SPARSE_DQK_576 : MLA_PLUGIN_SPARSE_DQK_512;
  }
  e.takes_sink = bool_field(t, w, "sink") ? 1u : 0u;
  e.takes_topk_length = bool_field(t, w, "topk_length") ? 1u : 0u;
  e.sparse_prefill = [](const mla_plugin_sparse_prefill_args*, char*, size_t) -> int32_t {
    return MLA_PLUGIN_ERROR;  // never called
  };
  return by_the_c_abis_rules([&] { return plugin::sparse_prefill_info_from(e); });
}

// A Python kernel's top-k entry, in the words of mla_door.Topk, then the C ABI's rules for a top-k
// entry.
TopkKernelInfo validate_python_topk(const json& t) {
  const std::string w = "topk.";
  mla_plugin_topk_entry e{};
  e.struct_size = sizeof e;
  const std::string name = string_field(t, w, "name"), description = string_field(t, w, "description");
  e.name = name.c_str();
  e.description = description.c_str();
  positive_list(t, w, "ks", MLA_PLUGIN_MAX_KS, e.ks, e.num_ks, "a positive k");
  e.max_n = field(t, w, "max_n", json::value_t::number_integer, "an integer").get<int64_t>();
  e.index_base = word_field(t, w, "index_base", {"absolute", "relative"},
                            [](const std::string& x) { return x == "relative" ? 1u : 0u; });
  e.sorted = bool_field(t, w, "sorted") ? 1u : 0u;
  e.range_all_valid = bool_field(t, w, "range_all_valid") ? 1u : 0u;
  e.logits_precision = word_field(t, w, "precision", {"f32", "bf16"},
                                  [](const std::string& x) { return x == "bf16" ? 1u : 0u; });
  e.topk = [](const mla_plugin_topk_args*, char*, size_t) -> int32_t { return MLA_PLUGIN_ERROR; };  // never called
  return by_the_c_abis_rules([&] { return plugin::topk_info_from(e); });
}

}  // namespace

fs::path door_dir(const fs::path& self) {
  std::vector<std::string> tried;
  if (const char* env = std::getenv("MLA_DOOR_PATH"); env && *env) {
    if (has_child(env)) return fs::absolute(env).lexically_normal();
    throw UsageError(fmt::format("MLA_DOOR_PATH={} holds no mla_door/child.py", env));
  }
  // The bundle keeps bin/mla and python/ side by side (suites/device/make_bundle.sh).
  for (const fs::path& dir : {(self.parent_path() / ".." / "python").lexically_normal(),
                              fs::path(MLA_SOURCE_DIR) / "kernels" / "python"}) {
    if (has_child(dir)) return fs::absolute(dir).lexically_normal();
    tried.push_back(dir.string());
  }
  throw UsageError(fmt::format("the Python door (mla_door/child.py) is in none of {}; set MLA_DOOR_PATH to the folder "
                               "holding mla_door",
                               fmt::join(tried, ", ")));
}

std::vector<std::string> python_child_argv(const PythonRef& p, const std::string& verb,
                                           const std::vector<std::string>& args) {
  // -s: the user's site directory is not added behind their back; -B: no .pyc written next to
  // the user's code by a certification.
  std::vector<std::string> argv{p.exe.string(), "-s", "-B", p.child.string(), verb, "--spec", p.spec};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

void use_door_server(Session& s, const PythonRef& p, const std::vector<std::string>& argv, ChildHooks& hooks) {
  if (const char* off = std::getenv("MLA_DOOR_SERVER"); off && std::string_view(off) == "0") return;
  const std::string key = p.exe.string() + "\n" + p.child.string();
  auto it = s.door_servers.find(key);
  if (it == s.door_servers.end()) {
    std::string why;
    auto server = ForkServer::start({p.exe.string(), "-s", "-B", p.child.string(), "serve"},
                                    std::min(s.options.timeout_s, 120.0),
                                    s.work.path() / fmt::format("door-server-{}.log", s.door_servers.size()), why);
    if (!server) {
      s.progress << fmt::format("python door: no fork server for {} ({}); each child imports torch itself\n",
                                p.exe.string(), why);
    }
    it = s.door_servers.emplace(key, std::move(server)).first;
  }
  if (it->second && !it->second->serving()) {
    // It failed a request (killed, perhaps by a kernel): children start the usual way, said once.
    s.progress << fmt::format("python door: the fork server for {} stopped ({}); each child imports torch itself from now "
                              "on\n",
                              p.exe.string(), it->second->stop_reason());
    it->second.reset();
  }
  if (!it->second) return;
  // The server runs child.py already: the child's arguments are what follows it in argv.
  const auto at = std::find(argv.begin(), argv.end(), p.child.string());
  if (at == argv.end()) return;
  hooks.server = it->second.get();
  hooks.server_args.assign(at + 1, argv.end());
}

PythonDeclaration validate_python_declaration(const json& d) {
  PythonDeclaration out;
  KernelInfo& k = out.info;
  k.role = KernelRole::optimized;
  k.name = string_field(d, "", "name");
  if (!plugin::valid_kernel_name(k.name)) {
    throw Error(fmt::format("declaration field 'name' is '{}', not [a-z0-9_]+", printable(k.name)));
  }
  out.version = string_field(d, "", "version");
  if (out.version.empty()) throw Error("declaration field 'version' is empty");
  k.description = string_field(d, "", "description");
  k.backend = word_field(d, "", "backend", {"cpu", "cuda"}, [](const std::string& w) { return w; });
  k.out_dtype = word_field(d, "", "out_dtype", {"f32", "bf16"}, [](const std::string& w) { return out_dtype_from_string(w); });
  const json& caps = field(d, "", "caps", json::value_t::object, "an object");
  const std::string c = "caps.";
  const json& formats = field(caps, c, "cache_formats", json::value_t::array, "a list");
  if (formats.empty()) throw Error("declaration field 'caps.cache_formats' is empty");
  for (const auto& f : formats) {
    if (!f.is_string() || (f != "bf16" && f != "fp8")) {
      throw Error(fmt::format("declaration field 'caps.cache_formats' holds {}, not one of bf16, fp8", f.dump()));
    }
    const auto fmt_ = cache_format_from_string(f.get<std::string>());
    if (std::find(k.caps.cache_formats.begin(), k.caps.cache_formats.end(), fmt_) == k.caps.cache_formats.end()) {
      k.caps.cache_formats.push_back(fmt_);
    }
  }
  k.caps.min_heads = int_field(caps, c, "min_heads");
  k.caps.max_heads = int_field(caps, c, "max_heads");
  if (k.caps.min_heads < 1 || k.caps.max_heads < k.caps.min_heads) {
    throw Error(fmt::format("declaration field 'caps.heads' range [{}, {}] is empty or below 1", k.caps.min_heads,
                            k.caps.max_heads));
  }
  k.caps.min_s_q = int_field(caps, c, "min_s_q");
  k.caps.max_s_q = int_field(caps, c, "max_s_q");
  if (k.caps.min_s_q < 1 || k.caps.max_s_q < k.caps.min_s_q) {
    throw Error(fmt::format("declaration field 'caps.s_q' range [{}, {}] is empty or below 1", k.caps.min_s_q,
                            k.caps.max_s_q));
  }
  const json& pages = field(caps, c, "page_sizes", json::value_t::array, "a list");
  if (pages.size() > MLA_PLUGIN_MAX_PAGE_SIZES) {
    throw Error(fmt::format("declaration field 'caps.page_sizes' has {} entries, at most {}", pages.size(),
                            MLA_PLUGIN_MAX_PAGE_SIZES));
  }
  for (std::size_t i = 0; i < pages.size(); ++i) {
    if (!pages[i].is_number_integer() || pages[i].get<int64_t>() < 1 || pages[i].get<int64_t>() > (1 << 20)) {
      throw Error(fmt::format("declaration field 'caps.page_sizes[{}]' = {} is not a positive page size", i, pages[i].dump()));
    }
    k.caps.page_sizes.push_back(pages[i].get<int>());
  }
  k.caps.dense = bool_field(caps, c, "dense");
  k.caps.sparse = bool_field(caps, c, "sparse");
  k.caps.varlen = bool_field(caps, c, "varlen");
  if (!k.caps.dense && !k.caps.sparse) throw Error("declaration fields 'caps.dense' and 'caps.sparse' are both false");
  const json& conv = field(d, "", "conventions", json::value_t::object, "an object");
  const std::string cv = "conventions.";
  k.conventions.lse_base = word_field(conv, cv, "lse_base", {"e", "2"}, [](const std::string& w) { return lse_base_from_string(w); });
  k.conventions.lse_layout = word_field(conv, cv, "lse_layout", {"[b,h,s_q]", "[b,s_q,h]"},
                                        [](const std::string& w) { return lse_layout_from_string(w); });
  k.conventions.empty_row_lse = word_field(conv, cv, "empty_row_lse", {"+inf", "-inf"},
                                           [](const std::string& w) { return empty_row_lse_from_string(w); });
  k.conventions.indices = word_field(conv, cv, "indices", {"positions", "global_slots"},
                                     [](const std::string& w) { return index_numbering_from_string(w); });
  if (!d.contains("precision")) throw Error("declaration has no field 'precision' (null: the class out_dtype implies)");
  if (!d.at("precision").is_null()) {
    const json& p = field(d, "", "precision", json::value_t::object, "an object or null");
    const auto dtype = [](const std::string& w) { return out_dtype_from_string(w); };
    ComputePrecision cp{word_field(p, "precision.", "operands", {"f64", "f32", "bf16"}, dtype),
                        word_field(p, "precision.", "accumulate", {"f64", "f32", "bf16"}, dtype)};
    const PrecisionClass pc{cp.operands, cp.accumulate, k.out_dtype};
    if (auto why = unjudgeable(pc)) throw Error(fmt::format("declaration field 'precision': class {}", *why));
    k.compute = cp;
  }
  out.can_implement = bool_field(d, "", "can_implement");
  // A declaration without these two (a door of an earlier version) decodes and has no prefill.
  if (d.contains("decode")) out.decodes = bool_field(d, "", "decode");
  if (d.contains("prefill") && !d.at("prefill").is_null()) {
    out.prefill = validate_python_prefill(field(d, "", "prefill", json::value_t::object, "an object or null"));
    out.prefill->backend = k.backend;
  }
  if (d.contains("merge") && !d.at("merge").is_null()) {
    out.merge = validate_python_merge(field(d, "", "merge", json::value_t::object, "an object or null"));
    out.merge->backend = k.backend;
  }
  if (d.contains("topk") && !d.at("topk").is_null()) {
    out.topk = validate_python_topk(field(d, "", "topk", json::value_t::object, "an object or null"));
    out.topk->backend = k.backend;
  }
  if (d.contains("indexer_logits") && !d.at("indexer_logits").is_null()) {
    out.indexer_logits =
        validate_python_indexer_logits(field(d, "", "indexer_logits", json::value_t::object, "an object or null"));
    out.indexer_logits->backend = k.backend;
  }
  if (d.contains("sparse_prefill") && !d.at("sparse_prefill").is_null()) {
    out.sparse_prefill =
        validate_python_sparse_prefill(field(d, "", "sparse_prefill", json::value_t::object, "an object or null"));
    out.sparse_prefill->backend = k.backend;
  }
  if (d.contains("indexer_append") && !d.at("indexer_append").is_null()) {
    out.indexer_append =
        validate_python_indexer_append(field(d, "", "indexer_append", json::value_t::object, "an object or null"));
    out.indexer_append->backend = k.backend;
  }
  // The entries with a can_implement of their own (a door of an earlier version declares none).
  for (const char* entry :
       {kEntryPrefill, kEntryMerge, kEntryTopk, kEntryIndexerLogits, kEntryIndexerAppend, kEntrySparsePrefill}) {
    if (!d.contains(entry) || d.at(entry).is_null() || !d.at(entry).contains("can_implement")) continue;
    if (bool_field(d.at(entry), fmt::format("{}.", entry), "can_implement")) out.entry_can_implement.push_back(entry);
  }
  // Every implementation the kernel gives has its own name.
  std::vector<std::string> names;
  if (out.decodes) names.push_back(k.name);
  for (const auto& [entry, name] : {std::pair{"prefill", out.prefill ? out.prefill->name : std::string()},
                                    std::pair{"merge", out.merge ? out.merge->name : std::string()},
                                    std::pair{"topk", out.topk ? out.topk->name : std::string()},
                                    std::pair{"indexer_logits", out.indexer_logits ? out.indexer_logits->name : std::string()},
                                    std::pair{"indexer_append", out.indexer_append ? out.indexer_append->name : std::string()},
                                    std::pair{"sparse_prefill", out.sparse_prefill ? out.sparse_prefill->name : std::string()}}) {
    if (name.empty()) continue;
    if (std::find(names.begin(), names.end(), name) != names.end()) {
      throw Error(fmt::format("declaration field '{}.name' is '{}', another entry's: each implementation has its own",
                              entry, name));
    }
    names.push_back(name);
  }
  if (!out.decodes && !out.prefill && !out.merge && !out.topk && !out.indexer_logits && !out.indexer_append &&
      !out.sparse_prefill) {
    throw Error(
        "declaration has no decode (\"decode\": false) and no prefill, merge, topk, indexer_logits, indexer_append or "
        "sparse_prefill");
  }
  return out;
}

std::vector<std::pair<Implementation, reports::KernelReport>> describe_python(Session& s, const std::string& spec,
                                                                             std::size_t i) {
  const auto colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size()) {
    throw UsageError(fmt::format("--python '{}': expected module.path:ATTR or path/to/file.py:ATTR (the name after ':' "
                                 "is a Kernel or a zero-argument callable returning one)",
                                 printable(spec)));
  }
  std::string where = spec.substr(0, colon);
  const std::string attr = spec.substr(colon + 1);
  std::optional<fs::path> file;
  if (where.size() > 3 && where.compare(where.size() - 3, 3, ".py") == 0) {
    std::error_code ec;
    file = fs::absolute(where, ec).lexically_normal();
    if (!fs::is_regular_file(*file, ec)) {
      throw UsageError(fmt::format("--python '{}': {} is not a readable file", printable(spec), printable(where)));
    }
    where = file->string();
  }
  PythonRef ref;
  ref.spec = where + ":" + attr;  // a file made absolute: children run wherever they run
  ref.child = door_dir(s.self) / "mla_door" / "child.py";

  std::vector<fs::path> candidates;
  if (const auto& exe = s.options.python_exe; !exe.empty()) {
    // A bare name (`--python-exe python3.12`) is looked up on PATH, as a shell would.
    const auto named = exe.has_parent_path() ? std::vector<fs::path>{} : on_path(exe.string());
    candidates.push_back(named.empty() ? exe : named.front());
    if (!executable_file(candidates.front())) {
      throw UsageError(fmt::format("--python-exe {} is not an executable file{}", exe.string(),
                                   exe.has_parent_path() ? "" : " nor a command on PATH"));
    }
  } else {
    candidates = on_path("python3");
  }
  std::vector<std::string> tried;
  std::optional<wire::Message> described;
  for (std::size_t c = 0; c < candidates.size() && !described; ++c) {
    const auto& exe = candidates[c];
    if (!executable_file(exe)) {
      tried.push_back(fmt::format("{} (not an executable file)", exe.string()));
      continue;
    }
    ref.exe = exe;
    const auto result = s.work.path() / fmt::format("python-{}-{}.msg", i, c);
    const auto log = s.work.path() / fmt::format("python-{}-{}.log", i, c);
    // Through the door's fork server when it starts: the import of torch it pays once serves this
    // description and every later child of this Python (claims, calls, a benchmark's children).
    const auto argv = python_child_argv(ref, "describe", {"--result", result.string()});
    ChildHooks hooks;
    use_door_server(s, ref, argv, hooks);
    const auto outcome = run_child(argv, std::min(s.options.timeout_s, 120.0), log, hooks);
    std::error_code ec;
    if (const auto host = host_cause(outcome)) {
      throw HostFailure(fmt::format("--python {} could not be described: {}", printable(spec), *host));
    }
    if (!outcome.ok() || !fs::exists(result, ec)) {
      tried.push_back(fmt::format("{} ({}{})", exe.string(), outcome.ok() ? "wrote no answer" : outcome.describe(),
                                  outcome.stderr_tail.empty() ? "" : ": " + outcome.stderr_tail));
      continue;
    }
    wire::Message m;
    try {
      m = wire::read(result, kPythonDescription);
    } catch (const Error& e) {
      throw UsageError(fmt::format("--python {}: malformed description from {}: {}", printable(spec), exe.string(), e.what()));
    }
    fs::remove(result, ec);
    if (m.fields().value("torch", json()).is_null()) {
      tried.push_back(fmt::format("{} (Python {}: cannot import torch: {})", exe.string(),
                                  m.fields().value("python", std::string("?")), m.fields().value("why", std::string("?"))));
      continue;
    }
    described = std::move(m);
  }

  Implementation e;
  e.external = true;  // an untrusted kernel: isolated, drawn calls, a case between them, a second process
  reports::KernelReport r;
  r.origin = {{"kind", "python"}, {"spec", ref.spec}, {"door", ref.child.parent_path().parent_path().string()}};
  if (!described) {
    // Without torch nothing of the user's code can run: every case is SKIPPED, saying what was tried.
    e.info.name = fallback_name(spec.substr(0, colon), attr);
    e.info.backend = "cpu";
    e.info.out_dtype = OutDType::f32;
    e.info.description = fmt::format("Python kernel {}", ref.spec);
    e.info.caps.cache_formats = {CacheFormat::bf16, CacheFormat::fp8};
    e.info.caps.sparse = true;
    e.unavailable = candidates.empty()
                        ? std::string("no python3 on PATH (give one that imports torch with --python-exe)")
                        : fmt::format("no python3 that imports torch: tried {}", fmt::join(tried, "; "));
    r.version = "unknown (not imported)";
    r.origin["python"] = nullptr;
    r.origin["capabilities"] = to_json(e.info.caps);
    e.ref.python = ref;
    std::vector<std::pair<Implementation, reports::KernelReport>> one;
    one.emplace_back(std::move(e), std::move(r));
    return one;
  }
  const json& f = described->fields();
  const auto text = [&](const char* key) { return f.contains(key) && f.at(key).is_string() ? f.at(key).get<std::string>() : std::string(); };
  if (f.contains("error") && f.at("error").is_string()) {
    throw UsageError(fmt::format("--python {}: cannot be loaded by {}: {}", printable(spec), ref.exe.string(), printable(text("error"))));
  }
  PythonDeclaration d;
  try {
    d = validate_python_declaration(f.at("declaration"));
  } catch (const std::exception& ex) {
    throw UsageError(fmt::format("--python {}: {}", printable(spec), printable(ex.what())));
  }
  d.info.description = printable(d.info.description);
  d.version = printable(d.version);
  e.info = d.info;
  e.can_implement = d.can_implement;
  if (f.contains("unavailable") && f.at("unavailable").is_string()) e.unavailable = printable(text("unavailable"));
  e.ref.python = ref;
  r.version = d.version;
  r.origin["python"] = ref.exe.string();
  r.origin["python_version"] = text("python");
  r.origin["torch_version"] = text("torch");
  r.origin["cuda_device"] = f.value("cuda_device", json());
  r.origin["capabilities"] = to_json(d.info.caps);
  std::string module_digest;
  if (const auto mf = text("module_file"); !mf.empty()) {
    r.origin["module_file"] = mf;
    try {
      module_digest = sha256_file(mf);
      r.origin["module_sha256"] = module_digest;
    } catch (const std::exception&) {
      // A module without a readable source file (compiled, zipped): its version identifies it.
    }
  }
  // What --resume and `mla merge` compare (with the version): the code and the Python it ran on.
  const auto id = fmt::format("{}|{}|{}|{}|{}", ref.spec, ref.exe.string(), text("python"), text("torch"), module_digest);
  r.origin["sha256"] = sha256_hex({reinterpret_cast<const uint8_t*>(id.data()), id.size()});
  // The decode first, when it has one (the benchmark takes the first); then the other entries.
  Implementation base;
  base.external = true;
  base.ref.python = ref;
  base.info.backend = e.info.backend;
  base.unavailable = e.unavailable;
  auto others =
      external_entries(base, r, d.prefill, d.merge, d.topk, d.indexer_logits, d.indexer_append, d.sparse_prefill,
                       d.entry_can_implement);
  std::vector<std::pair<Implementation, reports::KernelReport>> out;
  if (d.decodes) out.emplace_back(std::move(e), std::move(r));
  for (auto& o : others) out.push_back(std::move(o));
  return out;
}

}  // namespace mla::certify
