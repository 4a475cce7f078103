#include "runtime/base/termination_signals.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cstring>

namespace zs {
namespace {

// The messages, written before any handler can run.
char g_interrupted_int[128];
char g_interrupted_term[128];

void OnTerminationSignal(int sig) {
  const char* text = sig == SIGINT ? g_interrupted_int : g_interrupted_term;
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, text, std::strlen(text));
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// Whether `sa` runs a handler that lives in libinfinipath or libpsm.
bool IsPsmHandler(const struct sigaction& sa) {
  if (sa.sa_handler == SIG_DFL || sa.sa_handler == SIG_IGN) return false;
  const void* handler = (sa.sa_flags & SA_SIGINFO) ? reinterpret_cast<void*>(sa.sa_sigaction)
                                                   : reinterpret_cast<void*>(sa.sa_handler);
  Dl_info info{};
  if (::dladdr(handler, &info) == 0 || info.dli_fname == nullptr) return false;
  const std::string_view file = info.dli_fname;
  return file.find("infinipath") != std::string_view::npos ||
         file.find("libpsm") != std::string_view::npos;
}

void Compose(char* out, std::string_view program, const char* signal_name) {
  const size_t n = std::min<size_t>(program.size(), 63);
  std::memcpy(out, "\n", 1);
  std::memcpy(out + 1, program.data(), n);
  out[1 + n] = '\0';
  std::strcat(out, ": interrupted by ");
  std::strcat(out, signal_name);
  std::strcat(out, "\n");
}

}  // namespace

void TakeBackTerminationSignals(std::string_view program) {
  const bool backtraces_asked =
      std::getenv("HFI_NO_BACKTRACE") != nullptr || std::getenv("IPATH_NO_BACKTRACE") != nullptr;
  ::setenv("HFI_NO_BACKTRACE", "1", /*overwrite=*/0);
  ::setenv("IPATH_NO_BACKTRACE", "1", /*overwrite=*/0);
  Compose(g_interrupted_int, program, "SIGINT");
  Compose(g_interrupted_term, program, "SIGTERM");
  for (int sig : {SIGINT, SIGTERM}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler == SIG_IGN) continue;
    struct sigaction sa {};
    sa.sa_handler = OnTerminationSignal;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
  if (backtraces_asked) return;
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGABRT, SIGFPE, SIGQUIT, SIGSYS, SIGTRAP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && IsPsmHandler(old)) ::signal(sig, SIG_DFL);
  }
}

}  // namespace zs
