// NvmeStore: the NVMe tier of offload/ — one preallocated O_DIRECT swap file that shard arrays
// are written to and read back from, asynchronously, with every page checksummed.
//
// Contract
// - Ownership: the caller owns the store (one per rank and purpose, e.g. "optimizer.rank0").
//   The store owns its file <dir>/zerostack-<name>.<pid>.swap: Create makes it (O_EXCL) and
//   preallocates it, the destructor removes it. A run that is killed leaves the file behind;
//   the next Create with the same dir and name refuses to start until it is removed (see
//   Create), so a dead run's swap never silently fills the disk.
// - Buffers: every I/O moves whole 4096-byte pages: offsets, byte counts and buffer addresses
//   are multiples of kNvmeAlignment (host tiers of Device are allocated so). Violating that, or
//   a range past capacity(), is a programmer bug (ZS_CHECK). The buffer of a request belongs to
//   the store from Start*() until its handle's Wait() returns: do not touch, free or reuse it.
//   Two requests whose ranges overlap must not be in flight at the same time (their order is
//   not defined); wait for the first before starting the second.
// - Integrity: the store keeps, in host memory, a 64-bit checksum and the write number of every
//   page it wrote (12 bytes per 4 KiB page: 0.3% of capacity). A read verifies every page it
//   returns, so data that the disk, the filesystem or another process changed, lost or cut
//   short is an error, never silently wrong. Pages never written, or whose last write failed,
//   cannot be read.
// - Threads: every method may be called from any thread. Requests run on the store's I/O threads
//   (aio.intra_op_parallelism of them, each with its own io_uring ring or libaio context).
//   A request is split into aio.block_size pieces dealt round-robin to the threads; each thread
//   keeps at most aio.queue_depth pieces in flight and checksums the pages of its own pieces
//   (writes before submitting, reads after completion), so hashing runs in parallel with I/O.
// - Errors: Create and Wait return Status values whose messages name the file, the byte offset
//   and the byte counts involved; see Create and IoHandle for the codes.
//
// What blocks (the calling host thread):
//   Create             the host: scans dir, creates and fallocates the file, starts the threads.
//   StartWrite/Read    nothing (queues the request for the I/O threads).
//   IoHandle::Wait     the host, until every piece of the request has finished.
//   ~IoHandle          nothing when waited; an unwaited handle is a bug (ZS_DCHECK) and in
//                      release builds waits for the request, as Wait would.
//   Write/Read         the host: Start* then Wait.
//   stats              nothing (a short lock).
//   ~NvmeStore         the host, until every request already started has finished; then it
//                      closes and removes the file.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/status.h"
#include "runtime/base/trace_recorder.h"

namespace zs {

// The unit of alignment of offsets, sizes and buffers of every I/O (O_DIRECT).
inline constexpr int64_t kNvmeAlignment = 4096;

// The asynchronous I/O interface the store's threads use. kAuto: io_uring if the kernel allows
// it, else libaio, else pread/pwrite (one op at a time per I/O thread).
enum class IoBackend { kAuto, kIoUring, kLibaio, kPosix };
std::string_view IoBackendName(IoBackend b);  // "auto", "io_uring", "libaio", "posix"

// DeepSpeed's "aio" section plus the path; field comments give the config key that errors name.
struct NvmeStoreOptions {
  std::string dir;               // nvme_path: the directory; must exist
  std::string name;              // file stem, e.g. "optimizer.rank0"; no '/'
  int64_t block_size = 1 << 20;  // aio.block_size: bytes per request, multiple of 4096, <= 1 GiB
  int64_t queue_depth = 8;       // aio.queue_depth: requests in flight per ring/context, 1..4096
  int64_t intra_op_parallelism = 1;  // aio.intra_op_parallelism: I/O threads (own ring each), 1..64
  bool single_submit = false;        // aio.single_submit: submit requests one by one
  bool overlap_events = true;        // aio.overlap_events: submit new requests while reaping
  IoBackend backend = IoBackend::kAuto;
  // Not owned; null: no trace. Every request becomes a span from Start* to its last piece's
  // completion, on the tracks "nvme read" and "nvme write" (recorded on the I/O threads).
  TraceRecorder* trace = nullptr;
};

// Totals since Create. reads/writes count requests (Start* calls), bytes count those of requests
// that succeeded. The seconds are the wall time during which at least one read (write) request
// was in flight, from Start* to completion, so bytes / seconds is the achieved bandwidth.
struct NvmeStats {
  int64_t bytes_read = 0, bytes_written = 0, reads = 0, writes = 0;
  double read_seconds = 0, write_seconds = 0;
};

namespace internal {
class IoRequest;  // the completion record shared by a handle and the I/O threads
struct IoPiece;   // one block_size piece of a request
}  // namespace internal

// The handle of one StartWrite/StartRead. Move-only; used by one thread at a time.
// Wait() blocks until the request finished and returns its Status; it may be called again and
// returns the same Status. The first error by file offset wins: a read that fails in two
// pieces reports the lower offset. Codes:
//   kIoError             an errno (the message has the file, offset and strerror); no space
//                        (ENOSPC/EFBIG) on write; a short read (file truncated); a checksum
//                        mismatch (the offset of the first bad page).
//   kFailedPrecondition  a read of a page that was never written, or whose last write failed.
// A failed request leaves its destination undefined (a read's buffer, a write's pages): the
// store marks a failed write's pages so that reading them fails too.
class [[nodiscard]] IoHandle {
 public:
  IoHandle();  // empty: valid() is false, Wait() returns OK
  IoHandle(IoHandle&& other) noexcept;
  IoHandle& operator=(IoHandle&& other) noexcept;  // the replaced handle is destroyed first
  IoHandle(const IoHandle&) = delete;
  IoHandle& operator=(const IoHandle&) = delete;
  ~IoHandle();

  Status Wait();
  bool valid() const { return request_ != nullptr; }

 private:
  friend class NvmeStore;
  explicit IoHandle(std::shared_ptr<internal::IoRequest> request);
  void Release();  // waits if not waited (the release-build behaviour of the destructor)

  std::shared_ptr<internal::IoRequest> request_;
  bool waited_ = false;
};

class NvmeStore {
 public:
  // Creates (O_CREAT|O_EXCL, O_DIRECT) <dir>/zerostack-<name>.<pid>.swap and preallocates
  // `capacity_bytes` rounded up to kNvmeAlignment (fallocate), then starts the I/O threads.
  // Errors, each naming the path:
  //   InvalidArgument     a bad option, naming its key (aio.block_size not a positive multiple
  //                       of 4096, aio.queue_depth < 1, ...), or capacity_bytes <= 0.
  //   NotFound            dir does not exist.   InvalidArgument: dir is not a directory.
  //   FailedPrecondition  stale files: dir holds zerostack-<name>.<pid>.swap of a pid that is
  //                       no longer alive (kill(pid, 0) fails with ESRCH; pids of this pid
  //                       namespace), i.e. left by a killed run; the message names every one and
  //                       asks to remove them. Files of live processes (another rank on this
  //                       host) are left alone. Also: this process already has a store of
  //                       this name in dir (the file exists).
  //   IoError             "no space for N bytes at <path>: ..." when N exceeds the filesystem's
  //                       available bytes (statvfs f_bavail, df's "Avail"; checked first, so a
  //                       failing Create does not fill the disk), or fallocate fails with
  //                       ENOSPC/EFBIG/EDQUOT (e.g. RLIMIT_FSIZE); the filesystem lacks
  //                       O_DIRECT; any other errno.
  //   Unavailable         the backend asked for (not kAuto) cannot be set up here.
  // With kAuto, each fallback (io_uring -> libaio -> posix) is logged once per process with the
  // reason the better backend failed.
  static StatusOr<std::unique_ptr<NvmeStore>> Create(const NvmeStoreOptions& options,
                                                     int64_t capacity_bytes);
  ~NvmeStore();
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  // Queue a request of `bytes` at file offset `offset` (see the contract for the rules).
  // bytes == 0 gives a handle that is already done.
  IoHandle StartWrite(int64_t offset, const void* src, int64_t bytes);
  IoHandle StartRead(int64_t offset, void* dst, int64_t bytes);
  Status Write(int64_t offset, const void* src, int64_t bytes);  // StartWrite + Wait
  Status Read(int64_t offset, void* dst, int64_t bytes);         // StartRead + Wait

  const std::string& path() const { return path_; }
  int64_t capacity() const { return capacity_; }
  IoBackend backend() const { return backend_; }  // the one chosen (never kAuto)
  NvmeStats stats() const;                        // thread-safe

 private:
  class Worker;  // one I/O thread with its queue

  NvmeStore(NvmeStoreOptions options, std::string path, int fd, int64_t capacity);
  Status Init();  // sizes the page tables, sets up the queues, starts the I/O threads
  IoHandle Start(bool is_write, int64_t offset, void* buffer, int64_t bytes);
  void NoteStarted(bool is_write);
  void NoteFinished(bool is_write, int64_t bytes, bool ok);

  // Run on the I/O threads.
  void RunWorker(Worker& worker);
  void ChecksumPagesToWrite(const internal::IoPiece& piece);
  Status CheckPagesReadable(const internal::IoPiece& piece) const;
  Status FinishPiece(internal::IoPiece& piece);  // the piece's Status once its op came back
  Status FinishShortWrite(internal::IoPiece& piece);
  Status VerifyPagesRead(const internal::IoPiece& piece) const;
  Status OpError(const internal::IoPiece& piece, int error) const;
  void PieceDone(internal::IoPiece& piece, Status status);

  // Pages: index = file offset / kNvmeAlignment.
  static constexpr uint32_t kWriteFailedBit = 1u << 31;  // in page_write_id_: "last write failed"

  const NvmeStoreOptions options_;
  int trace_track_[2] = {-1, -1};  // [is_write]: options_.trace's tracks
  const std::string path_;
  const int fd_;
  const int64_t capacity_;
  IoBackend backend_ = IoBackend::kAuto;
  std::vector<std::unique_ptr<Worker>> workers_;  // set in Create, then fixed

  // Per page: the checksum of its last write and that write's number (0: never written; with
  // kWriteFailedBit: that write is in flight or failed). Each page's entries are touched only by
  // the I/O thread of the piece that covers it; callers' Wait()s order the requests (the contract
  // forbids overlapping requests in flight), so no lock is needed.
  std::vector<uint64_t> page_checksum_;
  std::vector<uint32_t> page_write_id_;

  std::atomic<uint32_t> next_write_id_{0};  // numbers writes 1, 2, ... (wrapping below the bit)
  std::atomic<uint64_t> next_worker_{0};    // round-robin start of each request's pieces

  mutable std::mutex stats_mu_;
  NvmeStats stats_;                // guarded by stats_mu_
  int64_t in_flight_[2] = {0, 0};  // [is_write]: requests in flight; guarded by stats_mu_
  // [is_write]: when in_flight_ last left 0; guarded by stats_mu_
  std::chrono::steady_clock::time_point in_flight_since_[2];
};

}  // namespace zs
