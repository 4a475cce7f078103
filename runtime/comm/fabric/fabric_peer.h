// FabricPeer: who a rank of a fabric group is (host, pid, process start time), published through
// the store at Connect so that a rank waiting on a peer of the same host can tell a slow peer
// from a dead one.
//
// Contract
// - SelfPeer() describes the calling process; Encode/Decode move a FabricPeer through the store
//   as one line of text ("host pid start_time").
// - PeerGone(peer) is true only when the peer is on this host and its process no longer exists:
//   ProcessGone(pid, start_time) of runtime/base/process_stat.h ([Note: process gone]: kill(pid,
//   0) fails with ESRCH, or /proc says zombie, or the pid was reused by a process that started
//   at another time). A peer on another host is never reported gone here: its death shows as a
//   transport error or a timeout.
// - Pure functions over the OS process table; callable from any thread. PeerGone costs one
//   syscall and one small /proc read: call it every few hundred ms, not in a tight loop.
// - ReadPeerMemory copies from another process of this host (process_vm_readv, cross-memory
//   attach: one copy, no shared buffer); it needs the kernel to allow it (the same user and
//   ptrace access: Yama's ptrace_scope 0, or a container without Yama). The fabric backend
//   probes it at connect (PeerMemoryReadable of each peer's PeerMemoryProbeAddress) before
//   relying on it.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"

namespace zs {

struct FabricPeer {
  std::string host;
  pid_t pid = 0;
  uint64_t start_time = 0;  // field 22 of /proc/<pid>/stat (clock ticks since boot)

  // "pid 1234 on host 'node3'"
  std::string Describe() const;
};

FabricPeer SelfPeer();
std::string EncodePeer(const FabricPeer& peer);
StatusOr<FabricPeer> DecodePeer(std::string_view text);

// True when `peer` runs on this host (same host name as SelfPeer()).
bool PeerOnThisHost(const FabricPeer& peer);
bool PeerGone(const FabricPeer& peer);

// PeerGone for the peers of one group, asked at most once per `period` for each peer; in
// between, the last answer stands (a peer once gone stays gone). For the check before every
// send ([Note: never send to a dead peer] in fabric_transfer.cc), which otherwise reads
// /proc/<pid>/stat (several microseconds) once per message. Thread-safe.
class PeerLiveness {
 public:
  PeerLiveness(std::vector<FabricPeer> peers, std::chrono::nanoseconds period);
  bool Gone(int peer);

 private:
  const std::vector<FabricPeer> peers_;
  const int64_t period_ns_;
  std::unique_ptr<std::atomic<int64_t>[]> next_check_ns_;  // steady clock
  std::unique_ptr<std::atomic<bool>[]> gone_;
};

// Copies `length` bytes at address `remote` of process `pid` to `local`. Unavailable (naming
// pid, address and errno) when the process is gone or the range cannot be read.
Status ReadPeerMemory(pid_t pid, void* local, uint64_t remote, size_t length);

// The address of a word in this process that holds a known value, for a peer to read with
// ReadPeerMemory; PeerMemoryReadable reads it from `pid` and compares.
uint64_t PeerMemoryProbeAddress();
bool PeerMemoryReadable(pid_t pid, uint64_t probe_address);

}  // namespace zs
