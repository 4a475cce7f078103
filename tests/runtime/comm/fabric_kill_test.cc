// A fabric rank killed mid-collective: three worker processes (forked before this process opens
// any fabric) loop all-reduces over tcp; the test SIGKILLs one of them, and the survivors must
// fail within the timeout with an error naming the dead rank and its pid. Workers report
// through their exit code and a result file; the test removes the dead rank's /dev/shm files.
//
// [Note: shm and killed ranks] Not over shm: libfabric's shm provider (1.17, Debian bookworm)
// inserts messages into a peer's shared region under a spin lock in that region. A rank
// SIGKILLed while holding one leaves it held forever, and a survivor then spins inside
// fi_tsend / fi_cq_read, where no deadline of ours can reach it (seen in about 1 run in 15 on a
// loaded 2-core machine; gdb showed the survivor in pthread_spin_lock under fi_tsend). Sends to
// a peer already known dead are refused before they reach the provider (fabric_transfer.cc), but
// a death inside the critical section cannot be caught from outside. tcp has no shared locks.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/fabric/fabric_backend.h"
#include "runtime/topology/store.h"

namespace zs::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kWorld = 3;
constexpr int kVictim = 2;
constexpr int kExitFailedAsExpected = 3;

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path.string() + ".tmp");
  out << text;
  out.close();
  fs::rename(path.string() + ".tmp", path);
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool WaitForFile(const fs::path& path, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  while (!fs::exists(path)) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

// A worker process: connect, loop all-reduces until one fails, report, wait to be released.
int Worker(const fs::path& dir, int rank) {
  auto store = FileStore::Open((dir / "store").string());
  if (!store.ok()) return 2;
  CommOptions options;
  options.timeout = std::chrono::milliseconds(10'000);
  options.transport = "tcp";  // [Note: shm and killed ranks]
  options.group_name = "kill";
  auto comm = MakeFabricBackend()->Connect(**store, rank, kWorld, options);
  if (!comm.ok()) {
    WriteFile(dir / ("result." + std::to_string(rank)), comm.status().ToString());
    return 2;
  }
  std::vector<float> in(size_t{1} << 18, float(rank)), out(in.size());
  std::string result = "no error after many all-reduces";
  int code = 4;
  for (int i = 0; i < 200'000; ++i) {
    Status status =
        (*comm)->AllReduce(in.data(), out.data(), in.size(), DType::kF32, ReduceOp::kSum);
    if (!status.ok()) {
      result = status.ToString();
      code = kExitFailedAsExpected;
      break;
    }
    if (i == 3) WriteFile(dir / ("ready." + std::to_string(rank)), "ready");
  }
  WriteFile(dir / ("result." + std::to_string(rank)), result);
  // Stay alive until every survivor has reported, so that no survivor sees another one exit.
  WaitForFile(dir / "release", std::chrono::seconds(60));
  comm->reset();
  return code;
}

void RemoveShmFilesOf(pid_t pid) {
  const std::string prefix = std::to_string(pid) + ":";
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator("/dev/shm", ec)) {
    if (entry.path().filename().string().rfind(prefix, 0) == 0) fs::remove(entry.path(), ec);
  }
}

TEST(FabricKillTest, SurvivorsNameTheKilledRank) {
  if (!MakeFabricBackend()->Available().ok()) GTEST_SKIP() << "no libfabric provider";
  char dir_template[] = "/tmp/zs_fabric_kill_XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const fs::path dir = dir_template;

  // Fork before anything opens a fabric in this process.
  std::vector<pid_t> pids(kWorld);
  for (int r = 0; r < kWorld; ++r) {
    pids[r] = ::fork();
    ASSERT_GE(pids[r], 0);
    if (pids[r] == 0) ::_exit(Worker(dir, r));
  }
  auto kill_all = [&] {
    for (pid_t pid : pids) {
      if (pid > 0) ::kill(pid, SIGKILL);
    }
    for (pid_t& pid : pids) {
      if (pid > 0) ::waitpid(pid, nullptr, 0);
      RemoveShmFilesOf(pid);
      pid = -1;
    }
    fs::remove_all(dir);
  };

  if (!WaitForFile(dir / ("ready." + std::to_string(kVictim)), std::chrono::seconds(60))) {
    const std::string why = ReadFile(dir / "result.0");
    kill_all();
    FAIL() << "the workers never got going: " << why;
  }
  const pid_t victim = pids[kVictim];
  ::kill(victim, SIGKILL);
  int victim_status = 0;
  ::waitpid(victim, &victim_status, 0);
  pids[kVictim] = -1;
  EXPECT_TRUE(WIFSIGNALED(victim_status));
  RemoveShmFilesOf(victim);

  // Survivors must report within their 10 s timeout (the liveness check usually takes < 1 s; a
  // survivor waiting only on the other, still-living survivor needs the full timeout). The
  // test allows 6x that, for loaded CI machines and sanitizer builds.
  bool reported = true;
  for (int r = 0; r < kWorld; ++r) {
    if (r == kVictim) continue;
    reported =
        reported && WaitForFile(dir / ("result." + std::to_string(r)), std::chrono::seconds(60));
  }
  WriteFile(dir / "release", "go");
  if (!reported) {
    kill_all();
    FAIL() << "a survivor did not fail within its timeout";
  }
  const std::string dead = "rank " + std::to_string(kVictim) + " (pid " + std::to_string(victim);
  for (int r = 0; r < kWorld; ++r) {
    if (r == kVictim) continue;
    int status = 0;
    ::waitpid(pids[r], &status, 0);
    const std::string result = ReadFile(dir / ("result." + std::to_string(r)));
    pids[r] = -1;
    std::cout << "rank " << r << " reported: " << result << "\n";
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == kExitFailedAsExpected)
        << "rank " << r << ": " << result;
    EXPECT_NE(result.find(dead), std::string::npos) << "rank " << r << ": " << result;
    EXPECT_NE(result.find("all_reduce"), std::string::npos) << result;
    EXPECT_NE(result.find("'kill'"), std::string::npos) << result;
  }
  // Nothing of the dead rank is left in /dev/shm.
  for (const auto& entry : fs::directory_iterator("/dev/shm")) {
    EXPECT_NE(entry.path().filename().string().rfind(std::to_string(victim) + ":", 0), 0u)
        << entry.path();
  }
  kill_all();
}

}  // namespace
}  // namespace zs::testing
