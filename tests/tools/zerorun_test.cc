// zerorun: the launcher library (RunRanks) and the tool, on a helper rank program
// (zerorun_test_rank.cc). Checks output prefixes, exit codes, the messages naming the failing
// rank (also when its peers fail at once, [Note: blame]), that no rank or descendant is left
// running, the timeout and signal paths, the removal of /dev/shm leftovers, and what happens
// when zerorun itself is killed ([Note: dead launcher]).
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "tools/zerorun/launcher.h"

namespace zs {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;

const std::string kHelper = ZS_TEST_HELPER;  // path of zerorun_test_rank
const std::string kZerorun = ZS_ZERORUN;     // path of the zerorun tool

#define EXPECT_CONTAINS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A fresh directory per test, removed at the end.
class TempDir {
 public:
  TempDir() {
    std::string templ = ::testing::TempDir() + "/zerorun_test_XXXXXX";
    path_ = ::mkdtemp(templ.data()) ? templ : "";
  }
  ~TempDir() { fs::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The output RunRanks writes, captured in anonymous files.
struct Captured {
  Captured() : out(::memfd_create("out", 0)), err(::memfd_create("err", 0)) {}
  ~Captured() {
    ::close(out);
    ::close(err);
  }
  static std::string Read(int fd) {
    std::string text;
    char buf[4096];
    ::lseek(fd, 0, SEEK_SET);
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0) text.append(buf, size_t(n));
    return text;
  }
  std::string Out() const { return Read(out); }
  std::string Err() const { return Read(err); }
  int out;
  int err;
};

LaunchOptions Options(int n, std::vector<std::string> args, const Captured& c) {
  LaunchOptions o;
  o.num_ranks = n;
  o.command = {kHelper};
  o.command.insert(o.command.end(), args.begin(), args.end());
  o.out_fd = c.out;
  o.err_fd = c.err;
  o.timeout = milliseconds(120'000);  // a broken launcher fails the test instead of hanging it
  return o;
}

// True while `pid` exists and is not a zombie.
bool IsAlive(pid_t pid) {
  std::ifstream stat(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() && line[paren + 2] != 'Z' &&
         line[paren + 2] != 'X';
}

// A killed process may take a moment to die: waits for that (bounded), then says if it lives.
bool StaysAlive(pid_t pid) {
  for (int i = 0; i < 10'000 && IsAlive(pid); ++i) std::this_thread::sleep_for(milliseconds(1));
  return IsAlive(pid);
}

std::vector<pid_t> ReadPids(const std::string& dir, const std::string& prefix, int n) {
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const std::string text = ReadFile(fmt::format("{}/{}.{}", dir, prefix, r));
    if (!text.empty()) pids.push_back(pid_t(std::stoi(text)));
  }
  return pids;
}

TEST(ZerorunTest, PrefixesEveryLineAndSetsTheEnvironment) {
  Captured c;
  LaunchResult r = RunRanks(Options(3, {"print"}, c)).value();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.failure, "");
  ASSERT_EQ(r.ranks.size(), 3u);
  const std::string out = c.Out(), err = c.Err();
  std::string rendezvous;
  for (int k = 0; k < 3; ++k) {
    EXPECT_TRUE(r.ranks[size_t(k)].exited);
    EXPECT_EQ(r.ranks[size_t(k)].exit_code, 0);
    const std::string head = fmt::format("[r{}] rank {} of 3 local {}/3 rendezvous ", k, k, k);
    const size_t at = out.find(head);
    ASSERT_NE(at, std::string::npos) << out;
    const std::string line = out.substr(at + head.size(), out.find('\n', at) - at - head.size());
    EXPECT_EQ(line.substr(line.size() - 9), " exists 1") << line;
    const std::string dir = line.substr(0, line.size() - 9);
    if (k == 0) rendezvous = dir;
    EXPECT_EQ(dir, rendezvous);  // one rendezvous for the job
    EXPECT_CONTAINS(out, fmt::format("[r{}] second line\n", k));
    EXPECT_CONTAINS(out, fmt::format("[r{}] no newline {}\n", k, k));  // flushed at the end
    EXPECT_CONTAINS(err, fmt::format("[r{}] to stderr {}\n", k, k));
  }
  EXPECT_EQ(out.find("to stderr"), std::string::npos);
  EXPECT_FALSE(rendezvous.empty());
  EXPECT_FALSE(fs::exists(rendezvous)) << "the temporary rendezvous was not removed";
  // Every line carries a prefix.
  std::istringstream lines(out + err);
  for (std::string line; std::getline(lines, line);) EXPECT_EQ(line.substr(0, 2), "[r") << line;
}

TEST(ZerorunTest, RankCpusBindLocalRanksInTurn) {
  const std::vector<int> allowed = {2, 5, 7};
  EXPECT_EQ(RankCpus(CpuBinding::kCore, 0, allowed), std::vector<int>{2});
  EXPECT_EQ(RankCpus(CpuBinding::kCore, 2, allowed), std::vector<int>{7});
  EXPECT_EQ(RankCpus(CpuBinding::kCore, 4, allowed), std::vector<int>{5});  // wraps around
  EXPECT_EQ(RankCpus(CpuBinding::kNone, 0, allowed), allowed);
  EXPECT_TRUE(RankCpus(CpuBinding::kCore, 0, {}).empty());
}

// [Note: rank binding] Each rank's affinity, read by the rank itself: one CPU each, in turn
// (wrapping around with more ranks than CPUs), by default; every CPU under kNone.
TEST(ZerorunTest, RanksAreBoundToCpusInTurn) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> allowed;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) allowed.push_back(c);
  }
  auto join = [](const std::vector<int>& cpus) {
    std::string s;
    for (int c : cpus) s += (s.empty() ? "" : ",") + std::to_string(c);
    return s;
  };
  const int n = int(allowed.size()) + 1;  // one rank more than CPUs: the first CPU twice
  for (CpuBinding bind : {CpuBinding::kCore, CpuBinding::kNone}) {
    Captured c;
    LaunchOptions o = Options(n, {"cpus"}, c);
    o.bind = bind;
    LaunchResult r = RunRanks(o).value();
    ASSERT_EQ(r.exit_code, 0) << c.Err();
    for (int k = 0; k < n; ++k) {
      const std::string want = bind == CpuBinding::kNone
                                   ? join(allowed)
                                   : std::to_string(allowed[size_t(k) % allowed.size()]);
      EXPECT_CONTAINS(c.Out(), fmt::format("[r{}] rank {} cpus {}\n", k, k, want));
    }
  }
}

TEST(ZerorunTest, FailingRankStopsTheOthers) {
  TempDir dir;
  Captured c;
  LaunchResult r = RunRanks(Options(4, {"fail", "1", "3", dir.path()}, c)).value();
  EXPECT_EQ(r.exit_code, 3);
  const auto pids = ReadPids(dir.path(), "pid", 4);
  ASSERT_EQ(pids.size(), 4u);
  const std::string expected = fmt::format(
      "zerorun: rank 1 (pid {}) exited with code 3; stopping the other 3 ranks\n", pids[1]);
  EXPECT_CONTAINS(c.Err(), expected);
  EXPECT_EQ(r.failure, expected.substr(9, expected.size() - 10));
  EXPECT_CONTAINS(c.Err(), "[r1] rank 1 failing on purpose");
  for (int k : {0, 2, 3}) {
    EXPECT_FALSE(r.ranks[size_t(k)].exited) << k;
    EXPECT_EQ(r.ranks[size_t(k)].signal, SIGTERM) << k;
    EXPECT_TRUE(r.ranks[size_t(k)].stopped) << k;
  }
  EXPECT_FALSE(r.ranks[1].stopped);
  for (pid_t pid : pids) EXPECT_FALSE(StaysAlive(pid)) << pid;
}

TEST(ZerorunTest, RankKilledBySignalIsNamed) {
  TempDir dir;
  Captured c;
  // Rank 0 dies by SIGKILL while ranks 1 and 2 sleep forever.
  LaunchResult r = RunRanks(Options(3, {"kill-self", "0", dir.path()}, c)).value();
  EXPECT_EQ(r.exit_code, 128 + SIGKILL);
  const auto pids = ReadPids(dir.path(), "pid", 3);
  ASSERT_EQ(pids.size(), 3u);
  EXPECT_CONTAINS(c.Err(), fmt::format("zerorun: rank 0 (pid {}) was killed by signal 9 (Killed); "
                                       "stopping the other 2 ranks",
                                       pids[0]));
  EXPECT_EQ(r.ranks[0].signal, SIGKILL);
  for (pid_t pid : pids) EXPECT_FALSE(StaysAlive(pid)) << pid;
}

// [Note: blame] The killed rank's peers see its connection close and exit 1 at once, often
// within the poll in which zerorun sees the killed rank (the last, so rank order would name a
// peer): the killed rank is named, every time.
TEST(ZerorunTest, KilledRankIsNamedWhenItsPeersFailAtOnce) {
  for (int trial = 0; trial < 6; ++trial) {
    SCOPED_TRACE(trial);
    TempDir dir;
    Captured c;
    LaunchResult r = RunRanks(Options(4, {"killed-peers-fail", "3", dir.path()}, c)).value();
    const auto pids = ReadPids(dir.path(), "pid", 4);
    ASSERT_EQ(pids.size(), 4u);
    EXPECT_EQ(r.failed_rank, 3) << c.Err();
    EXPECT_EQ(r.exit_code, 128 + SIGKILL) << c.Err();
    EXPECT_CONTAINS(
        c.Err(), fmt::format("zerorun: rank 3 (pid {}) was killed by signal 9 (Killed)", pids[3]));
    EXPECT_EQ(r.ranks[3].signal, SIGKILL);
    for (pid_t pid : pids) EXPECT_FALSE(StaysAlive(pid)) << pid;
  }
}

// [Note: blame] A stopped rank fails nobody by exiting: its peers time out waiting for it. It
// is named (and stopped for good: SIGTERM, then SIGCONT so that it acts on it).
TEST(ZerorunTest, StoppedRankIsNamedWhenItsPeersTimeOut) {
  TempDir dir;
  Captured c;
  LaunchResult r = RunRanks(Options(3, {"stopped-peers-time-out", "1", dir.path()}, c)).value();
  const auto pids = ReadPids(dir.path(), "pid", 3);
  ASSERT_EQ(pids.size(), 3u);
  EXPECT_EQ(r.failed_rank, 1) << c.Err();
  EXPECT_EQ(r.exit_code, 128 + SIGSTOP) << c.Err();
  EXPECT_CONTAINS(c.Err(), fmt::format("zerorun: rank 1 (pid {}) is stopped by signal {} ({})",
                                       pids[1], SIGSTOP, ::strsignal(SIGSTOP)));
  // The first peer to time out ends the job: the other may be stopped before it says so.
  EXPECT_CONTAINS(c.Err(), "timed out after 200 ms waiting for rank(s) 1\n");
  EXPECT_EQ(r.ranks[1].suspended_by, SIGSTOP);
  EXPECT_TRUE(r.ranks[1].stopped);
  EXPECT_EQ(r.ranks[1].signal, SIGTERM);  // it was continued to act on SIGTERM
  for (int k : {0, 2}) {
    EXPECT_EQ(r.ranks[size_t(k)].suspended_by, 0) << k;
  }
  for (pid_t pid : pids) EXPECT_FALSE(StaysAlive(pid)) << pid;
}

TEST(ZerorunTest, TimeoutStopsEveryRank) {
  TempDir dir;
  Captured c;
  LaunchOptions o = Options(2, {"sleep", dir.path()}, c);
  o.timeout = milliseconds(300);
  LaunchResult r = RunRanks(o).value();
  EXPECT_EQ(r.exit_code, 124);
  EXPECT_CONTAINS(c.Err(), "zerorun: timed out after 0.3 s; stopping the 2 running ranks\n");
  for (const RankOutcome& k : r.ranks) EXPECT_TRUE(k.stopped);
  for (pid_t pid : ReadPids(dir.path(), "pid", 2)) EXPECT_FALSE(StaysAlive(pid)) << pid;
}

TEST(ZerorunTest, RanksIgnoringSigtermAreKilledAfterTheGrace) {
  TempDir dir;
  Captured c;
  LaunchOptions o = Options(2, {"ignore-term", dir.path()}, c);
  o.timeout = milliseconds(200);
  o.grace = milliseconds(100);
  LaunchResult r = RunRanks(o).value();
  EXPECT_EQ(r.exit_code, 124);
  EXPECT_CONTAINS(c.Err(), "2 ranks still running 0.1 s after SIGTERM; sending SIGKILL");
  for (const RankOutcome& k : r.ranks) EXPECT_EQ(k.signal, SIGKILL);
}

TEST(ZerorunTest, DescendantsLeftBehindAreKilled) {
  TempDir dir;
  Captured c;
  LaunchResult r = RunRanks(Options(2, {"grandchild", dir.path()}, c)).value();
  EXPECT_EQ(r.exit_code, 0);
  const auto grandchildren = ReadPids(dir.path(), "grandchild", 2);
  ASSERT_EQ(grandchildren.size(), 2u);
  for (pid_t pid : grandchildren) EXPECT_FALSE(StaysAlive(pid)) << pid;
}

TEST(ZerorunTest, ShmLeftoversOfEveryRankAreRemoved) {
  for (const char* failing : {"1", "-1"}) {  // a failed job, then a clean one
    SCOPED_TRACE(failing);
    TempDir dir;
    Captured c;
    LaunchResult r = RunRanks(Options(3, {"shm", "/dev/shm", failing, dir.path()}, c)).value();
    EXPECT_EQ(r.exit_code, std::string(failing) == "1" ? 1 : 0) << c.Err();
    const auto pids = ReadPids(dir.path(), "pid", 3);
    ASSERT_EQ(pids.size(), 3u);
    for (pid_t pid : pids) {
      EXPECT_FALSE(fs::exists(fmt::format("/dev/shm/{}:zerorun-test", pid))) << pid;
    }
  }
}

TEST(ZerorunTest, OutputDirectoryGetsOneFilePerRankAndStream) {
  TempDir dir;
  Captured c;
  LaunchOptions o = Options(2, {"print"}, c);
  o.output_dir = dir.path() + "/logs";
  LaunchResult r = RunRanks(o).value();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(c.Out(), "");
  for (int k = 0; k < 2; ++k) {
    const std::string out = ReadFile(fmt::format("{}/logs/rank{}.stdout", dir.path(), k));
    EXPECT_EQ(out.substr(0, 14), fmt::format("rank {} of 2 lo", k)) << out;
    EXPECT_CONTAINS(out, fmt::format("no newline {}", k));
    EXPECT_EQ(ReadFile(fmt::format("{}/logs/rank{}.stderr", dir.path(), k)),
              fmt::format("to stderr {}\n", k));
  }
}

TEST(ZerorunTest, GivenRendezvousIsUsedAndKept) {
  TempDir dir;
  Captured c;
  LaunchOptions o = Options(1, {"print"}, c);
  o.rendezvous = dir.path() + "/rdzv";
  LaunchResult r = RunRanks(o).value();
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_CONTAINS(c.Out(), fmt::format("rendezvous {} exists 1", o.rendezvous));
  EXPECT_TRUE(fs::exists(o.rendezvous));
}

TEST(ZerorunTest, StartErrorsNameTheProblem) {
  Captured c;
  LaunchOptions o = Options(2, {}, c);
  o.command = {"/nonexistent/zerorun-program"};
  auto r = RunRanks(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_CONTAINS(r.status().message(), "cannot execute '/nonexistent/zerorun-program'");
  o.command.clear();
  EXPECT_EQ(RunRanks(o).status().code(), StatusCode::kInvalidArgument);
  o.command = {kHelper};
  o.num_ranks = 0;
  EXPECT_CONTAINS(RunRanks(o).status().message(), "number of ranks (0)");
}

// ---- the tool -------------------------------------------------------------------------------

struct ToolRun {
  int exit_code = -1;
  std::string out, err;
};

// Starts zerorun with `args` (and `env`, "NAME=value" entries, added to the environment), its
// output into files under `dir`; returns its pid.
pid_t StartTool(const std::vector<std::string>& args, const std::string& dir,
                std::vector<std::string> env = {}) {
  std::vector<std::string> argv = {kZerorun};
  argv.insert(argv.end(), args.begin(), args.end());
  const pid_t pid = ::fork();
  if (pid == 0) {
    for (std::string& e : env) ::putenv(e.data());
    const int out = ::open((dir + "/tool.out").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open((dir + "/tool.err").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    std::vector<char*> raw;
    for (auto& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execv(raw[0], raw.data());
    ::_exit(127);
  }
  return pid;
}

ToolRun FinishTool(pid_t pid, const std::string& dir) {
  int status = 0;
  ::waitpid(pid, &status, 0);
  ToolRun run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = ReadFile(dir + "/tool.out");
  run.err = ReadFile(dir + "/tool.err");
  return run;
}

ToolRun Tool(const std::vector<std::string>& args, std::vector<std::string> env = {}) {
  TempDir dir;
  return FinishTool(StartTool(args, dir.path(), std::move(env)), dir.path());
}

TEST(ZerorunToolTest, RunsRanksAndPassesTheBackend) {
  ToolRun ok = Tool({"-n", "2", "--backend", "fabric", "--", kHelper, "env"});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_CONTAINS(ok.out, "[r0] ZS_BACKEND=fabric\n");
  EXPECT_CONTAINS(ok.out, "[r1] ZS_BACKEND=fabric\n");
  ToolRun plain = Tool({"-n", "1", "--tag-output", kHelper, "print"});
  EXPECT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_CONTAINS(plain.out, "[r0] rank 0 of 1 local 0/1");
}

TEST(ZerorunToolTest, ExitCodeIsTheFailingRanks) {
  TempDir dir;
  ToolRun fail = Tool({"-n", "3", kHelper, "fail", "2", "7", dir.path()});
  EXPECT_EQ(fail.exit_code, 7);
  EXPECT_CONTAINS(fail.err, "zerorun: rank 2 (pid ");
  EXPECT_CONTAINS(fail.err, ") exited with code 7; stopping the other 2 ranks");
  ToolRun timeout = Tool({"-n", "1", "--timeout", "0.2", kHelper, "sleep", dir.path()});
  EXPECT_EQ(timeout.exit_code, 124);
  EXPECT_CONTAINS(timeout.err, "zerorun: timed out after 0.2 s");
}

TEST(ZerorunToolTest, BadCommandLines) {
  EXPECT_EQ(Tool({"-n", "0", kHelper}).exit_code, 2);
  EXPECT_EQ(Tool({kHelper}).exit_code, 2);  // no -n
  EXPECT_EQ(Tool({"-n", "2", "--backend", "carrier-pigeon", kHelper}).exit_code, 2);
  EXPECT_EQ(Tool({"-n", "2", "--tag-output", "--output-dir", "/tmp/x", kHelper}).exit_code, 2);
  EXPECT_EQ(Tool({"-n", "2", "--bind", "socket", kHelper}).exit_code, 2);
  ToolRun none = Tool({"-n", "2"});
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_CONTAINS(none.err, "no PROGRAM given");
  ToolRun missing = Tool({"-n", "2", "/nonexistent/program"});
  EXPECT_EQ(missing.exit_code, 127);
  EXPECT_CONTAINS(missing.err, "zerorun: cannot execute '/nonexistent/program'");
}

TEST(ZerorunToolTest, SigintIsForwardedToTheRanks) {
  TempDir dir;
  const pid_t tool = StartTool({"-n", "2", kHelper, "sleep", dir.path()}, dir.path());
  // Wait until both ranks run (bounded), then interrupt zerorun.
  std::vector<pid_t> pids;
  for (int i = 0; i < 30'000 && pids.size() < 2; ++i) {
    std::this_thread::sleep_for(milliseconds(1));
    pids = ReadPids(dir.path(), "pid", 2);
  }
  ASSERT_EQ(pids.size(), 2u);
  ASSERT_EQ(::kill(tool, SIGINT), 0);
  ToolRun run = FinishTool(tool, dir.path());
  EXPECT_EQ(run.exit_code, 128 + SIGINT);
  EXPECT_CONTAINS(run.err, "zerorun: received SIGINT; forwarding it to the 2 running ranks");
  for (pid_t pid : pids) EXPECT_FALSE(StaysAlive(pid)) << pid;
}

// [Note: dead launcher] zerorun killed by SIGKILL: its ranks die with it (parent-death signal),
// and the next zerorun removes their /dev/shm leftovers and the job directory.
TEST(ZerorunToolTest, RanksDieWithAKilledZerorunAndTheNextOneCleansUp) {
  TempDir dir;
  const std::string tmp = dir.path() + "/tmp";
  ASSERT_TRUE(fs::create_directory(tmp));
  const std::vector<std::string> env = {"TMPDIR=" + tmp};
  const pid_t tool =
      StartTool({"-n", "2", kHelper, "shm", "/dev/shm", "99", dir.path()}, dir.path(), env);
  std::vector<pid_t> pids;
  for (int i = 0; i < 30'000 && pids.size() < 2; ++i) {
    std::this_thread::sleep_for(milliseconds(1));
    pids = ReadPids(dir.path(), "pid", 2);
  }
  ASSERT_EQ(pids.size(), 2u);
  std::vector<std::string> job_dirs;
  for (const auto& e : fs::directory_iterator(tmp)) job_dirs.push_back(e.path().string());
  ASSERT_EQ(job_dirs.size(), 1u);
  EXPECT_EQ(fs::path(job_dirs[0]).filename().string().rfind(fmt::format("zerorun-{}-", tool), 0),
            0u)
      << job_dirs[0];
  auto shm_file = [](pid_t pid) { return fmt::format("/dev/shm/{}:zerorun-test", pid); };
  for (pid_t pid : pids) EXPECT_TRUE(fs::exists(shm_file(pid))) << pid;

  ASSERT_EQ(::kill(tool, SIGKILL), 0);
  EXPECT_EQ(FinishTool(tool, dir.path()).exit_code, 128 + SIGKILL);
  for (pid_t pid : pids) EXPECT_FALSE(StaysAlive(pid)) << "rank " << pid << " outlived zerorun";
  // What the dead launcher left, until the next one starts.
  EXPECT_TRUE(fs::exists(job_dirs[0]));
  for (pid_t pid : pids) EXPECT_TRUE(fs::exists(shm_file(pid))) << pid;

  ToolRun next = Tool({"-n", "1", kHelper, "print"}, env);
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_FALSE(fs::exists(job_dirs[0]));
  for (pid_t pid : pids) EXPECT_FALSE(fs::exists(shm_file(pid))) << pid;
  EXPECT_TRUE(fs::is_empty(tmp));  // the next job's own directory is gone too

  for (pid_t pid : pids) {  // only if the test failed: leave nothing behind
    if (IsAlive(pid)) ::kill(pid, SIGKILL);
    fs::remove(shm_file(pid));
  }
}

// A job directory whose launcher lives is left alone, and so are the shm files of a live rank.
TEST(ZerorunToolTest, LeftoversOfLiveLaunchersAreKept) {
  TempDir dir;
  const std::string tmp = dir.path() + "/tmp";
  ASSERT_TRUE(fs::create_directory(tmp));
  // A "launcher" that lives (this test) and a dead one whose "rank" lives (this test too).
  const std::string live = fmt::format("{}/zerorun-{}-live00", tmp, ::getpid());
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const std::string dead_dir = fmt::format("{}/zerorun-{}-dead00", tmp, dead);
  for (const std::string& d : {live, dead_dir}) {
    ASSERT_TRUE(fs::create_directory(d));
    std::ofstream(d + "/ranks") << ::getpid() << "\n";
  }
  const std::string shm = fmt::format("/dev/shm/{}:zerorun-test-live", ::getpid());
  std::ofstream(shm) << "a live rank's";
  ToolRun next = Tool({"-n", "1", kHelper, "print"}, {"TMPDIR=" + tmp});
  EXPECT_EQ(next.exit_code, 0) << next.err;
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(dead_dir));  // kept while a rank it lists lives
  EXPECT_TRUE(fs::exists(shm));
  fs::remove(shm);
}

}  // namespace
}  // namespace zs
