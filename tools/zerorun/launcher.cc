#include "tools/zerorun/launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include "runtime/base/cpu_affinity.h"
#include "runtime/base/process_stat.h"

extern char** environ;

namespace zs {
namespace {

using Clock = std::chrono::steady_clock;

// [Note: blame] How long a rank that exited with an error code waits to be named, in case a
// rank killed by a signal or stopped shows up: far longer than the gap between a killed
// process closing its sockets and becoming a zombie, short against the job.
constexpr std::chrono::milliseconds kBlameWindow{250};

// One output stream of one rank, relayed line by line.
struct Relay {
  int fd = -1;      // read end of the pipe; -1 once closed
  int out_fd = -1;  // where tagged lines go
  std::string prefix;
  std::string partial;  // bytes after the last newline
};

struct Rank {
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  int suspended_by = 0;  // while running: stopped by this signal (waitid WSTOPPED), or 0
  RankOutcome outcome;
};

void WriteAll(int fd, std::string_view data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{fd, POLLOUT, 0};
        ::poll(&p, 1, 100);
        continue;
      }
      return;  // a closed stdout (EPIPE): drop the output, keep running the job
    }
    done += size_t(n);
  }
}

void Say(int fd, std::string_view message) { WriteAll(fd, fmt::format("zerorun: {}\n", message)); }

// Emits the complete lines of `relay.partial` (all of it when `flush`).
void EmitLines(Relay& relay, bool flush) {
  constexpr size_t kMaxLine = 64 * 1024;  // a longer line is emitted in pieces
  std::string out;
  size_t start = 0;
  while (true) {
    size_t nl = relay.partial.find('\n', start);
    if (nl == std::string::npos) {
      if (relay.partial.size() - start >= kMaxLine || (flush && start < relay.partial.size())) {
        nl = relay.partial.size();
      } else {
        break;
      }
    }
    out += relay.prefix;
    out.append(relay.partial, start, nl - start);
    out += '\n';
    start = std::min(nl + 1, relay.partial.size());
    if (start >= relay.partial.size()) break;
  }
  relay.partial.erase(0, start);
  if (!out.empty()) {
    // Only this thread writes out_fd, and only whole lines: ranks' lines never mix.
    WriteAll(relay.out_fd, out);
  }
}

// Reads what is available; closes the relay at end of file.
void Pump(Relay& relay) {
  char buffer[64 * 1024];
  while (relay.fd >= 0) {
    ssize_t n = ::read(relay.fd, buffer, sizeof(buffer));
    if (n > 0) {
      relay.partial.append(buffer, size_t(n));
      EmitLines(relay, false);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    ::close(relay.fd);  // end of file or error
    relay.fd = -1;
    EmitLines(relay, true);
  }
}

std::string SignalName(int sig) {
  const char* name = ::strsignal(sig);
  return name ? name : "?";
}

std::string Describe(const RankOutcome& o) {
  if (o.exited) return fmt::format("exited with code {}", o.exit_code);
  return fmt::format("was killed by signal {} ({})", o.signal, SignalName(o.signal));
}

std::string Plural(int n, std::string_view one) {
  return fmt::format("{} {}{}", n, one, n == 1 ? "" : "s");
}

std::string Seconds(std::chrono::milliseconds ms) {
  return fmt::format("{:g} s", ms.count() / 1e3);
}

// Removes <shm_dir>/<pid>:* (see [Note: shm leftovers] in launcher.h).
void RemoveShmLeftovers(const std::string& shm_dir, pid_t pid) {
  DIR* dir = ::opendir(shm_dir.c_str());
  if (dir == nullptr) return;
  const std::string prefix = fmt::format("{}:", pid);
  while (dirent* entry = ::readdir(dir)) {
    if (std::string_view(entry->d_name).substr(0, prefix.size()) == prefix) {
      ::unlinkat(::dirfd(dir), entry->d_name, 0);
    }
  }
  ::closedir(dir);
}

// The pid in a job directory's name "zerorun-<pid>-XXXXXX", or -1.
pid_t JobDirectoryPid(std::string_view name) {
  constexpr std::string_view kPrefix = "zerorun-";
  if (name.substr(0, kPrefix.size()) != kPrefix) return -1;
  name.remove_prefix(kPrefix.size());
  const size_t dash = name.find('-');
  if (dash == 0 || dash == std::string_view::npos || dash > 9) return -1;
  pid_t pid = 0;
  for (char c : name.substr(0, dash)) {
    if (c < '0' || c > '9') return -1;
    pid = pid * 10 + (c - '0');
  }
  return pid;
}

// Removes what launchers that died without cleaning up left in `temp_dir` and `shm_dir`
// ([Note: dead launcher] in launcher.h). Dead is ProcessGone ([Note: process gone] in
// runtime/base/process_stat.h); no start time is recorded for the pids of a job directory.
void RemoveLeftoversOfDeadLaunchers(const std::string& temp_dir, const std::string& shm_dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(temp_dir, ec)) {
    const pid_t launcher = JobDirectoryPid(entry.path().filename().string());
    if (launcher < 0 || !entry.is_directory(ec) || !ProcessGone(launcher)) continue;
    std::ifstream ranks(entry.path() / "ranks");
    bool all_gone = true;
    for (long pid; ranks >> pid;) {
      if (ProcessGone(pid_t(pid))) {
        RemoveShmLeftovers(shm_dir, pid_t(pid));
      } else {
        all_gone = false;  // a live process has the pid now: its names are not ours
      }
    }
    if (all_gone) std::filesystem::remove_all(entry.path(), ec);
  }
}

// The environment of one rank: the caller's, with our variables replaced.
std::vector<std::string> RankEnvironment(const LaunchOptions& o, int rank,
                                         const std::string& rendezvous) {
  std::vector<std::pair<std::string, std::string>> ours = {
      {"ZS_RANK", std::to_string(rank)},       {"ZS_WORLD_SIZE", std::to_string(o.num_ranks)},
      {"ZS_LOCAL_RANK", std::to_string(rank)}, {"ZS_LOCAL_SIZE", std::to_string(o.num_ranks)},
      {"ZS_RENDEZVOUS", rendezvous},
  };
  if (!o.backend.empty()) ours.emplace_back("ZS_BACKEND", o.backend);
  // libfabric's psm2 provider loads libpsm2/libinfinipath when it probes, and they install
  // signal handlers that write "<program>.<host>-<pid>,...btr" backtrace files into the working
  // directory when a rank is stopped (as zerorun stops the others after a failure). Turn that
  // off unless the caller asked for it.
  const std::pair<std::string, std::string> defaults[] = {{"HFI_NO_BACKTRACE", "1"},
                                                          {"IPATH_NO_BACKTRACE", "1"}};
  std::vector<std::string> env;
  std::vector<bool> present(std::size(defaults), false);
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    std::string_view entry(*e);
    const std::string_view name = entry.substr(0, entry.find('='));
    const bool replaced =
        std::any_of(ours.begin(), ours.end(), [&](const auto& kv) { return kv.first == name; });
    if (!replaced) env.emplace_back(entry);
    for (size_t i = 0; i < std::size(defaults); ++i) {
      if (defaults[i].first == name) present[i] = true;
    }
  }
  for (const auto& [k, v] : ours) env.push_back(k + "=" + v);
  for (size_t i = 0; i < std::size(defaults); ++i) {
    if (!present[i]) env.push_back(defaults[i].first + "=" + defaults[i].second);
  }
  return env;
}

class Job {
 public:
  explicit Job(const LaunchOptions& o) : o_(o) {}
  ~Job() { Cleanup(); }

  StatusOr<LaunchResult> Run();

 private:
  Status Prepare();
  Status Start(int rank);
  void Loop();
  // Reaps the ranks that exited, follows stops and continues; names the failure (Blame).
  void Reap();
  // [Note: blame]: names the failing rank and stops the job, or waits for kBlameWindow.
  void Blame();
  // Stops the job: sends `sig` to every running rank's group and arms the SIGKILL deadline.
  void Stop(int sig, int exit_code, std::string message);
  void SignalRunning(int sig);
  int CountRunning() const;
  void Cleanup();

  const LaunchOptions& o_;
  std::vector<int> allowed_cpus_;  // what zerorun may use: the ranks' bindings come from it
  std::string job_dir_;            // [Note: dead launcher]; removed by Cleanup
  int ranks_fd_ = -1;              // <job_dir_>/ranks, append-only
  std::string rendezvous_;
  int devnull_ = -1;
  std::vector<Rank> ranks_;
  std::vector<Relay> relays_;
  bool stopping_ = false;
  bool killed_ = false;
  std::optional<Clock::time_point> kill_deadline_;
  std::optional<Clock::time_point> job_deadline_;
  int exit_code_ = 0;
  std::string failure_;
  int failed_rank_ = -1;
  // Ranks that failed by themselves before the job was stopped, in the order seen (indices).
  std::vector<size_t> failed_;
  std::optional<Clock::time_point> blame_deadline_;  // [Note: blame]
};

Status Job::Prepare() {
  if (o_.num_ranks < 1) {
    return InvalidArgumentError(
        fmt::format("the number of ranks ({}) must be at least 1", o_.num_ranks));
  }
  if (o_.command.empty()) return InvalidArgumentError("no program to run was given");
  allowed_cpus_ = AllowedCpus();
  const char* tmp = std::getenv("TMPDIR");
  const std::string temp_dir = tmp && *tmp ? tmp : "/tmp";
  RemoveLeftoversOfDeadLaunchers(temp_dir, o_.shm_dir);
  std::string templ = fmt::format("{}/zerorun-{}-XXXXXX", temp_dir, ::getpid());
  if (::mkdtemp(templ.data()) == nullptr) {
    return IoError(
        fmt::format("cannot create the job directory '{}': {}", templ, std::strerror(errno)));
  }
  job_dir_ = templ;
  const std::string ranks_path = job_dir_ + "/ranks";
  ranks_fd_ = ::open(ranks_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (ranks_fd_ < 0) {
    return IoError(fmt::format("cannot create '{}': {}", ranks_path, std::strerror(errno)));
  }
  if (o_.rendezvous.empty()) {
    rendezvous_ = job_dir_ + "/rendezvous";
    if (::mkdir(rendezvous_.c_str(), 0700) != 0) {
      return IoError(fmt::format("cannot create the rendezvous directory '{}': {}", rendezvous_,
                                 std::strerror(errno)));
    }
  } else if (o_.rendezvous.rfind("tcp://", 0) == 0) {
    rendezvous_ = o_.rendezvous;  // rank 0 serves it (runtime/topology/tcp_store.h)
  } else {
    rendezvous_ = o_.rendezvous;
    std::error_code ec;
    std::filesystem::create_directories(rendezvous_, ec);
    if (ec) {
      return IoError(fmt::format("cannot create the rendezvous directory '{}': {}", rendezvous_,
                                 ec.message()));
    }
  }
  if (!o_.output_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(o_.output_dir, ec);
    if (ec) {
      return IoError(
          fmt::format("cannot create the output directory '{}': {}", o_.output_dir, ec.message()));
    }
  }
  devnull_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (devnull_ < 0) return IoError(fmt::format("cannot open /dev/null: {}", std::strerror(errno)));
  if (o_.timeout.count() > 0) job_deadline_ = Clock::now() + o_.timeout;
  return OkStatus();
}

Status Job::Start(int rank) {
  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<std::string> env = RankEnvironment(o_, rank, rendezvous_);
  std::vector<char*> envp, argv;
  for (std::string& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o_.command;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  const std::vector<int> cpus = RankCpus(o_.bind, rank, allowed_cpus_);
  cpu_set_t cpu_set;
  CPU_ZERO(&cpu_set);
  for (int c : cpus) CPU_SET(c, &cpu_set);
  const bool bind = !cpus.empty() && cpus.size() < allowed_cpus_.size();

  int out[2] = {-1, -1}, err[2] = {-1, -1}, status[2] = {-1, -1};
  auto close_all = [&] {
    for (int fd : {out[0], out[1], err[0], err[1], status[0], status[1]}) {
      if (fd >= 0) ::close(fd);
    }
  };
  if (o_.output_dir.empty()) {
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      close_all();
      return IoError(
          fmt::format("cannot create the output pipes of rank {}: {}", rank, std::strerror(errno)));
    }
  } else {
    for (auto [fds, ext] : {std::pair{out, "stdout"}, std::pair{err, "stderr"}}) {
      const std::string path = fmt::format("{}/rank{}.{}", o_.output_dir, rank, ext);
      fds[1] = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fds[1] < 0) {
        const int e = errno;
        close_all();
        return IoError(fmt::format("cannot create '{}': {}", path, std::strerror(e)));
      }
    }
  }
  if (::pipe2(status, O_CLOEXEC) != 0) {
    close_all();
    return IoError(fmt::format("cannot create a pipe for rank {}: {}", rank, std::strerror(errno)));
  }
  const pid_t launcher = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int e = errno;
    close_all();
    return IoError(fmt::format("cannot fork rank {}: {}", rank, std::strerror(e)));
  }
  if (pid == 0) {
    // [Note: dead launcher] Die with zerorun; if it already died, the parent is someone else.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != launcher) ::_exit(128 + SIGKILL);
    ::setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    // Best effort: a binding the kernel refuses leaves the rank where zerorun may run.
    if (bind) (void)::sched_setaffinity(0, sizeof(cpu_set), &cpu_set);
    if (rank != 0) ::dup2(devnull_, STDIN_FILENO);
    ::dup2(out[1], STDOUT_FILENO);
    ::dup2(err[1], STDERR_FILENO);
    ::execvpe(argv[0], argv.data(), envp.data());
    const int e = errno;
    [[maybe_unused]] ssize_t n = ::write(status[1], &e, sizeof(e));
    ::_exit(127);
  }
  ::setpgid(pid, pid);  // also here: no race with a signal sent before the child ran
  // The job's record, for the next launcher if this one is killed ([Note: dead launcher]).
  const std::string line = fmt::format("{}\n", pid);
  [[maybe_unused]] ssize_t recorded = ::write(ranks_fd_, line.data(), line.size());
  ::close(status[1]);
  status[1] = -1;
  ::close(out[1]);
  ::close(err[1]);
  out[1] = err[1] = -1;
  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(status[0], &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  ::close(status[0]);
  status[0] = -1;

  Rank r;
  r.rank = rank;
  r.pid = pid;
  r.running = true;
  r.outcome.rank = rank;
  r.outcome.pid = pid;
  ranks_.push_back(r);
  if (o_.output_dir.empty()) {
    for (auto [fd, to] : {std::pair{out[0], o_.out_fd}, std::pair{err[0], o_.err_fd}}) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
      relays_.push_back(Relay{fd, to, fmt::format("[r{}] ", rank), {}});
    }
  }
  if (n == sizeof(exec_errno)) {
    return NotFoundError(
        fmt::format("cannot execute '{}': {}", o_.command[0], std::strerror(exec_errno)));
  }
  return OkStatus();
}

int Job::CountRunning() const {
  return int(std::count_if(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.running; }));
}

void Job::SignalRunning(int sig) {
  for (const Rank& r : ranks_) {
    if (r.running) {
      ::kill(-r.pid, sig);
      // A stopped rank acts on a signal only once continued (SIGKILL needs no help).
      if (sig != SIGKILL) ::kill(-r.pid, SIGCONT);
    }
  }
}

void Job::Stop(int sig, int exit_code, std::string message) {
  if (!stopping_) {
    stopping_ = true;
    exit_code_ = exit_code;
    failure_ = std::move(message);
    Say(o_.err_fd, failure_);
    for (Rank& r : ranks_) {
      r.outcome.stopped = r.running;
      r.outcome.suspended_by = r.running ? r.suspended_by : 0;
    }
  }
  SignalRunning(sig);
  if (sig == SIGKILL) {
    killed_ = true;
  } else if (!kill_deadline_) {
    kill_deadline_ = Clock::now() + o_.grace;
  }
}

void Job::Reap() {
  for (size_t i = 0; i < ranks_.size(); ++i) {
    Rank& r = ranks_[i];
    if (!r.running) continue;
    siginfo_t info{};
    // WNOWAIT: the pid stays ours (a zombie) while its group and its shm files are cleaned.
    if (::waitid(P_PID, id_t(r.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) {
      // Still running: follow its stops and continues ([Note: blame]).
      info = {};
      if (::waitid(P_PID, id_t(r.pid), &info, WSTOPPED | WCONTINUED | WNOHANG) == 0 &&
          info.si_pid != 0) {
        r.suspended_by = info.si_code == CLD_STOPPED ? info.si_status : 0;
      }
      continue;
    }
    ::kill(-r.pid, SIGKILL);  // whatever the rank left running in its group
    RemoveShmLeftovers(o_.shm_dir, r.pid);
    int status = 0;
    while (::waitpid(r.pid, &status, 0) < 0 && errno == EINTR) {
    }
    r.running = false;
    r.suspended_by = 0;
    r.outcome.exited = WIFEXITED(status);
    r.outcome.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 0;
    r.outcome.signal = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    const bool failed = !r.outcome.exited || r.outcome.exit_code != 0;
    if (failed && !stopping_) failed_.push_back(i);
  }
  if (!failed_.empty() && !stopping_) Blame();
}

void Job::Blame() {
  // [Note: blame] (1) killed by a signal, (2) stopped, (3) after the window, the first error.
  const Rank* culprit = nullptr;
  for (size_t i : failed_) {
    if (!ranks_[i].outcome.exited) {
      culprit = &ranks_[i];
      break;
    }
  }
  if (culprit == nullptr) {
    for (const Rank& r : ranks_) {
      if (r.running && r.suspended_by != 0) {
        culprit = &r;
        break;
      }
    }
  }
  if (culprit == nullptr) {
    const auto now = Clock::now();
    if (!blame_deadline_) blame_deadline_ = now + kBlameWindow;
    if (now < *blame_deadline_ && CountRunning() > 0) return;
    culprit = &ranks_[failed_.front()];
  }
  const RankOutcome& o = culprit->outcome;
  std::string message;
  int exit_code = 0;
  if (culprit->running) {
    message = fmt::format("rank {} (pid {}) is stopped by signal {} ({})", culprit->rank,
                          culprit->pid, culprit->suspended_by, SignalName(culprit->suspended_by));
    exit_code = 128 + culprit->suspended_by;
  } else {
    message = fmt::format("rank {} (pid {}) {}", culprit->rank, culprit->pid, Describe(o));
    exit_code = o.exited ? o.exit_code : 128 + o.signal;
  }
  // The other failures seen: consequences under (1) and (2), of unknown order under (3).
  std::string others_failed;
  for (size_t i : failed_) {
    if (&ranks_[i] == culprit) continue;
    others_failed += fmt::format("{}rank {} {}", others_failed.empty() ? "" : ", ", ranks_[i].rank,
                                 Describe(ranks_[i].outcome));
  }
  if (!others_failed.empty()) {
    const bool consequence = culprit->running || !o.exited;
    message += fmt::format("; {} {}", consequence ? "then" : "also", others_failed);
  }
  const int others = CountRunning() - (culprit->running ? 1 : 0);
  if (culprit->running) {
    message += others > 0 ? fmt::format("; stopping it and the other {}", Plural(others, "rank"))
                          : std::string("; stopping it");
  } else if (others > 0) {
    message += fmt::format("; stopping the other {}", Plural(others, "rank"));
  }
  failed_rank_ = culprit->rank;
  Stop(SIGTERM, exit_code, std::move(message));
}

void Job::Loop() {
  std::optional<Clock::time_point> drain_deadline;
  while (true) {
    const bool any_running = CountRunning() > 0;
    const bool any_open =
        std::any_of(relays_.begin(), relays_.end(), [](const Relay& r) { return r.fd >= 0; });
    if (!any_running && !any_open) break;
    if (!any_running) {
      // Every rank is reaped and its group killed; a descendant that left the group may still
      // hold a pipe: give it a moment, then stop relaying.
      if (!drain_deadline) drain_deadline = Clock::now() + std::chrono::seconds(2);
      if (Clock::now() >= *drain_deadline) break;
    }
    std::vector<pollfd> fds;
    std::vector<Relay*> polled;
    if (o_.interrupt_fd >= 0) fds.push_back({o_.interrupt_fd, POLLIN, 0});
    for (Relay& r : relays_) {
      if (r.fd < 0) continue;
      fds.push_back({r.fd, POLLIN, 0});
      polled.push_back(&r);
    }
    // Child exits are found by polling waitid: 50 ms bounds how late a failure is noticed.
    auto wait = std::chrono::milliseconds(50);
    const auto now = Clock::now();
    const std::optional<Clock::time_point> blame =
        stopping_ ? std::optional<Clock::time_point>() : blame_deadline_;
    for (auto d : {kill_deadline_, job_deadline_, blame}) {
      if (d)
        wait = std::min(wait,
                        std::max(std::chrono::milliseconds(0),
                                 std::chrono::duration_cast<std::chrono::milliseconds>(*d - now)));
    }
    ::poll(fds.data(), fds.size(), int(wait.count()));
    const size_t first_relay = o_.interrupt_fd >= 0 ? 1 : 0;
    for (size_t i = first_relay; i < fds.size(); ++i) {
      if (fds[i].revents) Pump(*polled[i - first_relay]);
    }
    if (o_.interrupt_fd >= 0 && (fds[0].revents & POLLIN)) {
      unsigned char sig = 0;
      while (::read(o_.interrupt_fd, &sig, 1) == 1) {
        const int running = CountRunning();
        if (stopping_) {
          Say(o_.err_fd, fmt::format("received {} again; killing the {}", ::sigabbrev_np(sig),
                                     Plural(running, "running rank")));
          Stop(SIGKILL, exit_code_, "");
        } else {
          Stop(sig, 128 + sig,
               fmt::format("received SIG{}; forwarding it to the {}", ::sigabbrev_np(sig),
                           Plural(running, "running rank")));
        }
      }
    }
    Reap();
    if (job_deadline_ && Clock::now() >= *job_deadline_ && !stopping_) {
      Stop(SIGTERM, 124,
           fmt::format("timed out after {}; stopping the {}", Seconds(o_.timeout),
                       Plural(CountRunning(), "running rank")));
    }
    if (kill_deadline_ && !killed_ && Clock::now() >= *kill_deadline_ && CountRunning() > 0) {
      Say(o_.err_fd, fmt::format("{} still running {} after SIGTERM; sending SIGKILL",
                                 Plural(CountRunning(), "rank"), Seconds(o_.grace)));
      killed_ = true;
      SignalRunning(SIGKILL);
    }
  }
  for (Relay& r : relays_) {
    if (r.fd >= 0) {
      ::close(r.fd);
      r.fd = -1;
      EmitLines(r, true);
    }
  }
}

void Job::Cleanup() {
  // Only reached with running ranks when starting failed: kill and reap them.
  for (Rank& r : ranks_) {
    if (!r.running) continue;
    ::kill(-r.pid, SIGKILL);
    ::kill(r.pid, SIGKILL);
    while (::waitpid(r.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    RemoveShmLeftovers(o_.shm_dir, r.pid);
    r.running = false;
  }
  for (Relay& r : relays_) {
    if (r.fd >= 0) ::close(r.fd);
    r.fd = -1;
  }
  if (devnull_ >= 0) ::close(devnull_);
  devnull_ = -1;
  if (ranks_fd_ >= 0) ::close(ranks_fd_);
  ranks_fd_ = -1;
  if (!job_dir_.empty()) {  // with the temporary rendezvous in it
    std::error_code ec;
    std::filesystem::remove_all(job_dir_, ec);
    job_dir_.clear();
  }
}

StatusOr<LaunchResult> Job::Run() {
  ZS_RETURN_IF_ERROR(Prepare());
  for (int rank = 0; rank < o_.num_ranks; ++rank) {
    ZS_RETURN_IF_ERROR(Start(rank));  // ~Job kills the ranks already started
  }
  Loop();
  Cleanup();
  LaunchResult result;
  result.exit_code = exit_code_;
  result.failure = failure_;
  result.failed_rank = failed_rank_;
  for (const Rank& r : ranks_) result.ranks.push_back(r.outcome);
  return result;
}

int g_signal_pipe[2] = {-1, -1};

void ForwardSignal(int sig) {
  const int saved = errno;
  const unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] ssize_t n = ::write(g_signal_pipe[1], &b, 1);
  errno = saved;
}

}  // namespace

std::vector<int> RankCpus(CpuBinding bind, int rank, const std::vector<int>& allowed) {
  if (allowed.empty() || bind == CpuBinding::kNone) return allowed;
  return {allowed[size_t(rank) % allowed.size()]};
}

StatusOr<LaunchResult> RunRanks(const LaunchOptions& options) {
  Job job(options);
  return job.Run();
}

StatusOr<int> InstallSignalForwarding() {
  if (g_signal_pipe[0] >= 0) return g_signal_pipe[0];
  if (::pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) {
    return IoError(fmt::format("cannot create the signal pipe: {}", std::strerror(errno)));
  }
  struct sigaction sa {};
  sa.sa_handler = ForwardSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGINT, &sa, nullptr);
  ::sigaction(SIGTERM, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return g_signal_pipe[0];
}

}  // namespace zs
