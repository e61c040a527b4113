// L0 (CPU): the incremental benchmark JSON (bench_rows.hpp). A child process runs three
// benchmarks through the reporter and dies by SIGKILL inside the third, as a bench killed by
// the device check's timeout would: the file must be valid JSON holding the two finished rows,
// marked incomplete, with the note. A run that ends normally must be marked complete.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include "bench_rows.hpp"

namespace {

void quick(benchmark::State& st) {
  for (auto _ : st) benchmark::DoNotOptimize(st.iterations());
}
void dies(benchmark::State& st) {
  for (auto _ : st) std::raise(SIGKILL);
}

// Runs `with_death` ? quick, quick, dies : quick, quick in a child; returns its wait status.
int run_child(const std::string& path, bool with_death) {
  const pid_t pid = fork();
  if (pid == 0) {
    benchmark::ClearRegisteredBenchmarks();
    benchmark::RegisterBenchmark("rows/first", quick)->Iterations(3)->Repetitions(2);
    benchmark::RegisterBenchmark("rows/second", quick)->Iterations(3);
    if (with_death) benchmark::RegisterBenchmark("rows/third_dies", dies)->Iterations(1);
    std::ofstream devnull("/dev/null");
    benchmark::ConsoleReporter console(benchmark::ConsoleReporter::OO_None);
    console.SetOutputStream(&devnull);
    console.SetErrorStream(&devnull);
    const auto file = mla::device::incremental_json_reporter(path, [] { return std::string("a note"); });
    const auto tee = mla::device::tee_reporter({&console, file.get()});
    benchmark::RunSpecifiedBenchmarks(tee.get());
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

nlohmann::json read(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);  // throws on a truncated document
}

TEST(BenchRows, AKilledRunKeepsEveryFinishedRowInAValidFile) {
  const std::string path = testing::TempDir() + "/bench_rows_killed.json";
  std::remove(path.c_str());
  const int status = run_child(path, true);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the child was to die in its third benchmark";
  const nlohmann::json d = read(path);
  EXPECT_EQ(d["mla_run"]["complete"], false);
  EXPECT_EQ(d["mla_run"]["stopped"], "a note");
  EXPECT_EQ(d["mla_run"]["last"], "rows/second/iterations:3");
  EXPECT_TRUE(d.contains("context"));
  std::size_t first = 0, second = 0;
  for (const auto& row : d["benchmarks"]) {
    const std::string name = row["name"];
    if (name.rfind("rows/first", 0) == 0 && row["run_type"] == "iteration") ++first;
    if (name.rfind("rows/second", 0) == 0 && row["run_type"] == "iteration") ++second;
    EXPECT_EQ(name.find("third"), std::string::npos) << "a row of the unfinished benchmark was written";
  }
  EXPECT_EQ(first, 2u);   // both repetitions
  EXPECT_EQ(second, 1u);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(BenchRows, ARunThatEndsIsMarkedComplete) {
  const std::string path = testing::TempDir() + "/bench_rows_complete.json";
  std::remove(path.c_str());
  const int status = run_child(path, false);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  const nlohmann::json d = read(path);
  EXPECT_EQ(d["mla_run"]["complete"], true);
  EXPECT_GE(d["benchmarks"].size(), 3u);
}

}  // namespace
