#include "bench_rows.hpp"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

namespace mla::device {

namespace {

class IncrementalJson final : public benchmark::BenchmarkReporter {
 public:
  IncrementalJson(std::string path, std::function<std::string()> note) : path_(std::move(path)), note_(std::move(note)) {
    inner_.SetOutputStream(&buf_);
    inner_.SetErrorStream(&std::cerr);
  }
  bool ReportContext(const Context& c) override {
    const bool ok = inner_.ReportContext(c);
    write(false);
    return ok;
  }
  void ReportRuns(const std::vector<Run>& runs) override {
    inner_.ReportRuns(runs);
    rows_ += runs.size();
    if (!runs.empty()) last_ = runs.back().benchmark_name();
    write(false);
  }
  void Finalize() override { write(true); }

 private:
  // Google Benchmark's JSONReporter writes "{\n  \"context\": ..., \"benchmarks\": [\n" then the
  // rows; its Finalize closes with "\n  ]\n}\n". Closing the buffer the same way after every
  // benchmark gives a complete document of the rows so far.
  void write(bool complete) {
    const std::string body = buf_.str();
    nlohmann::ordered_json run = {{"complete", complete}, {"rows", rows_}, {"last", last_}};
    if (note_) {
      if (std::string n = note_(); !n.empty()) run["stopped"] = n;
    }
    const std::string tmp = path_ + ".tmp";
    {
      std::ofstream f(tmp, std::ios::trunc);
      f << "{\n  \"mla_run\": " << run.dump() << ",\n" << (body.size() > 2 ? body.substr(2) : body) << "\n  ]\n}\n";
      if (!f) {
        std::cerr << "[bench rows] cannot write " << tmp << "\n";
        return;
      }
    }
    if (std::rename(tmp.c_str(), path_.c_str()) != 0) std::cerr << "[bench rows] cannot rename " << tmp << "\n";
  }

  std::string path_;
  std::function<std::string()> note_;
  std::ostringstream buf_;
  benchmark::JSONReporter inner_;
  std::size_t rows_ = 0;
  std::string last_;
};

class Tee final : public benchmark::BenchmarkReporter {
 public:
  explicit Tee(std::vector<benchmark::BenchmarkReporter*> to) : to_(std::move(to)) {}
  bool ReportContext(const Context& c) override {
    bool ok = true;
    for (auto* r : to_) ok = r->ReportContext(c) && ok;
    return ok;
  }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (auto* r : to_) r->ReportRuns(runs);
  }
  void Finalize() override {
    for (auto* r : to_) r->Finalize();
  }

 private:
  std::vector<benchmark::BenchmarkReporter*> to_;
};

}  // namespace

std::unique_ptr<benchmark::BenchmarkReporter> incremental_json_reporter(std::string path,
                                                                        std::function<std::string()> note) {
  return std::make_unique<IncrementalJson>(std::move(path), std::move(note));
}

std::unique_ptr<benchmark::BenchmarkReporter> tee_reporter(std::vector<benchmark::BenchmarkReporter*> to) {
  return std::make_unique<Tee>(std::move(to));
}

}  // namespace mla::device
