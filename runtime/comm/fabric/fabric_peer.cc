#include "runtime/comm/fabric/fabric_peer.h"

#include <fmt/format.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "runtime/base/process_stat.h"

namespace zs {
namespace {

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
  const StatusOr<ProcessStat> stat = ReadProcessStat(self.pid);
  self.start_time = stat.ok() ? stat->start_time : 0;
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
  return PeerOnThisHost(peer) && ProcessGone(peer.pid, peer.start_time);
}

namespace {
// The value a peer expects at PeerMemoryProbeAddress(): "zsfabric" in ASCII.
constexpr uint64_t kProbeValue = 0x7a73666162726963ull;
const volatile uint64_t probe_word = kProbeValue;
}  // namespace

PeerLiveness::PeerLiveness(std::vector<FabricPeer> peers, std::chrono::nanoseconds period)
    : peers_(std::move(peers)),
      period_ns_(period.count()),
      next_check_ns_(new std::atomic<int64_t>[peers_.size()]),
      gone_(new std::atomic<bool>[peers_.size()]) {
  for (size_t i = 0; i < peers_.size(); ++i) {
    next_check_ns_[i].store(0, std::memory_order_relaxed);
    gone_[i].store(false, std::memory_order_relaxed);
  }
}

bool PeerLiveness::Gone(int peer) {
  if (gone_[peer].load(std::memory_order_relaxed)) return true;
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  if (now < next_check_ns_[peer].load(std::memory_order_relaxed)) return false;
  next_check_ns_[peer].store(now + period_ns_, std::memory_order_relaxed);
  if (!PeerGone(peers_[peer])) return false;
  gone_[peer].store(true, std::memory_order_relaxed);
  return true;
}

Status ReadPeerMemory(pid_t pid, void* local, uint64_t remote, size_t length) {
  size_t done = 0;
  while (done < length) {
    iovec to{static_cast<char*>(local) + done, length - done};
    iovec from{reinterpret_cast<void*>(remote + done), length - done};
    const ssize_t n = process_vm_readv(pid, &to, 1, &from, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int error = n < 0 ? errno : EIO;
      return UnavailableError(fmt::format("process_vm_readv of {} bytes at {:#x} from pid {} "
                                          "failed after {} bytes: {}",
                                          length, remote, pid, done, std::strerror(error)));
    }
    done += size_t(n);
  }
  return OkStatus();
}

uint64_t PeerMemoryProbeAddress() {
  return reinterpret_cast<uint64_t>(const_cast<const uint64_t*>(&probe_word));
}

bool PeerMemoryReadable(pid_t pid, uint64_t probe_address) {
  uint64_t value = 0;
  return ReadPeerMemory(pid, &value, probe_address, sizeof(value)).ok() && value == kProbeValue;
}

}  // namespace zs
