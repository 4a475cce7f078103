#include "offload/shard_store.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "runtime/base/check.h"

namespace zs {
namespace {

// Memory tiers align arrays like cudaMalloc; the NVMe file and its buffers like O_DIRECT.
constexpr int64_t kMemoryArrayAlignment = 256;

int64_t AlignUp(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

double SecondsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

std::vector<int64_t> NoWeights(size_t n) { return std::vector<int64_t>(n, 1); }

}  // namespace

std::string_view SlotResidencyName(SlotResidency r) {
  switch (r) {
    case SlotResidency::kOffloaded:
      return "offloaded";
    case SlotResidency::kFetching:
      return "fetching";
    case SlotResidency::kResident:
      return "resident";
    case SlotResidency::kWritingBack:
      return "writing back";
  }
  return "?";
}

ShardStore::ShardStore(const ShardStoreOptions& options, Device& device, size_t num_slots)
    : options_(options), device_(device), trace_(NoWeights(num_slots)) {}

StatusOr<std::unique_ptr<ShardStore>> ShardStore::Create(const ShardStoreOptions& options,
                                                         std::vector<SlotShape> slots,
                                                         Device& device) {
  if (options.tier == MemoryTier::kNvme && options.buffer_count < 2) {
    return InvalidArgumentError(fmt::format(
        "{}: buffer_count {} (NVMe offload needs at least 2 staging buffers: one stepped, one "
        "writing back)",
        options.what, options.buffer_count));
  }
  auto store = std::unique_ptr<ShardStore>(new ShardStore(options, device, slots.size()));
  const bool nvme = options.tier == MemoryTier::kNvme;
  store->tier_ = options.tier;
  const int64_t align = nvme ? kNvmeAlignment : kMemoryArrayAlignment;
  int64_t largest = 0;
  for (SlotShape& shape : slots) {
    Slot s;
    int64_t at = 0;
    for (int64_t bytes : shape.array_bytes) {
      ZS_CHECK(bytes >= 0, "slot '{}': array of {} bytes", shape.name, bytes);
      s.array_offsets.push_back(at);
      at += AlignUp(bytes, align);
    }
    s.bytes = at;
    s.file_offset = store->total_bytes_;
    s.shape = std::move(shape);
    s.state = nvme ? SlotResidency::kOffloaded : SlotResidency::kResident;
    store->total_bytes_ += s.bytes;
    largest = std::max(largest, s.bytes);
    store->slots_.push_back(std::move(s));
  }
  if (!nvme) {
    for (Slot& s : store->slots_) {
      if (s.bytes == 0) continue;
      const PinMode pin = options.tier == MemoryTier::kPinnedHost ? PinMode::kPinned : options.pin;
      auto memory =
          TieredBuffer::Allocate(device, size_t(s.bytes), options.tier, pin, options.category,
                                 fmt::format("{} of {}", options.what, s.shape.name));
      if (!memory.ok()) {
        return memory.status().WithContext(
            fmt::format("{} of {} ({} bytes)", options.what, s.shape.name, s.bytes));
      }
      s.memory = std::move(*memory);
    }
    if (options.tier != MemoryTier::kDevice) {  // pinned only if every slot got pinned memory
      const bool pinning =
          options.tier == MemoryTier::kPinnedHost || options.pin != PinMode::kPageable;
      const bool all_pinned =
          pinning && std::all_of(store->slots_.begin(), store->slots_.end(), [](const Slot& s) {
            return s.bytes == 0 || s.memory.tier() == MemoryTier::kPinnedHost;
          });
      store->tier_ = all_pinned ? MemoryTier::kPinnedHost : MemoryTier::kHost;
    }
    return store;
  }
  NvmeStoreOptions file_options = options.nvme;
  file_options.trace = options.trace;
  if (options.trace != nullptr) store->wait_track_ = options.trace->Track("offload wait");
  ZS_ASSIGN_OR_RETURN(store->file_, NvmeStore::Create(file_options, store->total_bytes_));
  // Counted with the file, so that the destructor's Sub matches whatever fails after this.
  device.tracker().Add(MemoryTier::kNvme, options.category, store->total_bytes_);
  ZS_ASSIGN_OR_RETURN(
      store->buffers_,
      PinnedBufferPool::Create(device, options.buffer_count, size_t(std::max<int64_t>(largest, 1)),
                               options.pin, options.category,
                               fmt::format("NVMe staging buffers of the {}", options.what)));
  return store;
}

ShardStore::~ShardStore() {
  for (Slot& s : slots_) {
    if (s.io.valid()) s.io.Wait().IgnoreError();
  }
  if (file_ != nullptr) device_.tracker().Sub(MemoryTier::kNvme, options_.category, total_bytes_);
}

std::string ShardStore::path() const { return file_ ? file_->path() : std::string(); }
std::string ShardStore::io_backend() const {
  return file_ ? std::string(IoBackendName(file_->backend())) : std::string("none");
}

// [Note: slot transitions] The only place a slot's state changes.
void ShardStore::Move(Slot& s, SlotResidency to) {
  using R = SlotResidency;
  const R from = s.state;
  const bool ok = (from == R::kOffloaded && to == R::kFetching) ||
                  (from == R::kOffloaded && to == R::kResident) ||  // kOverwrite: no read
                  (from == R::kFetching && to == R::kResident) ||
                  (from == R::kResident && to == R::kWritingBack) ||
                  (from == R::kWritingBack && to == R::kResident) ||
                  (from == R::kResident && to == R::kOffloaded && !s.acquired);
  ZS_CHECK(ok, "{} slot {}: {} -> {} is not a transition", options_.what, s.shape.name,
           SlotResidencyName(from), SlotResidencyName(to));
  s.state = to;
}

char* ShardStore::BufferOf(const Slot& s) const {
  if (!nvme()) return s.memory.data_as<char>();
  ZS_CHECK(s.buffer >= 0, "{} slot {} has no buffer", options_.what, s.shape.name);
  return buffers_->data(s.buffer);
}

SlotView ShardStore::ViewOf(const Slot& s) const {
  SlotView view;
  char* base = BufferOf(s);
  for (size_t i = 0; i < s.array_offsets.size(); ++i) {
    view.arrays.push_back(s.shape.array_bytes[i] > 0 ? base + s.array_offsets[i] : nullptr);
  }
  return view;
}

Status ShardStore::Broken() const {
  if (first_error_.ok()) return OkStatus();
  return AbortedError(
      fmt::format("{}: the store failed earlier: {}", options_.what, first_error_.message()));
}

Status ShardStore::Fail(Status status) {
  if (first_error_.ok()) first_error_ = status;
  return status;
}

Status ShardStore::WaitIo(Slot& s) {
  const bool writing = s.state == SlotResidency::kWritingBack;
  ZS_CHECK(writing || s.state == SlotResidency::kFetching, "{} slot {}: no I/O to wait for",
           options_.what, s.shape.name);
  const auto start = std::chrono::steady_clock::now();
  Status status = s.io.Wait();
  s.io = IoHandle();
  if (options_.trace != nullptr) {
    options_.trace->Record(wait_track_,
                           fmt::format("wait {} {}", writing ? "write" : "read", s.shape.name),
                           start, std::chrono::steady_clock::now());
  }
  (writing ? stats_.write_wait_seconds : stats_.read_wait_seconds) += SecondsSince(start);
  if (writing) {
    const int index = int(&s - slots_.data());
    writes_.erase(std::find(writes_.begin(), writes_.end(), index));
  }
  if (!status.ok()) {
    return Fail(status.WithContext(fmt::format("{} {} slot {}", writing ? "writing" : "reading",
                                               options_.what, s.shape.name)));
  }
  Move(s, SlotResidency::kResident);
  return OkStatus();
}

StatusOr<std::optional<int>> ShardStore::TakeBuffer(bool prefetching, int for_slot) {
  auto evict = [&](int victim) {
    Slot& v = slots_[size_t(victim)];
    if (auto it = std::find(lru_.begin(), lru_.end(), victim); it != lru_.end()) lru_.erase(it);
    const int b = v.buffer;
    v.buffer = -1;
    Move(v, SlotResidency::kOffloaded);
    return b;
  };
  if (std::optional<int> b = buffers_->Take()) return b;
  if (!lru_.empty()) return std::optional<int>(evict(lru_.front()));
  // Wait for a write-back; a prefetch leaves the newest one alone (it has just started).
  if (writes_.size() > (prefetching ? 1u : 0u)) {
    const int oldest = writes_.front();
    ZS_RETURN_IF_ERROR(WaitIo(slots_[size_t(oldest)]));
    return std::optional<int>(evict(oldest));
  }
  if (prefetching) return std::optional<int>();
  // A demand read after a wrong prediction: take a prefetched slot's buffer.
  for (size_t i = 0; i < slots_.size(); ++i) {
    Slot& s = slots_[i];
    if (s.state == SlotResidency::kFetching && !s.acquired) {
      ZS_RETURN_IF_ERROR(WaitIo(s));
      return std::optional<int>(evict(int(i)));
    }
  }
  return FailedPreconditionError(
      fmt::format("{}: no staging buffer free for slot {}: all {} are in use (raise buffer_count)",
                  options_.what, slots_[size_t(for_slot)].shape.name, buffers_->count()));
}

Status ShardStore::StartRead(Slot& s, bool prefetch) {
  const int index = int(&s - slots_.data());
  ZS_ASSIGN_OR_RETURN(std::optional<int> buffer, TakeBuffer(prefetch, index));
  if (!buffer) return OkStatus();  // prefetch only: nothing free
  s.buffer = *buffer;
  s.io = file_->StartRead(s.file_offset, buffers_->data(s.buffer), s.bytes);
  Move(s, SlotResidency::kFetching);
  s.prefetched = prefetch;
  stats_.bytes_read += s.bytes;
  if (!prefetch) ++stats_.demand_reads;
  return OkStatus();
}

Status ShardStore::Prefetch() {
  if (!trace_.replaying()) return OkStatus();
  // Look as far ahead as there are buffers: beyond that a read could only evict a slot needed
  // sooner.
  const size_t end = std::min(trace_.size(), trace_.position() + size_t(buffers_->count()) - 1);
  for (size_t pos = trace_.position(); pos < end; ++pos) {
    Slot& s = slots_[size_t(trace_.at(pos))];
    if (s.state != SlotResidency::kOffloaded || s.bytes == 0) continue;
    const bool had = s.buffer >= 0;
    ZS_RETURN_IF_ERROR(StartRead(s, /*prefetch=*/true));
    if (!had && s.buffer < 0) break;  // no buffer free
  }
  return OkStatus();
}

StatusOr<SlotView> ShardStore::Acquire(int slot, Access access) {
  ZS_CHECK(slot >= 0 && slot < num_slots(), "{}: slot {} out of range [0, {})", options_.what, slot,
           num_slots());
  ZS_RETURN_IF_ERROR(Broken());
  Slot& s = slots_[size_t(slot)];
  ZS_CHECK(!s.acquired, "{} slot {} acquired twice", options_.what, s.shape.name);
  if (trace_.replaying() && !trace_.Advance(slot)) trace_.Diverge();
  if (!trace_.replaying()) trace_.Record(slot);
  if (!nvme() || s.bytes == 0) {
    s.acquired = true;
    return ViewOf(s);
  }
  if (auto it = std::find(lru_.begin(), lru_.end(), slot); it != lru_.end()) lru_.erase(it);
  switch (s.state) {
    case SlotResidency::kOffloaded:
      if (access == Access::kOverwrite) {
        ZS_ASSIGN_OR_RETURN(std::optional<int> buffer, TakeBuffer(false, slot));
        s.buffer = *buffer;
        Move(s, SlotResidency::kResident);
      } else {
        ZS_RETURN_IF_ERROR(StartRead(s, /*prefetch=*/false));
        ZS_RETURN_IF_ERROR(WaitIo(s));
      }
      break;
    case SlotResidency::kFetching:
      if (s.prefetched) ++stats_.prefetch_hits;
      ZS_RETURN_IF_ERROR(WaitIo(s));
      break;
    case SlotResidency::kWritingBack:
      ++stats_.cache_hits;
      ZS_RETURN_IF_ERROR(WaitIo(s));
      break;
    case SlotResidency::kResident:
      ++stats_.cache_hits;
      break;
  }
  s.acquired = true;
  s.prefetched = false;
  if (options_.pipeline_read) ZS_RETURN_IF_ERROR(Prefetch());
  return ViewOf(s);
}

Status ShardStore::Release(int slot, bool dirty) {
  ZS_CHECK(slot >= 0 && slot < num_slots(), "{}: slot {} out of range", options_.what, slot);
  Slot& s = slots_[size_t(slot)];
  ZS_CHECK(s.acquired, "{} slot {} released without Acquire", options_.what, s.shape.name);
  s.acquired = false;
  if (!nvme() || s.bytes == 0) return OkStatus();
  ZS_RETURN_IF_ERROR(Broken());
  if (!dirty) {
    lru_.push_back(slot);
    return OkStatus();
  }
  s.io = file_->StartWrite(s.file_offset, buffers_->data(s.buffer), s.bytes);
  Move(s, SlotResidency::kWritingBack);
  writes_.push_back(slot);
  stats_.bytes_written += s.bytes;
  if (!options_.pipeline_write) {
    ZS_RETURN_IF_ERROR(WaitIo(s));
    lru_.push_back(slot);
  }
  return OkStatus();
}

bool ShardStore::CanAcquire(int slot) const {
  const Slot& s = slots_[size_t(slot)];
  if (!nvme() || s.bytes == 0 || s.state != SlotResidency::kOffloaded) return true;
  if (buffers_->free_count() > 0 || !lru_.empty() || !writes_.empty()) return true;
  return std::any_of(slots_.begin(), slots_.end(), [](const Slot& o) {
    return o.state == SlotResidency::kFetching && !o.acquired;
  });
}

Status ShardStore::Flush() {
  while (!writes_.empty()) {
    const int slot = writes_.front();
    ZS_RETURN_IF_ERROR(WaitIo(slots_[size_t(slot)]));
    if (!slots_[size_t(slot)].acquired) lru_.push_back(slot);
  }
  return Broken();
}

void ShardStore::EndPass() { trace_.EndStep(); }

}  // namespace zs
