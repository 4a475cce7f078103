#include "offload/nvme_store.h"

#include <fmt/format.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <thread>

#include "offload/block_checksum.h"
#include "offload/io_backend.h"
#include "offload/swap_file.h"
#include "runtime/base/log.h"

namespace zs {

static_assert(kChecksumPageBytes == kNvmeAlignment, "one checksum per O_DIRECT page");

std::string_view IoBackendName(IoBackend b) {
  switch (b) {
    case IoBackend::kAuto:
      return "auto";
    case IoBackend::kIoUring:
      return "io_uring";
    case IoBackend::kLibaio:
      return "libaio";
    case IoBackend::kPosix:
      return "posix";
  }
  return "unknown";
}

namespace internal {

// One block_size piece of a request: the op a queue runs, and the request it belongs to. The
// queue hands the IoOp* back, which is cast back to the piece.
struct IoPiece : IoOp {
  IoRequest* request = nullptr;
};

// Shared by a handle and the I/O threads. The request outlives its pieces in flight: a handle
// is only destroyed after waiting (~IoHandle waits in release builds, is a ZS_DCHECK in debug).
class IoRequest {
 public:
  IoRequest(bool is_write, int64_t offset, int64_t bytes, uint32_t write_id)
      : is_write(is_write), offset(offset), bytes(bytes), write_id(write_id) {}

  const std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  const bool is_write;
  const int64_t offset;
  const int64_t bytes;
  const uint32_t write_id;      // writes only: the number pages record (see page_write_id_)
  std::vector<IoPiece> pieces;  // fixed before the first piece is queued

  void SetPiecesLeft(int64_t n) { pieces_left_ = n; }  // before the first piece is queued

  // Records a finished piece; the error at the lowest file offset wins. True for the last piece.
  bool PieceDone(int64_t piece_offset, Status status) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!status.ok() && (status_.ok() || piece_offset < error_offset_)) {
      status_ = std::move(status);
      error_offset_ = piece_offset;
    }
    return --pieces_left_ == 0;
  }
  bool ok() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_.ok();
  }
  // Wakes Wait(); after this the I/O threads never touch the request again.
  void MarkDone() {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }
  Status Wait() const {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return done_; });
    return status_;
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  int64_t pieces_left_ = 0;   // guarded by mu_
  bool done_ = false;         // guarded by mu_
  Status status_;             // guarded by mu_
  int64_t error_offset_ = 0;  // guarded by mu_: the file offset of status_'s piece
};

}  // namespace internal

using internal::IoPiece;
using internal::IoRequest;

// ---- IoHandle ------------------------------------------------------------------------------

IoHandle::IoHandle() = default;
IoHandle::IoHandle(std::shared_ptr<IoRequest> request) : request_(std::move(request)) {}
IoHandle::IoHandle(IoHandle&& other) noexcept
    : request_(std::move(other.request_)), waited_(other.waited_) {
  other.waited_ = false;
}
IoHandle& IoHandle::operator=(IoHandle&& other) noexcept {
  if (this != &other) {
    Release();
    request_ = std::move(other.request_);
    waited_ = other.waited_;
    other.waited_ = false;
  }
  return *this;
}
IoHandle::~IoHandle() { Release(); }

Status IoHandle::Wait() {
  if (request_ == nullptr) return OkStatus();
  Status status = request_->Wait();
  waited_ = true;
  return status;
}

void IoHandle::Release() {
  if (request_ != nullptr && !waited_) {
    ZS_DCHECK(false,
              "IoHandle of a {} of {} bytes at offset {} destroyed before Wait(); its "
              "buffer may still be in use",
              request_->is_write ? "write" : "read", request_->bytes, request_->offset);
    // Release builds: the buffer must not be handed back while the kernel may still use it.
    Status status = request_->Wait();
    if (!status.ok()) {
      ZS_LOG(kWarn, "NVMe {} whose handle was never waited failed: {}",
             request_->is_write ? "write" : "read", status.ToString());
    }
  }
  request_.reset();
  waited_ = false;
}

// ---- Create --------------------------------------------------------------------------------

namespace {

constexpr int64_t kMaxBlockSize = int64_t{1} << 30;  // keeps every op below Linux's 2 GiB cap
constexpr int64_t kMaxQueueDepth = 4096;
constexpr int64_t kMaxIoThreads = 64;

int64_t RoundUp(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

Status ValidateOptions(const NvmeStoreOptions& o, int64_t capacity_bytes) {
  if (o.dir.empty()) return InvalidArgumentError("nvme_path is empty: NvmeStore needs a directory");
  if (o.name.empty() || o.name.find('/') != std::string::npos) {
    return InvalidArgumentError(
        fmt::format("NvmeStore name '{}' must be non-empty and have no '/'", o.name));
  }
  if (o.block_size <= 0 || o.block_size % kNvmeAlignment != 0 || o.block_size > kMaxBlockSize) {
    return InvalidArgumentError(fmt::format(
        "aio.block_size = {} must be a positive multiple of {} up to {} (NvmeStore '{}')",
        o.block_size, kNvmeAlignment, kMaxBlockSize, o.name));
  }
  if (o.queue_depth < 1 || o.queue_depth > kMaxQueueDepth) {
    return InvalidArgumentError(
        fmt::format("aio.queue_depth = {} must be in [1, {}] (NvmeStore '{}')", o.queue_depth,
                    kMaxQueueDepth, o.name));
  }
  if (o.intra_op_parallelism < 1 || o.intra_op_parallelism > kMaxIoThreads) {
    return InvalidArgumentError(
        fmt::format("aio.intra_op_parallelism = {} must be in [1, {}] (NvmeStore '{}')",
                    o.intra_op_parallelism, kMaxIoThreads, o.name));
  }
  if (capacity_bytes <= 0) {
    return InvalidArgumentError(fmt::format("NvmeStore '{}' in {}: capacity {} must be positive",
                                            o.name, o.dir, capacity_bytes));
  }
  return OkStatus();
}

// Logs `message` the first time `flag` is seen in this process.
void LogOnce(std::atomic<bool>& flag, const std::string& message) {
  if (!flag.exchange(true)) ZS_LOG(kWarn, "{}", message);
}

// kAuto: the best backend this kernel allows; each fallback is logged once per process with
// the reason the better one failed.
StatusOr<std::unique_ptr<IoQueue>> CreateFirstQueue(IoBackend wanted, int depth,
                                                    const std::string& path) {
  if (wanted != IoBackend::kAuto) {
    auto queue = CreateIoQueue(wanted, depth);
    if (!queue.ok()) {
      return queue.status().WithContext(
          fmt::format("NvmeStore {}: backend {}", path, IoBackendName(wanted)));
    }
    return queue;
  }
  auto uring = CreateIoQueue(IoBackend::kIoUring, depth);
  if (uring.ok()) return uring;
  auto aio = CreateIoQueue(IoBackend::kLibaio, depth);
  if (aio.ok()) {
    static std::atomic<bool> logged{false};
    LogOnce(logged, fmt::format("NVMe swap falls back to libaio: io_uring is unavailable: {}",
                                uring.status().message()));
    return aio;
  }
  static std::atomic<bool> logged{false};
  LogOnce(logged, fmt::format("NVMe swap falls back to pread/pwrite (one request at a time per "
                              "I/O thread): io_uring is unavailable: {}; libaio is unavailable: {}",
                              uring.status().message(), aio.status().message()));
  return CreateIoQueue(IoBackend::kPosix, depth);
}

}  // namespace

class NvmeStore::Worker {
 public:
  std::unique_ptr<IoQueue> queue;  // used by `thread` only
  std::mutex mu;
  std::condition_variable cv;
  std::deque<IoPiece*> pending;  // guarded by mu: queued, not yet taken by the thread
  bool stopping = false;         // guarded by mu
  std::thread thread;
};

StatusOr<std::unique_ptr<NvmeStore>> NvmeStore::Create(const NvmeStoreOptions& options,
                                                       int64_t capacity_bytes) {
  ZS_RETURN_IF_ERROR(ValidateOptions(options, capacity_bytes));
  ZS_RETURN_IF_ERROR(CheckSwapDirectory(options.dir));
  ZS_RETURN_IF_ERROR(CheckForStaleSwapFiles(options.dir, options.name));
  const int64_t capacity = RoundUp(capacity_bytes, kNvmeAlignment);
  const std::string path = SwapFilePath(options.dir, options.name, getpid());
  ZS_ASSIGN_OR_RETURN(const int fd, CreateSwapFile(options.dir, path, capacity));
  // From here on the store owns fd and the file: on any error its destructor removes them.
  std::unique_ptr<NvmeStore> store(new NvmeStore(options, path, fd, capacity));
  ZS_RETURN_IF_ERROR(store->Init());
  return store;
}

NvmeStore::NvmeStore(NvmeStoreOptions options, std::string path, int fd, int64_t capacity)
    : options_(std::move(options)), path_(std::move(path)), fd_(fd), capacity_(capacity) {}

Status NvmeStore::Init() {
  if (options_.trace != nullptr) {
    trace_track_[0] = options_.trace->Track("nvme read");
    trace_track_[1] = options_.trace->Track("nvme write");
  }
  const auto pages = static_cast<size_t>(capacity_ / kNvmeAlignment);
  page_checksum_.assign(pages, 0);
  page_write_id_.assign(pages, 0);

  const int depth = static_cast<int>(options_.queue_depth);
  ZS_ASSIGN_OR_RETURN(std::unique_ptr<IoQueue> first,
                      CreateFirstQueue(options_.backend, depth, path_));
  backend_ = first->backend();
  for (int64_t i = 0; i < options_.intra_op_parallelism; ++i) {
    auto worker = std::make_unique<Worker>();
    if (i == 0) {
      worker->queue = std::move(first);
    } else {
      auto queue = CreateIoQueue(backend_, depth);
      if (!queue.ok()) {
        return queue.status().WithContext(
            fmt::format("NvmeStore {}: {} queue {} of aio.intra_op_parallelism = {}", path_,
                        IoBackendName(backend_), i, options_.intra_op_parallelism));
      }
      worker->queue = std::move(queue).value();
    }
    workers_.push_back(std::move(worker));
  }
  for (auto& worker : workers_) {
    Worker* w = worker.get();
    w->thread = std::thread([this, w] { RunWorker(*w); });
    pthread_setname_np(w->thread.native_handle(), "zs-nvme-io");
  }
  return OkStatus();
}

NvmeStore::~NvmeStore() {
  // Threads drain their queues before they exit: every request already started finishes.
  for (auto& w : workers_) {
    std::lock_guard<std::mutex> lock(w->mu);
    w->stopping = true;
    w->cv.notify_all();
  }
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
  workers_.clear();  // queues (rings, contexts) go before the file
  if (close(fd_) != 0) ZS_LOG(kWarn, "closing NVMe swap file {}: {}", path_, ErrnoText(errno));
  if (unlink(path_.c_str()) != 0) {
    ZS_LOG(kWarn, "removing NVMe swap file {}: {}", path_, ErrnoText(errno));
  }
}

// ---- requests ------------------------------------------------------------------------------

IoHandle NvmeStore::StartWrite(int64_t offset, const void* src, int64_t bytes) {
  // The store never writes through a write's buffer; the op type is shared with reads.
  return Start(/*is_write=*/true, offset, const_cast<void*>(src), bytes);
}
IoHandle NvmeStore::StartRead(int64_t offset, void* dst, int64_t bytes) {
  return Start(/*is_write=*/false, offset, dst, bytes);
}
Status NvmeStore::Write(int64_t offset, const void* src, int64_t bytes) {
  return StartWrite(offset, src, bytes).Wait();
}
Status NvmeStore::Read(int64_t offset, void* dst, int64_t bytes) {
  return StartRead(offset, dst, bytes).Wait();
}

IoHandle NvmeStore::Start(bool is_write, int64_t offset, void* buffer, int64_t bytes) {
  const char* call = is_write ? "StartWrite" : "StartRead";
  ZS_CHECK(offset >= 0 && bytes >= 0 && offset % kNvmeAlignment == 0 && bytes % kNvmeAlignment == 0,
           "{}({}, {} bytes) on {}: offset and bytes must be non-negative multiples of {}", call,
           offset, bytes, path_, kNvmeAlignment);
  ZS_CHECK(bytes <= capacity_ - offset, "{}({}, {} bytes) on {}: past the capacity of {} bytes",
           call, offset, bytes, path_, capacity_);
  ZS_CHECK(reinterpret_cast<uintptr_t>(buffer) % kNvmeAlignment == 0,
           "{}({}, {} bytes) on {}: buffer {} is not {}-byte aligned (O_DIRECT)", call, offset,
           bytes, path_, buffer, kNvmeAlignment);
  uint32_t write_id = 0;
  if (is_write) write_id = next_write_id_.fetch_add(1) % (kWriteFailedBit - 1) + 1;
  auto request = std::make_shared<IoRequest>(is_write, offset, bytes, write_id);
  if (bytes == 0) {
    request->MarkDone();
    return IoHandle(std::move(request));
  }

  const int64_t block = options_.block_size;
  const int64_t count = (bytes + block - 1) / block;
  request->pieces.resize(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    IoPiece& piece = request->pieces[static_cast<size_t>(i)];
    piece.is_write = is_write;
    piece.fd = fd_;
    piece.offset = offset + i * block;
    piece.bytes = std::min(block, bytes - i * block);
    piece.buffer = static_cast<char*>(buffer) + i * block;
    piece.request = request.get();
  }
  request->SetPiecesLeft(count);
  NoteStarted(is_write);

  // Deal the pieces round-robin, continuing where the previous request stopped, so that small
  // requests also spread over the threads.
  const auto threads = static_cast<int64_t>(workers_.size());
  const auto first = static_cast<int64_t>(next_worker_.fetch_add(static_cast<uint64_t>(count)) %
                                          static_cast<uint64_t>(threads));
  for (int64_t t = 0; t < std::min(threads, count); ++t) {
    Worker& w = *workers_[static_cast<size_t>((first + t) % threads)];
    {
      std::lock_guard<std::mutex> lock(w.mu);
      ZS_CHECK(!w.stopping, "{} on {} while the store is being destroyed", call, path_);
      for (int64_t i = t; i < count; i += threads) {
        w.pending.push_back(&request->pieces[static_cast<size_t>(i)]);
      }
    }
    w.cv.notify_one();
  }
  return IoHandle(std::move(request));
}

// One I/O thread: take pieces, checksum writes, submit, reap, verify reads, complete. With
// aio.overlap_events it refills the queue after every reap; without it, it submits a batch and
// reaps all of it before taking more. The CPU work is placed so that the disk waits for it as
// little as possible: an idle disk gets the first piece as soon as that piece is checksummed,
// and pieces that came back are verified only once the queue has been refilled.
void NvmeStore::RunWorker(Worker& w) {
  const int64_t depth = options_.queue_depth;
  std::vector<IoOp*> batch;
  std::vector<IoOp*> ready;  // checksummed, not yet submitted
  std::vector<IoOp*> done;   // back from the last Reap, not yet finished
  int64_t in_flight = 0;
  for (;;) {
    batch.clear();
    {
      std::unique_lock<std::mutex> lock(w.mu);
      if (in_flight == 0 && done.empty()) {
        w.cv.wait(lock, [&] { return w.stopping || !w.pending.empty(); });
        if (w.pending.empty()) return;  // stopping, and every piece has finished
      }
      if (in_flight == 0 || options_.overlap_events) {
        while (!w.pending.empty() && in_flight + static_cast<int64_t>(batch.size()) < depth) {
          batch.push_back(w.pending.front());
          w.pending.pop_front();
        }
      }
    }
    // Checksums and checks run here, outside the lock and before the kernel sees the op.
    for (IoOp* op : batch) {
      auto& piece = static_cast<IoPiece&>(*op);
      if (piece.is_write) {
        ChecksumPagesToWrite(piece);
      } else if (Status readable = CheckPagesReadable(piece); !readable.ok()) {
        PieceDone(piece, std::move(readable));
        continue;
      }
      ready.push_back(op);
      if (in_flight == 0) {  // the disk is idle: do not keep it waiting for the whole batch
        w.queue->Submit(ready, options_.single_submit);
        in_flight += static_cast<int64_t>(ready.size());
        ready.clear();
      }
    }
    if (!ready.empty()) {
      w.queue->Submit(ready, options_.single_submit);
      in_flight += static_cast<int64_t>(ready.size());
      ready.clear();
    }
    for (IoOp* op : done) {
      auto& piece = static_cast<IoPiece&>(*op);
      PieceDone(piece, FinishPiece(piece));
    }
    done.clear();
    if (in_flight > 0) {
      w.queue->Reap(done);
      in_flight -= static_cast<int64_t>(done.size());
    }
  }
}

void NvmeStore::PieceDone(IoPiece& piece, Status status) {
  IoRequest& request = *piece.request;
  if (!request.PieceDone(piece.offset, std::move(status))) return;
  // Stats first, so that they include the request once its Wait() returns.
  NoteFinished(request.is_write, request.bytes, request.ok());
  if (options_.trace != nullptr) {
    options_.trace->Record(trace_track_[request.is_write], request.is_write ? "write" : "read",
                           request.started, std::chrono::steady_clock::now(),
                           fmt::format(R"({{"offset":{},"bytes":{},"ok":{}}})", request.offset,
                                       request.bytes, request.ok()));
  }
  request.MarkDone();
}

// A write's pages get their new checksum now and keep kWriteFailedBit until the write is known
// to have succeeded, so pages of a write that failed (or never finished) cannot be read.
void NvmeStore::ChecksumPagesToWrite(const IoPiece& piece) {
  const auto* data = static_cast<const unsigned char*>(piece.buffer);
  const auto first = static_cast<size_t>(piece.offset / kNvmeAlignment);
  for (int64_t at = 0; at < piece.bytes; at += kNvmeAlignment) {
    const size_t page = first + static_cast<size_t>(at / kNvmeAlignment);
    page_checksum_[page] = PageChecksum(data + at, static_cast<uint64_t>(piece.offset + at));
    page_write_id_[page] = piece.request->write_id | kWriteFailedBit;
  }
}

Status NvmeStore::CheckPagesReadable(const IoPiece& piece) const {
  const auto first = static_cast<size_t>(piece.offset / kNvmeAlignment);
  for (int64_t at = 0; at < piece.bytes; at += kNvmeAlignment) {
    const uint32_t id = page_write_id_[first + static_cast<size_t>(at / kNvmeAlignment)];
    if (id == 0) {
      return FailedPreconditionError(fmt::format(
          "reading {} at offset {}: the page was never written", path_, piece.offset + at));
    }
    if ((id & kWriteFailedBit) != 0) {
      return FailedPreconditionError(fmt::format(
          "reading {} at offset {}: the page's last write (write #{}) did not succeed, so its "
          "contents are undefined",
          path_, piece.offset + at, id & ~kWriteFailedBit));
    }
  }
  return OkStatus();
}

Status NvmeStore::FinishPiece(IoPiece& piece) {
  if (piece.result < 0) return OpError(piece, static_cast<int>(-piece.result));
  if (piece.result < piece.bytes) {
    if (!piece.is_write) {
      return IoError(fmt::format(
          "short read of {} at offset {}: asked {} bytes, got {} (was the file truncated?)", path_,
          piece.offset, piece.bytes, piece.result));
    }
    ZS_RETURN_IF_ERROR(FinishShortWrite(piece));
  }
  if (!piece.is_write) return VerifyPagesRead(piece);
  const auto first = static_cast<size_t>(piece.offset / kNvmeAlignment);
  for (int64_t at = 0; at < piece.bytes; at += kNvmeAlignment) {
    page_write_id_[first + static_cast<size_t>(at / kNvmeAlignment)] = piece.request->write_id;
  }
  return OkStatus();
}

// A write the kernel cut short is usually a full disk or RLIMIT_FSIZE; writing the rest
// (synchronously, on this I/O thread) turns that into its errno, or finishes the write when the
// cut had another cause.
Status NvmeStore::FinishShortWrite(IoPiece& piece) {
  int64_t written = piece.result;
  while (written < piece.bytes) {
    if (written % kNvmeAlignment != 0) break;  // O_DIRECT cannot continue mid-page
    const ssize_t r = pwrite(fd_, static_cast<const char*>(piece.buffer) + written,
                             static_cast<size_t>(piece.bytes - written), piece.offset + written);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return OpError(piece, errno);
    if (r == 0) break;
    written += r;
  }
  if (written == piece.bytes) return OkStatus();
  return IoError(
      fmt::format("no space left writing {} bytes to {} at offset {}: only {} bytes "
                  "were written",
                  piece.bytes, path_, piece.offset, written));
}

Status NvmeStore::OpError(const IoPiece& piece, int error) const {
  if (piece.is_write && IsNoSpaceErrno(error)) {
    return IoError(fmt::format("no space left writing {} bytes to {} at offset {}: {}", piece.bytes,
                               path_, piece.offset, ErrnoText(error)));
  }
  return IoError(fmt::format(
      "{} {} bytes {} {} at offset {} failed: {}", piece.is_write ? "writing" : "reading",
      piece.bytes, piece.is_write ? "to" : "from", path_, piece.offset, ErrnoText(error)));
}

Status NvmeStore::VerifyPagesRead(const IoPiece& piece) const {
  const auto* data = static_cast<const unsigned char*>(piece.buffer);
  const auto first = static_cast<size_t>(piece.offset / kNvmeAlignment);
  for (int64_t at = 0; at < piece.bytes; at += kNvmeAlignment) {
    const size_t page = first + static_cast<size_t>(at / kNvmeAlignment);
    const uint64_t got = PageChecksum(data + at, static_cast<uint64_t>(piece.offset + at));
    if (got != page_checksum_[page]) {
      return IoError(fmt::format(
          "checksum mismatch reading {} at offset {} (page written by write #{}: expected "
          "{:#018x}, got {:#018x}): the file was changed or corrupted outside the store",
          path_, piece.offset + at, page_write_id_[page], page_checksum_[page], got));
    }
  }
  return OkStatus();
}

// ---- stats ---------------------------------------------------------------------------------

void NvmeStore::NoteStarted(bool is_write) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  (is_write ? stats_.writes : stats_.reads) += 1;
  if (in_flight_[is_write]++ == 0) in_flight_since_[is_write] = std::chrono::steady_clock::now();
}

void NvmeStore::NoteFinished(bool is_write, int64_t bytes, bool ok) {
  std::lock_guard<std::mutex> lock(stats_mu_);
  if (ok) (is_write ? stats_.bytes_written : stats_.bytes_read) += bytes;
  if (--in_flight_[is_write] == 0) {
    const std::chrono::duration<double> busy =
        std::chrono::steady_clock::now() - in_flight_since_[is_write];
    (is_write ? stats_.write_seconds : stats_.read_seconds) += busy.count();
  }
}

NvmeStats NvmeStore::stats() const {
  std::lock_guard<std::mutex> lock(stats_mu_);
  NvmeStats s = stats_;
  const auto now = std::chrono::steady_clock::now();
  // Include the current busy period of requests still in flight.
  if (in_flight_[0] > 0) {
    s.read_seconds += std::chrono::duration<double>(now - in_flight_since_[0]).count();
  }
  if (in_flight_[1] > 0) {
    s.write_seconds += std::chrono::duration<double>(now - in_flight_since_[1]).count();
  }
  return s;
}

}  // namespace zs
