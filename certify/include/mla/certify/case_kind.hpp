// A kind of certified case (decode attention, cache append, ...) as one module of the certifier.
//
// The run (certify/src/run/) knows no kind by name: it plans, resumes, certifies, shards and
// merges by asking the registered kinds. Each kind lives in certify/src/kinds/<kind>/ and wires
// together what the layers below it hold for that kind: its contract (core/), its golden loader
// (golden/), its fp64 oracle (reference/host/), its judge and tolerance entries (judge/, the one
// table in core/), its entry point in the C ABI and the Python door (kernels/plugin/,
// kernels/python/) and its fresh-case drawer. The catalog (fixtures/catalog.json) names, per
// family, the kind that certifies it (`certify`); check_catalog_kinds() holds every family to a
// registered kind with the loader that kind reads.
//
// Registration is explicit (certify/src/kinds/registry.cpp, one line per kind), never by static
// initializers: the order of that list is the order in which a run certifies and a certificate
// lists the kinds' rows.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mla/golden/families.hpp"
#include "mla/reports/certificate.hpp"

namespace mla::certify {

class Session;          // run/session.hpp: the state of one run (private to mla_certify)
struct Implementation;  // run/session.hpp: one implementation under certification

class CaseKind {
 public:
  virtual ~CaseKind() = default;

  // ---- What it is (read by the CLI, the tests and the run) ----
  // The catalog's `certify` word for the families it certifies.
  virtual std::string_view name() const = 0;
  // How help texts and errors name its families ("decode families", "plug-in appends").
  virtual std::string_view families_are() const = 0;
  // The golden loader its stored cases are read with; nullopt for a kind whose every case is
  // drawn at run time (top-k: its truth is the logits it is given), which no family may name.
  virtual std::optional<golden::FamilyKind> loads() const = 0;
  // Whether every implementation of a run is certified on each of its stored cases (so shards
  // and resumed runs can be checked to hold the same rows for all of them), rather than only
  // the implementations with its entry point. Those kinds' stored rows come first in a run and
  // a certificate, before the cases drawn at run time; the other kinds' come after them.
  virtual bool common() const = 0;
  // The `file` of its rows drawn at run time (family `fresh`); empty when it draws none.
  virtual std::vector<std::string> drawn_files() const = 0;

  // ---- The run (Session is private to mla_certify) ----
  // Whether `k` has the entry point this kind calls.
  virtual bool serves(const Implementation& k) const = 0;
  // Plans the stored cases of one selected family of this kind; `files` are the catalog's files
  // of that family (empty when it has none). A file it will not certify goes to `unused` with
  // the reason. UsageError for a selection it cannot honour.
  virtual void plan(Session& s, const golden::Family& fam, const std::vector<std::string>& files,
                    std::vector<std::string>& unused) const = 0;
  // After planning: whether some case of it survives the selection; `why_none` says what would
  // be needed when none does (appended to the usage error of an empty selection).
  virtual bool has_cases(const Session& s) const = 0;
  virtual std::string why_none(const Session& s) const = 0;
  // Cuts its planned cases to this run's shard (after the whole selection was found non-empty).
  virtual void cut_to_shard(Session& s) const = 0;
  // Under --resume, which previous rows of its families this run certifies again (the others,
  // outside the selection, are kept). The predicate is built once per run.
  virtual std::function<bool(const reports::CaseResult&)> reruns(const Session& s) const = 0;
  // Every stored case of the selection, recorded and saved one by one; false when a stop was
  // asked for.
  virtual bool certify_stored(Session& s) const = 0;
  // The cases drawn at run time for `k` from `seed` (rows of family `fresh`).
  virtual void certify_fresh(Session& s, const Implementation& k, uint64_t seed) const = 0;
};

// The registered kinds, in run order; the first call checks the catalog against them
// (check_catalog_kinds) and throws mla::Error naming the family that does not fit.
const std::vector<const CaseKind*>& case_kinds();
// A registered kind by its catalog word; nullptr when none is.
const CaseKind* find_case_kind(std::string_view name);
// The kind that certifies `fam`; nullptr for a family that is not certified. Throws mla::Error
// when its `certify` word names no registered kind.
const CaseKind* case_kind_of(const golden::Family& fam);
// The kind whose stored rows carry family name `certified_as` (nullptr when no certified family
// of the catalog does).
const CaseKind* case_kind_of_rows(std::string_view certified_as);
// Throws mla::Error naming the first family of `families` whose `certify` word names no
// registered kind, or whose family kind is not the one its case kind loads.
void check_catalog_kinds(const std::vector<golden::Family>& families);

}  // namespace mla::certify
