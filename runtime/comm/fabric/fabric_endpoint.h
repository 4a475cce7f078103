// FabricEndpoint: one libfabric RDM endpoint (fabric, domain, address vector, completion queue)
// of one rank, shared by the communicators of that rank (the world one and every one split
// from it). FabricRequest: one posted tagged send or receive.
//
// Contract
// - Open() names the provider explicitly ("shm", "tcp", ...): with no name fi_getinfo would
//   pick tcp on eth0. `loopback` keeps tcp on the "lo" interface (every rank on one host).
// - Data progress is manual for shm and tcp: nothing moves unless Progress() reads the CQ, also
//   while a send is outstanding or after -FI_EAGAIN. There is no progress thread: the thread
//   waiting for an operation drives Progress() (FabricTransfer's wait loop).
// - Thread-safety: every call into libfabric goes through one mutex per endpoint (the domain is
//   opened FI_THREAD_DOMAIN), so the worker threads of several communicators may post and
//   progress concurrently. Progress() hands each completion to the FabricTransfer that owns the
//   request (FabricTransfer::OnCompletion, under the endpoint mutex).
// - A request is owned by its FabricTransfer until libfabric reports it complete. A transfer
//   that gives up (error, timeout) cancels what it posted; requests that still do not complete
//   are handed to the endpoint (Orphan) and freed when the endpoint closes, so libfabric never
//   writes into freed request memory.
// - Memory is registered per request only when the provider asks for FI_MR_LOCAL (verbs, EFA);
//   shm and tcp do not.
// - Communicator ids (12 bits, 0 = world) name the communicators sharing this endpoint in the
//   tag bits; ReserveCommIds/ReleaseCommId keep them unique within the endpoint.
#pragma once

#include <rdma/fabric.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "runtime/base/status.h"

struct fid_fabric;
struct fid_domain;
struct fid_av;
struct fid_cq;
struct fid_ep;
struct fid_mr;

namespace zs {

class FabricTransfer;

// The cap on FabricEndpoint::eager_size(): what one unmatched eager message may hold in the
// receiver's provider (see [Note: eager sizes]).
inline constexpr size_t kFabricMaxEagerBytes = size_t{64} << 10;

struct FabricRequest {
  fi_context2 context;  // libfabric's per-operation scratch; &context is the op_context
  FabricTransfer* owner = nullptr;  // null once orphaned; guarded by the endpoint mutex
  fid_mr* mr = nullptr;             // only with FI_MR_LOCAL
  bool is_send = false;
  int peer = 0;                     // group rank of the other side
  uint64_t tag = 0;
  void* buffer = nullptr;
  size_t length = 0;
  uint64_t cookie = 0;              // the owner's name for this request
  int slot = -1;                    // the owner's index of this request
  // Filled when the completion is read (under the endpoint mutex).
  int error = 0;                    // positive FI_* errno; 0 = success
  size_t received = 0;              // bytes received (receives)
  char error_detail[192] = {};      // provider text for `error`
};

class FabricEndpoint {
 public:
  static StatusOr<std::unique_ptr<FabricEndpoint>> Open(const std::string& provider,
                                                        bool loopback, int world_size);
  ~FabricEndpoint();
  FabricEndpoint(const FabricEndpoint&) = delete;
  FabricEndpoint& operator=(const FabricEndpoint&) = delete;

  // The provider as libfabric names it ("shm", "tcp;ofi_rxm") and this endpoint's address.
  const std::string& provider_name() const { return provider_name_; }
  const std::string& address() const { return address_; }
  // The most bytes a send may carry with FI_INJECT (fi_info tx_attr->inject_size): the provider
  // copies such a payload when the send is posted. 4096 for shm, 64 for tcp;ofi_rxm.
  size_t inject_size() const { return info_->tx_attr->inject_size; }
  // The most bytes a send may carry and still complete without waiting for the receiver to
  // post its receive (an unmatched one is buffered by the receiver's provider): see
  // [Note: eager sizes]. shm: its inject size (4096). tcp;ofi_rxm: rxm's eager bounce-buffer
  // size, read from the endpoint (FI_OPT_BUFFERED_LIMIT; FI_OFI_RXM_BUFFER_SIZE, default 16384),
  // at most kFabricMaxEagerBytes. Any other provider: its inject size.
  size_t eager_size() const { return eager_size_; }

  // Inserts the addresses of every world rank (index = world rank).
  Status InsertPeers(const std::vector<std::string>& addresses);
  fi_addr_t peer_address(int world_rank) const { return fi_addresses_[world_rank]; }

  // Post a request: 0, -FI_EAGAIN (progress and retry) or another negative FI error.
  ssize_t PostSend(FabricRequest* request, fi_addr_t destination);
  ssize_t PostRecv(FabricRequest* request, fi_addr_t source);
  // Asks the provider to cancel a posted request; it then completes with FI_ECANCELED (or
  // normally, if it was already done).
  void Cancel(FabricRequest* request);
  // Reads up to a batch of completions and hands each to its owner; returns how many were read
  // (0 when nothing was ready).
  int Progress();
  // Takes a request that its owner could not wait for (see the contract above).
  void Orphan(std::unique_ptr<FabricRequest> request);
  // Detaches every request of `owner` that is still posted from it (owner = null) and moves
  // them to the orphan list, with `keep_alive` (the memory they point into, if the owner
  // manages it) held until the endpoint closes. Called by a transfer that gives up.
  void OrphanAll(FabricTransfer* owner, std::vector<std::unique_ptr<FabricRequest>>* requests,
                 std::shared_ptr<void> keep_alive);

  // Reserves each id of `candidates` that is free; returns a bit mask (bit i = candidates[i]
  // is now reserved by the caller).
  uint64_t ReserveCommIds(const std::vector<uint16_t>& candidates);
  void ReleaseCommId(uint16_t id);

 private:
  FabricEndpoint() = default;
  Status RegisterIfNeeded(FabricRequest* request, uint64_t access);
  void ReleaseRegistration(FabricRequest* request);  // under mu_

  std::mutex mu_;  // serializes every libfabric call on this endpoint
  fi_info* info_ = nullptr;
  fid_fabric* fabric_ = nullptr;
  fid_domain* domain_ = nullptr;
  fid_av* av_ = nullptr;
  fid_cq* cq_ = nullptr;
  fid_ep* ep_ = nullptr;
  bool mr_local_ = false;
  size_t eager_size_ = 0;  // set once in Open
  std::string provider_name_;
  std::string address_;
  std::vector<fi_addr_t> fi_addresses_;                    // set once before any transfer
  std::vector<std::unique_ptr<FabricRequest>> orphans_;    // guarded by mu_
  std::vector<std::shared_ptr<void>> kept_alive_;          // guarded by mu_
  std::set<uint16_t> comm_ids_{0};                         // guarded by mu_
};

}  // namespace zs
