#include "runtime/comm/fabric/fabric_backend.h"

#include <fmt/format.h>
#include <rdma/fabric.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "runtime/base/env.h"
#include "runtime/base/log.h"
#include "runtime/comm/fabric/fabric_communicator.h"
#include "runtime/comm/fabric/fabric_endpoint.h"
#include "runtime/comm/fabric/fabric_peer.h"

namespace zs {
namespace {

using Clock = std::chrono::steady_clock;

// Waits for `key` until `deadline`, checking every 100 ms whether `peer` (when known and on
// this host) died meanwhile.
StatusOr<std::string> GetWatching(Store& store, const std::string& key, Clock::time_point deadline,
                                  const FabricPeer* peer, const std::string& what) {
  while (true) {
    const auto now = Clock::now();
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
    const auto slice = std::min(left, std::chrono::milliseconds(100));
    auto value = store.Get(key, std::max(slice, std::chrono::milliseconds(0)));
    if (value.ok() || value.status().code() != StatusCode::kDeadlineExceeded) return value;
    if (peer != nullptr && PeerGone(*peer)) {
      return UnavailableError(fmt::format("{}: {} died before publishing its endpoint address",
                                          what, peer->Describe()));
    }
    if (Clock::now() >= deadline) return value.status().WithContext(what);
  }
}

class FabricBackend final : public Backend {
 public:
  std::string_view name() const override { return "fabric"; }

  Status Available() const override {
    static const Status status = [] {
      fi_info* hints = fi_allocinfo();
      if (hints == nullptr) return InternalError("fi_allocinfo failed");
      hints->ep_attr->type = FI_EP_RDM;
      hints->caps = FI_TAGGED;
      hints->mode = FI_CONTEXT | FI_CONTEXT2;
      fi_info* list = nullptr;
      const int rc = fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &list);
      fi_freeinfo(hints);
      if (rc != 0 || list == nullptr) {
        return UnavailableError(fmt::format("libfabric offers no RDM provider with tagged "
                                            "messages: {}",
                                            fi_strerror(-rc)));
      }
      fi_freeinfo(list);
      return OkStatus();
    }();
    return status;
  }

  StatusOr<std::unique_ptr<Communicator>> Connect(Store& store, int rank, int world_size,
                                                  const CommOptions& options) override {
    const std::string group = options.group_name;
    const std::string where = fmt::format("fabric connect of group '{}' (rank {} of {})", group,
                                          rank, world_size);
    if (world_size < 1 || world_size > 4096 || rank < 0 || rank >= world_size) {
      return InvalidArgumentError(fmt::format("{}: rank must be in [0, world) and world in "
                                              "[1, 4096]",
                                              where));
    }
    ZS_ASSIGN_OR_RETURN(const int64_t segment, ParseEnvInt("ZS_FABRIC_SEGMENT_BYTES", 1 << 20));
    ZS_ASSIGN_OR_RETURN(const int64_t window, ParseEnvInt("ZS_FABRIC_WINDOW", 4));
    if (segment < 64 || window < 1 || window > 64) {
      return InvalidArgumentError(fmt::format("{}: ZS_FABRIC_SEGMENT_BYTES={} must be >= 64 and "
                                              "ZS_FABRIC_WINDOW={} in [1, 64]",
                                              where, segment, window));
    }
    FabricTuning tuning;
    tuning.segment_bytes = size_t(segment) / 64 * 64;
    tuning.window = int(window);
    ZS_ASSIGN_OR_RETURN(
        const int64_t direct_segment,
        ParseEnvInt("ZS_FABRIC_DIRECT_SEGMENT_BYTES", int64_t(tuning.direct_segment_bytes)));
    if (direct_segment < 64) {
      return InvalidArgumentError(fmt::format(
          "{}: ZS_FABRIC_DIRECT_SEGMENT_BYTES={} must be >= 64", where, direct_segment));
    }
    tuning.direct_segment_bytes = size_t(direct_segment) / 64 * 64;
    ZS_ASSIGN_OR_RETURN(const int64_t direct_window,
                        ParseEnvInt("ZS_FABRIC_DIRECT_WINDOW", tuning.direct_window));
    if (direct_window < 1 || direct_window > 1024) {
      return InvalidArgumentError(fmt::format(
          "{}: ZS_FABRIC_DIRECT_WINDOW={} must be in [1, 1024]", where, direct_window));
    }
    tuning.direct_window = int(direct_window);

    const auto deadline = Clock::now() + options.timeout;
    // The n-th Connect of this rank to this group through this store joins the n-th group:
    // its generation is the first one for which this rank has not published its peer key yet
    // (only this rank writes its keys, so the count is race-free and is the same in every
    // process that shares a FileStore). Old generations' keys are never read again.
    const std::string group_prefix = fmt::format("fabric/{}/w{}/", group, world_size);
    int64_t generation = 0;
    while (store.Contains(fmt::format("{}g{}/peer/{}", group_prefix, generation, rank))) {
      ++generation;
    }
    const std::string prefix = fmt::format("{}g{}/", group_prefix, generation);
    const FabricPeer self = SelfPeer();
    ZS_RETURN_IF_ERROR(store.Set(prefix + "peer/" + std::to_string(rank), EncodePeer(self)));
    std::vector<FabricPeer> peers(world_size);
    bool all_local = true;
    for (int r = 0; r < world_size; ++r) {
      ZS_ASSIGN_OR_RETURN(std::string text,
                          GetWatching(store, prefix + "peer/" + std::to_string(r), deadline,
                                      nullptr, fmt::format("{}: waiting for rank {}", where, r)));
      ZS_ASSIGN_OR_RETURN(peers[r], DecodePeer(text));
      all_local = all_local && peers[r].host == self.host;
    }

    std::string provider = options.transport;
    if (provider.empty()) provider = GetEnvString("ZS_FABRIC_PROVIDER").value_or("");
    if (provider.empty()) provider = all_local ? "shm" : "tcp";
    if (provider == "shm" && !all_local) {
      return FailedPreconditionError(fmt::format("{}: provider 'shm' needs every rank on one "
                                                 "host, but the ranks span several hosts",
                                                 where));
    }
    auto opened = FabricEndpoint::Open(provider, all_local, world_size);
    if (!opened.ok()) return opened.status().WithContext(where);
    std::shared_ptr<FabricEndpoint> endpoint = std::move(opened).value();

    // "<probe>:<eager size>:<address>": every rank takes the smallest eager size as the
    // rendezvous threshold (fabric_communicator.h), so the two sides of a message always agree
    // on it; <probe> is the hex address of this rank's probe word when it offers direct copy
    // (FabricTuning::direct_copy), else "-". ZS_FABRIC_EAGER_BYTES only lowers the endpoint's
    // eager size ([Note: eager sizes] in fabric_endpoint.cc): above it a send could wait for its
    // match inside the provider.
    ZS_ASSIGN_OR_RETURN(const int64_t eager_knob,
                        ParseEnvInt("ZS_FABRIC_EAGER_BYTES", int64_t(endpoint->eager_size())));
    if (eager_knob < 0) {
      return InvalidArgumentError(
          fmt::format("{}: ZS_FABRIC_EAGER_BYTES={} must be >= 0", where, eager_knob));
    }
    const size_t eager_bytes = std::min(endpoint->eager_size(), size_t(eager_knob));
    ZS_ASSIGN_OR_RETURN(const int64_t direct_copy_knob, ParseEnvInt("ZS_FABRIC_DIRECT_COPY", 1));
    // Every rank of a one-host shm group takes part in the probe's extra store round (below),
    // offering or not, so that the ranks agree even when the knob differs between them.
    const bool may_direct_copy = all_local && provider == "shm";
    const bool offer_direct_copy = direct_copy_knob != 0 && may_direct_copy;
    const std::string probe =
        offer_direct_copy ? fmt::format("{:x}", PeerMemoryProbeAddress()) : std::string("-");
    ZS_RETURN_IF_ERROR(store.Set(
        prefix + "addr/" + std::to_string(rank),
        fmt::format("{}:{}:{}", probe, eager_bytes, endpoint->address())));
    std::vector<std::string> addresses(world_size);
    tuning.rendezvous_bytes = eager_bytes;
    bool readable = offer_direct_copy;  // every peer's probe word read back from here
    for (int r = 0; r < world_size; ++r) {
      ZS_ASSIGN_OR_RETURN(
          std::string value,
          GetWatching(store, prefix + "addr/" + std::to_string(r), deadline, &peers[r],
                      fmt::format("{}: waiting for the address of rank {}", where, r)));
      const size_t probe_colon = value.find(':');
      const std::string peer_probe = value.substr(0, probe_colon);
      value = probe_colon == std::string::npos ? std::string() : value.substr(probe_colon + 1);
      if (readable && r != rank) {
        char* end = nullptr;
        const uint64_t address = std::strtoull(peer_probe.c_str(), &end, 16);
        readable = peer_probe != "-" && !peer_probe.empty() && *end == '\0' &&
                   PeerMemoryReadable(peers[r].pid, address);
      }
      const size_t colon = value.find(':');
      const std::string eager = value.substr(0, colon);
      if (colon == std::string::npos || eager.empty() || eager.size() > 18 ||
          eager.find_first_not_of("0123456789") != std::string::npos) {
        return InternalError(fmt::format("{}: rank {} published a malformed endpoint address '{}' "
                                         "(expected '<probe>:<eager size>:<hex address>')",
                                         where, r, value));
      }
      tuning.rendezvous_bytes = std::min<size_t>(tuning.rendezvous_bytes, std::stoull(eager));
      addresses[r] = value.substr(colon + 1);
    }
    ZS_RETURN_IF_ERROR(endpoint->InsertPeers(addresses));
    // Direct copy only when every rank read every other's probe: one more round of the store.
    if (may_direct_copy) {
      ZS_RETURN_IF_ERROR(
          store.Set(prefix + "direct/" + std::to_string(rank), readable ? "1" : "0"));
      tuning.direct_copy = true;
      for (int r = 0; r < world_size; ++r) {
        ZS_ASSIGN_OR_RETURN(
            std::string verdict,
            GetWatching(store, prefix + "direct/" + std::to_string(r), deadline, &peers[r],
                        fmt::format("{}: waiting for rank {}'s direct-copy probe", where, r)));
        tuning.direct_copy = tuning.direct_copy && verdict == "1";
      }
    }
    ZS_LOG(kDebug, "{}: connected over provider '{}' (rendezvous above {} bytes, direct copy {})",
           where, endpoint->provider_name(), tuning.rendezvous_bytes,
           tuning.direct_copy ? "on" : "off");
    std::vector<int> world_ranks(world_size);
    for (int r = 0; r < world_size; ++r) world_ranks[r] = r;
    return std::unique_ptr<Communicator>(std::make_unique<FabricCommunicator>(
        std::move(endpoint), 0, rank, std::move(world_ranks), std::move(peers), options, tuning));
  }
};

}  // namespace

std::unique_ptr<Backend> MakeFabricBackend() { return std::make_unique<FabricBackend>(); }

}  // namespace zs
