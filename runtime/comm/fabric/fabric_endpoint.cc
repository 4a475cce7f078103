#include "runtime/comm/fabric/fabric_endpoint.h"

#include <fmt/format.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_tagged.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <type_traits>

#include "runtime/base/log.h"
#include "runtime/comm/fabric/fabric_transfer.h"

namespace zs {
namespace {

// The request's address is its context's address (first member, standard layout), so a
// completion's op_context leads back to the request without touching libfabric's scratch.
static_assert(std::is_standard_layout_v<FabricRequest>);
static_assert(offsetof(FabricRequest, context) == 0);

FabricRequest* RequestOf(void* op_context) { return reinterpret_cast<FabricRequest*>(op_context); }

// fi_getinfo and fi_fabric initialise libfabric's process-wide provider list; ranks that are
// threads of one process call them one at a time.
std::mutex& OpenMutex() {
  static std::mutex mu;
  return mu;
}

std::string FiError(int rc) { return fmt::format("{} ({})", fi_strerror(-rc), rc); }

std::string ToHex(const void* data, size_t n) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  const auto* bytes = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

StatusOr<std::vector<unsigned char>> FromHex(const std::string& text) {
  auto digit = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (text.size() % 2 != 0) return InvalidArgumentError("odd-length endpoint address");
  std::vector<unsigned char> out(text.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    const int hi = digit(text[2 * i]), lo = digit(text[2 * i + 1]);
    if (hi < 0 || lo < 0) return InvalidArgumentError("endpoint address is not hex");
    out[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return out;
}

// Picks the fi_info to open: for tcp, the IPv4 interface "lo" when every rank is on this host,
// else the first IPv4 interface that is not loopback.
fi_info* ChooseInfo(fi_info* list, bool loopback) {
  for (fi_info* info = list; info != nullptr; info = info->next) {
    const char* domain = info->domain_attr != nullptr ? info->domain_attr->name : nullptr;
    const bool is_lo = domain != nullptr && std::strcmp(domain, "lo") == 0;
    if (info->addr_format != FI_SOCKADDR_IN) return info;  // not an IP provider (shm)
    if (is_lo == loopback) return info;
  }
  return list;
}

// [Note: eager sizes] The largest message a provider delivers "eagerly": its send completes
// without the receiver having posted the receive, because the receiver's provider buffers an
// unmatched message itself, so an unmatched send can hold up nothing (fabric_stream_set.h,
// [Note: rendezvous above the eager size]). Above it the backend's clear-to-send handshake
// runs. Read from libfabric 1.17's sources:
// - shm: a send up to its inject size (4096) is copied into the receiver's queue at once;
//   larger ones (CMA, SAR) complete only when matched, and complete in order (libfabric #9853).
// - tcp;ofi_rxm: rxm sends up to its eager limit eagerly: the send completes when tcp has the
//   bytes (rxm_send_eager / rxm_direct_send), and the receiver's rxm reads every message off the
//   socket whether or not a receive matches it, keeping an unmatched one in a bounce buffer of
//   FI_OFI_RXM_BUFFER_SIZE bytes (default 16384) from a pool without limit, or in a malloc'd
//   one (rxm_get_dyn_rbuf, rxm_match_rx_buf). Above the eager limit rxm runs its own rendezvous
//   (a request, then an RMA read once matched; over tcp it disables SAR), so the send waits for
//   the match. (An eager send still needs the receiver to progress once its socket buffer is
//   full, as every message does; never that a receive be posted.) The eager limit is
//   max(FI_OFI_RXM_EAGER_LIMIT, FI_OFI_RXM_BUFFER_SIZE); the endpoint reports the second
//   (FI_OPT_BUFFERED_LIMIT), which is therefore always sent eagerly.
//   fi_info's inject size (64: tcp's inline size less rxm's header) only says when rxm copies
//   the payload at post time; it says nothing about matching.
// - Anything else (udp;ofi_rxd, verbs, ...): not read; its inject size, as before.
// The cap (kFabricMaxEagerBytes) bounds what one unmatched message holds in a receiver. How many
// can wait there is bounded by the window per stream within an operation, but not across
// operations where a sender never waits for its receivers (a broadcast root, a run of sends):
// as with MPI's eager sends, the receiver's provider keeps them until they are matched.
size_t EagerSize(fid_ep* ep, const fi_info& info) {
  const std::string provider = info.fabric_attr->prov_name;
  const size_t inject = info.tx_attr->inject_size;
  if (provider != "tcp;ofi_rxm") return inject;
  size_t limit = 0;
  size_t length = sizeof(limit);
  if (fi_getopt(&ep->fid, FI_OPT_ENDPOINT, FI_OPT_BUFFERED_LIMIT, &limit, &length) != 0 ||
      length != sizeof(limit)) {
    return inject;
  }
  return std::max(inject, std::min(limit, kFabricMaxEagerBytes));
}

}  // namespace

StatusOr<std::unique_ptr<FabricEndpoint>> FabricEndpoint::Open(const std::string& provider,
                                                               bool loopback, int world_size) {
  std::unique_ptr<FabricEndpoint> ep(new FabricEndpoint());
  const bool is_ip = provider.rfind("tcp", 0) == 0 || provider.rfind("udp", 0) == 0;
  {
    std::lock_guard<std::mutex> lock(OpenMutex());
    // fi_getinfo costs 0.1-0.3 s (tcp walks the interfaces): the chosen info is kept per
    // (provider, loopback) for the process, so ranks as threads (and later connects) pay it
    // once.
    static std::map<std::string, fi_info*>* cache = new std::map<std::string, fi_info*>();
    const std::string key = provider + (loopback ? "/lo" : "/net");
    auto cached = cache->find(key);
    if (cached == cache->end()) {
      fi_info* hints = fi_allocinfo();
      if (hints == nullptr) return OutOfMemoryError("fi_allocinfo failed");
      hints->ep_attr->type = FI_EP_RDM;
      hints->caps = FI_TAGGED;
      hints->mode = FI_CONTEXT | FI_CONTEXT2;
      hints->domain_attr->mr_mode =
          FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
      hints->domain_attr->threading = FI_THREAD_DOMAIN;
      hints->fabric_attr->prov_name = strdup(provider.c_str());
      if (is_ip) hints->addr_format = FI_SOCKADDR_IN;
      fi_info* list = nullptr;
      const int rc = fi_getinfo(FI_VERSION(1, 9), nullptr, nullptr, 0, hints, &list);
      fi_freeinfo(hints);
      if (rc != 0 || list == nullptr) {
        return NotFoundError(fmt::format("libfabric provider '{}' offers no RDM endpoint with "
                                         "tagged messages here: fi_getinfo: {}",
                                         provider, FiError(rc)));
      }
      fi_info* chosen = fi_dupinfo(ChooseInfo(list, loopback));
      fi_freeinfo(list);
      if (chosen == nullptr) return OutOfMemoryError("fi_dupinfo failed");
      cached = cache->emplace(key, chosen).first;
    }
    ep->info_ = fi_dupinfo(cached->second);
    if (ep->info_ == nullptr) return OutOfMemoryError("fi_dupinfo failed");
    ep->provider_name_ = ep->info_->fabric_attr->prov_name;
    ep->mr_local_ = (ep->info_->domain_attr->mr_mode & FI_MR_LOCAL) != 0 ||
                    (ep->info_->mode & FI_LOCAL_MR) != 0;
    int r = fi_fabric(ep->info_->fabric_attr, &ep->fabric_, nullptr);
    if (r != 0) return InternalError(fmt::format("fi_fabric({}): {}", provider, FiError(r)));
  }
  const std::string where = fmt::format("provider '{}'", ep->provider_name_);
  int r = fi_domain(ep->fabric_, ep->info_, &ep->domain_, nullptr);
  if (r != 0) return InternalError(fmt::format("fi_domain ({}): {}", where, FiError(r)));
  fi_cq_attr cq_attr{};
  cq_attr.format = FI_CQ_FORMAT_TAGGED;
  cq_attr.wait_obj = FI_WAIT_NONE;
  cq_attr.size = 4096;
  r = fi_cq_open(ep->domain_, &cq_attr, &ep->cq_, nullptr);
  if (r != 0) return InternalError(fmt::format("fi_cq_open ({}): {}", where, FiError(r)));
  fi_av_attr av_attr{};
  av_attr.type = FI_AV_TABLE;
  av_attr.count = size_t(world_size);
  r = fi_av_open(ep->domain_, &av_attr, &ep->av_, nullptr);
  if (r != 0) return InternalError(fmt::format("fi_av_open ({}): {}", where, FiError(r)));
  r = fi_endpoint(ep->domain_, ep->info_, &ep->ep_, nullptr);
  if (r != 0) return InternalError(fmt::format("fi_endpoint ({}): {}", where, FiError(r)));
  r = fi_ep_bind(ep->ep_, &ep->av_->fid, 0);
  if (r == 0) r = fi_ep_bind(ep->ep_, &ep->cq_->fid, FI_TRANSMIT | FI_RECV);
  if (r != 0) return InternalError(fmt::format("fi_ep_bind ({}): {}", where, FiError(r)));
  r = fi_enable(ep->ep_);
  if (r != 0) return InternalError(fmt::format("fi_enable ({}): {}", where, FiError(r)));
  ep->eager_size_ = EagerSize(ep->ep_, *ep->info_);
  std::vector<char> name(256);
  size_t len = name.size();
  r = fi_getname(&ep->ep_->fid, name.data(), &len);
  if (r == -FI_ETOOSMALL) {
    name.resize(len);
    r = fi_getname(&ep->ep_->fid, name.data(), &len);
  }
  if (r != 0) return InternalError(fmt::format("fi_getname ({}): {}", where, FiError(r)));
  ep->address_ = ToHex(name.data(), len);
  ZS_LOG(kDebug, "fabric endpoint open: provider {} domain {} mr_local {} eager {} bytes",
         ep->provider_name_, ep->info_->domain_attr->name ? ep->info_->domain_attr->name : "?",
         ep->mr_local_, ep->eager_size_);
  return ep;
}

FabricEndpoint::~FabricEndpoint() {
  // The endpoint goes first: after it is closed no completion refers to our requests.
  if (ep_ != nullptr) fi_close(&ep_->fid);
  for (auto& request : orphans_) ReleaseRegistration(request.get());
  orphans_.clear();
  kept_alive_.clear();
  if (av_ != nullptr) fi_close(&av_->fid);
  if (cq_ != nullptr) fi_close(&cq_->fid);
  if (domain_ != nullptr) fi_close(&domain_->fid);
  if (fabric_ != nullptr) fi_close(&fabric_->fid);
  if (info_ != nullptr) fi_freeinfo(info_);
}

Status FabricEndpoint::InsertPeers(const std::vector<std::string>& addresses) {
  std::lock_guard<std::mutex> lock(mu_);
  fi_addresses_.assign(addresses.size(), FI_ADDR_NOTAVAIL);
  for (size_t rank = 0; rank < addresses.size(); ++rank) {
    ZS_ASSIGN_OR_RETURN(std::vector<unsigned char> raw, FromHex(addresses[rank]));
    const int inserted = fi_av_insert(av_, raw.data(), 1, &fi_addresses_[rank], 0, nullptr);
    if (inserted != 1) {
      return InternalError(fmt::format("fi_av_insert of rank {}'s address ({} bytes, provider "
                                       "'{}') failed: {}",
                                       rank, raw.size(), provider_name_, FiError(inserted)));
    }
  }
  return OkStatus();
}

Status FabricEndpoint::RegisterIfNeeded(FabricRequest* request, uint64_t access) {
  if (!mr_local_ || request->length == 0) return OkStatus();
  const int r = fi_mr_reg(domain_, request->buffer, request->length, access, 0, 0, 0,
                          &request->mr, nullptr);
  if (r != 0) {
    request->mr = nullptr;
    return InternalError(fmt::format("fi_mr_reg of {} bytes: {}", request->length, FiError(r)));
  }
  return OkStatus();
}

void FabricEndpoint::ReleaseRegistration(FabricRequest* request) {
  if (request->mr != nullptr) {
    fi_close(&request->mr->fid);
    request->mr = nullptr;
  }
}

ssize_t FabricEndpoint::PostSend(FabricRequest* request, fi_addr_t destination) {
  std::lock_guard<std::mutex> lock(mu_);
  if (request->mr == nullptr && !RegisterIfNeeded(request, FI_SEND).ok()) return -FI_ENOMEM;
  void* desc = request->mr != nullptr ? fi_mr_desc(request->mr) : nullptr;
  return fi_tsend(ep_, request->buffer, request->length, desc, destination, request->tag,
                  &request->context);
}

ssize_t FabricEndpoint::PostRecv(FabricRequest* request, fi_addr_t source) {
  std::lock_guard<std::mutex> lock(mu_);
  if (request->mr == nullptr && !RegisterIfNeeded(request, FI_RECV).ok()) return -FI_ENOMEM;
  void* desc = request->mr != nullptr ? fi_mr_desc(request->mr) : nullptr;
  return fi_trecv(ep_, request->buffer, request->length, desc, source, request->tag, 0,
                  &request->context);
}

void FabricEndpoint::Cancel(FabricRequest* request) {
  std::lock_guard<std::mutex> lock(mu_);
  fi_cancel(&ep_->fid, &request->context);
}

int FabricEndpoint::Progress() {
  std::lock_guard<std::mutex> lock(mu_);
  fi_cq_tagged_entry entries[16];
  int total = 0;
  while (true) {
    const ssize_t n = fi_cq_read(cq_, entries, 16);
    FabricRequest* finished[16];
    int count = 0;
    if (n > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        FabricRequest* request = RequestOf(entries[i].op_context);
        request->error = 0;
        request->received = entries[i].len;
        finished[count++] = request;
      }
    } else if (n == -FI_EAVAIL) {
      fi_cq_err_entry err{};
      if (fi_cq_readerr(cq_, &err, 0) != 1) return total;
      FabricRequest* request = RequestOf(err.op_context);
      // Some providers report the error negated.
      request->error = err.err != 0 ? std::abs(err.err) : FI_EOTHER;
      request->received = err.len;
      const char* text = fi_cq_strerror(cq_, err.prov_errno, err.err_data, nullptr, 0);
      std::snprintf(request->error_detail, sizeof(request->error_detail), "%s (provider: %s)",
                    fi_strerror(request->error), text != nullptr ? text : "?");
      finished[count++] = request;
    } else {
      return total;  // -FI_EAGAIN: nothing ready (other errors show up as timeouts)
    }
    for (int i = 0; i < count; ++i) {
      FabricRequest* request = finished[i];
      ReleaseRegistration(request);
      if (request->owner != nullptr) {
        request->owner->OnCompletion(request);
      } else {
        auto it = std::find_if(orphans_.begin(), orphans_.end(),
                               [&](const auto& o) { return o.get() == request; });
        if (it != orphans_.end()) orphans_.erase(it);
      }
    }
    total += count;
    if (n != 16) return total;
  }
}

void FabricEndpoint::Orphan(std::unique_ptr<FabricRequest> request) {
  std::lock_guard<std::mutex> lock(mu_);
  request->owner = nullptr;
  orphans_.push_back(std::move(request));
}

void FabricEndpoint::OrphanAll(FabricTransfer* owner,
                               std::vector<std::unique_ptr<FabricRequest>>* requests,
                               std::shared_ptr<void> keep_alive) {
  std::lock_guard<std::mutex> lock(mu_);
  if (keep_alive != nullptr) kept_alive_.push_back(std::move(keep_alive));
  for (auto& request : *requests) {
    if (request == nullptr) continue;
    ZS_CHECK(request->owner == owner, "orphaning a request of another transfer");
    request->owner = nullptr;
    orphans_.push_back(std::move(request));
  }
  requests->clear();
}

uint64_t FabricEndpoint::ReserveCommIds(const std::vector<uint16_t>& candidates) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t mask = 0;
  for (size_t i = 0; i < candidates.size() && i < 64; ++i) {
    if (comm_ids_.insert(candidates[i]).second) mask |= uint64_t{1} << i;
  }
  return mask;
}

void FabricEndpoint::ReleaseCommId(uint16_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  comm_ids_.erase(id);
}

}  // namespace zs
