// A rank program for zerorun_test: behaves according to argv[1] (see the cases below).
// Every mode that stays alive first writes its pid to <dir>/pid.<rank>, so the test can check
// afterwards that nothing is left running.
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
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

pid_t ReadPid(const std::string& dir, int rank) {
  std::ifstream in(dir + "/pid." + std::to_string(rank));
  pid_t pid = -1;
  in >> pid;
  return pid;
}

// The state letter of /proc/<pid>/stat ('R', 'S', 'T', 'Z', ...), or 0.
char ProcessState(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t paren = line.rfind(')');
  return paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : 0;
}

sockaddr_un SocketAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  return addr;
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
  if (mode == "killed-peers-fail" && argc == 4) {
    // killed-peers-fail RANK DIR: every other rank connects to RANK (a Unix socket, as a
    // communicator would), RANK dies by SIGKILL once all are connected, and each other rank
    // exits 1 at once when it sees the connection close: as peers of a killed rank do.
    const int killed = std::atoi(argv[2]);
    const std::string dir = argv[3], path = dir + "/killed.sock";
    if (rank == killed) {
      const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
      const sockaddr_un addr = SocketAddress(path);
      if (::bind(s, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0 ||
          ::listen(s, 64) != 0) {
        std::perror(path.c_str());
        return 92;
      }
      WritePid(dir);  // after listen: the peers connect once they see every pid
      for (int k = 1; k < World(); ++k) {
        if (::accept(s, nullptr, nullptr) < 0) return 93;
      }
      ::raise(SIGKILL);
    }
    WritePid(dir);
    WaitForAllPids(dir);
    const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
    const sockaddr_un addr = SocketAddress(path);
    if (::connect(s, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
      std::perror(path.c_str());
      return 94;
    }
    char byte;
    while (::read(s, &byte, 1) != 0) {
    }
    std::fprintf(stderr, "rank %d: rank %d closed its connection\n", rank, killed);
    return 1;
  }
  if (mode == "stopped-peers-time-out" && argc == 4) {
    // stopped-peers-time-out RANK DIR: RANK stops itself (SIGSTOP); every other rank waits until
    // it is stopped, then 200 ms (its "comm timeout"), then exits 1 naming it.
    const int stopped = std::atoi(argv[2]);
    const std::string dir = argv[3];
    WritePid(dir);
    WaitForAllPids(dir);
    if (rank == stopped) {
      ::raise(SIGSTOP);
      SleepForever();
    }
    const pid_t pid = ReadPid(dir, stopped);
    for (int i = 0; i < 10'000 && ProcessState(pid) != 'T'; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    std::fprintf(stderr, "rank %d: timed out after 200 ms waiting for rank(s) %d\n", rank, stopped);
    return 1;
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
