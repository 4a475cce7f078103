// A rank program for zerorun_test: behaves according to argv[1] (see the cases below).
// Every mode that stays alive first writes its pid to <dir>/pid.<rank>, so the test can check
// afterwards that nothing is left running.
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

namespace {

int Rank() { return std::atoi(std::getenv("ZS_RANK") ? std::getenv("ZS_RANK") : "-1"); }
int World() { return std::atoi(std::getenv("ZS_WORLD_SIZE") ? std::getenv("ZS_WORLD_SIZE") : "0"); }

void WriteFile(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) {
    std::perror(tmp.c_str());
    std::exit(90);
  }
  std::fputs(text.c_str(), f);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

void WritePid(const std::string& dir) {
  WriteFile(dir + "/pid." + std::to_string(Rank()), std::to_string(::getpid()));
}

// Waits until every rank has written its pid (so all are running when this one fails).
void WaitForAllPids(const std::string& dir) {
  for (int r = 0; r < World(); ++r) {
    while (!Exists(dir + "/pid." + std::to_string(r))) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

[[noreturn]] void SleepForever() {
  while (true) ::pause();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const int rank = Rank();
  if (mode == "print") {
    // stdout: one line with the launch variables, a partial last line; stderr: one line.
    const char* rdzv = std::getenv("ZS_RENDEZVOUS");
    std::printf("rank %d of %d local %s/%s rendezvous %s exists %d\n", rank, World(),
                std::getenv("ZS_LOCAL_RANK"), std::getenv("ZS_LOCAL_SIZE"), rdzv ? rdzv : "-",
                rdzv != nullptr && Exists(rdzv));
    std::printf("second line\nno newline %d", rank);
    std::fflush(stdout);
    std::fprintf(stderr, "to stderr %d\n", rank);
    return 0;
  }
  if (mode == "cpus") {  // the CPUs this rank may run on: "rank R cpus 0,1"
    cpu_set_t set;
    CPU_ZERO(&set);
    if (::sched_getaffinity(0, sizeof(set), &set) != 0) return 91;
    std::string list;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) list += (list.empty() ? "" : ",") + std::to_string(c);
    }
    std::printf("rank %d cpus %s\n", rank, list.c_str());
    return 0;
  }
  if (mode == "env") {
    const char* backend = std::getenv("ZS_BACKEND");
    std::printf("ZS_BACKEND=%s\n", backend ? backend : "(unset)");
    return 0;
  }
  if (mode == "fail" && argc == 5) {  // fail RANK CODE DIR: RANK exits CODE, others sleep
    WritePid(argv[4]);
    if (rank == std::atoi(argv[2])) {
      WaitForAllPids(argv[4]);
      std::fprintf(stderr, "rank %d failing on purpose\n", rank);
      return std::atoi(argv[3]);
    }
    SleepForever();
  }
  if (mode == "kill-self" && argc == 4) {  // kill-self RANK DIR: RANK dies by SIGKILL
    WritePid(argv[3]);
    if (rank == std::atoi(argv[2])) {
      WaitForAllPids(argv[3]);
      ::raise(SIGKILL);
    }
    SleepForever();
  }
  if (mode == "sleep" && argc == 3) {
    WritePid(argv[2]);
    SleepForever();
  }
  if (mode == "ignore-term" && argc == 3) {
    ::signal(SIGTERM, SIG_IGN);
    WritePid(argv[2]);
    SleepForever();
  }
  if (mode == "grandchild" && argc == 3) {  // leaves a sleeping child behind and exits 0
    const pid_t child = ::fork();
    if (child == 0) SleepForever();
    WriteFile(std::string(argv[2]) + "/grandchild." + std::to_string(rank), std::to_string(child));
    return 0;
  }
  if (mode == "shm" && argc == 5) {  // shm SHM_DIR FAILING_RANK DIR: leaves <pid>:zerorun-test
    WriteFile(std::string(argv[2]) + "/" + std::to_string(::getpid()) + ":zerorun-test",
              "what libfabric's shm provider leaves behind");
    WritePid(argv[4]);
    if (rank == std::atoi(argv[3])) {
      WaitForAllPids(argv[4]);
      return 1;
    }
    if (std::atoi(argv[3]) < 0) return 0;
    SleepForever();
  }
  std::fprintf(stderr, "zerorun_test_rank: unknown mode '%s' (or wrong arguments)\n", mode.c_str());
  return 99;
}
