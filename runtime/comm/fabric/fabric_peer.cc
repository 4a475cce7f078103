#include "runtime/comm/fabric/fabric_peer.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <sstream>

namespace zs {
namespace {

// Reads the state letter and the start time of `pid` from /proc/<pid>/stat. False when the
// file cannot be read (the process is gone, or /proc is not mounted).
bool ReadProcStat(pid_t pid, char* state, uint64_t* start_time) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  if (!in) return false;
  std::string line;
  std::getline(in, line);
  // The command name (field 2) may hold spaces and parentheses: fields resume after the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream fields(line.substr(close + 1));
  std::string field;
  // Fields 3 (state) .. 22 (starttime).
  for (int index = 3; index <= 22; ++index) {
    if (!(fields >> field)) return false;
    if (index == 3) *state = field.empty() ? '?' : field[0];
  }
  *start_time = std::strtoull(field.c_str(), nullptr, 10);
  return true;
}

std::string HostName() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

}  // namespace

std::string FabricPeer::Describe() const { return fmt::format("pid {} on host '{}'", pid, host); }

FabricPeer SelfPeer() {
  FabricPeer self;
  self.host = HostName();
  self.pid = ::getpid();
  char state = '?';
  if (!ReadProcStat(self.pid, &state, &self.start_time)) self.start_time = 0;
  return self;
}

std::string EncodePeer(const FabricPeer& peer) {
  return fmt::format("{} {} {}", peer.host, peer.pid, peer.start_time);
}

StatusOr<FabricPeer> DecodePeer(std::string_view text) {
  std::istringstream in{std::string(text)};
  FabricPeer peer;
  long long pid = 0;
  if (!(in >> peer.host >> pid >> peer.start_time) || pid <= 0) {
    return InvalidArgumentError(fmt::format("malformed fabric peer record '{}'", text));
  }
  peer.pid = pid_t(pid);
  return peer;
}

bool PeerOnThisHost(const FabricPeer& peer) { return peer.host == HostName(); }

bool PeerGone(const FabricPeer& peer) {
  if (!PeerOnThisHost(peer)) return false;
  if (::kill(peer.pid, 0) != 0 && errno == ESRCH) return true;
  char state = '?';
  uint64_t start_time = 0;
  if (!ReadProcStat(peer.pid, &state, &start_time)) return false;  // cannot tell: assume alive
  if (state == 'Z' || state == 'X') return true;                    // killed, not yet reaped
  return peer.start_time != 0 && start_time != peer.start_time;     // pid reused
}

}  // namespace zs
