// FabricPeer: who a rank of a fabric group is (host, pid, process start time), published through
// the store at Connect so that a rank waiting on a peer of the same host can tell a slow peer
// from a dead one.
//
// Contract
// - SelfPeer() describes the calling process; Encode/Decode move a FabricPeer through the store
//   as one line of text ("host pid start_time").
// - PeerGone(peer) is true only when the peer is on this host and its process no longer exists
//   (kill(pid, 0) fails with ESRCH, or /proc says zombie, or the pid was reused by a process
//   that started at another time). A peer on another host is never reported gone here: its
//   death shows as a transport error or a timeout.
// - Pure functions over the OS process table; callable from any thread. PeerGone costs one
//   syscall and one small /proc read: call it every few hundred ms, not in a tight loop.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

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

}  // namespace zs
