#include "tests/runtime/comm/comm_checks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "runtime/base/splitmix64.h"

namespace zs::testing {
namespace {

// No result of any check can equal it: every input (hence every sum, average and max) is
// positive.
constexpr float kSentinel = -3.0f;

// A typed host buffer.
class Buffer {
 public:
  Buffer(size_t count, DType dtype)
      : count_(count), dtype_(dtype), bytes_(count * DTypeSize(dtype)) {
    for (size_t i = 0; i < count; ++i) Set(i, kSentinel);
  }
  void* data() { return bytes_.data(); }
  const void* data() const { return bytes_.data(); }
  std::byte* at(size_t i) { return bytes_.data() + i * DTypeSize(dtype_); }
  size_t count() const { return count_; }
  DType dtype() const { return dtype_; }
  float Get(size_t i) const { return LoadAsFloat(bytes_.data(), dtype_, i); }
  void Set(size_t i, float v) { StoreFromFloat(bytes_.data(), dtype_, i, v); }
  // Elements [begin, begin + n) hold rank's inputs from index `first`.
  void FillInputs(size_t begin, size_t n, int rank, size_t first, uint32_t seed) {
    for (size_t i = 0; i < n; ++i) Set(begin + i, InputValue(rank, first + i, seed, dtype_));
  }

 private:
  size_t count_;
  DType dtype_;
  std::vector<std::byte> bytes_;
};

Buffer Inputs(int rank, size_t count, DType dtype, uint32_t seed) {
  Buffer b(count, dtype);
  b.FillInputs(0, count, rank, 0, seed);
  return b;
}

// Element i = the contract's reduction over ranks 0..n-1 of InputValue(k, first + i).
Buffer ExpectReduced(int n, size_t count, DType dtype, ReduceOp op, uint32_t seed, size_t first) {
  Buffer b(count, dtype);
  for (size_t i = 0; i < count; ++i) {
    float acc = InputValue(0, first + i, seed, dtype);
    for (int k = 1; k < n; ++k) {
      const float x = InputValue(k, first + i, seed, dtype);
      acc = op == ReduceOp::kMax ? (acc > x ? acc : x) : acc + x;
    }
    if (op == ReduceOp::kAvg) acc = acc / float(n);
    b.Set(i, acc);
  }
  return b;
}

// Block k holds rank k's first `count` inputs.
Buffer ExpectGathered(int n, size_t count, DType dtype, uint32_t seed) {
  Buffer b(count * n, dtype);
  for (int k = 0; k < n; ++k) b.FillInputs(size_t(k) * count, count, k, 0, seed);
  return b;
}

// Compares `count` elements of got (from element `offset`) with expected, bit for bit.
Status Compare(const Communicator& comm, const std::string& what, const Buffer& got, size_t offset,
               const Buffer& expected) {
  const size_t element = DTypeSize(expected.dtype());
  for (size_t i = 0; i < expected.count(); ++i) {
    const std::byte* g = static_cast<const std::byte*>(got.data()) + (offset + i) * element;
    const std::byte* e = static_cast<const std::byte*>(expected.data()) + i * element;
    if (std::memcmp(g, e, element) != 0) {
      return InternalError(
          fmt::format("{} on {} rank {} of {}: element {} of {} is {} but the reference is {}",
                      what, comm.backend_name(), comm.rank(), comm.size(), i, expected.count(),
                      got.Get(offset + i), expected.Get(i)));
    }
  }
  return OkStatus();
}

Status Named(Status s, const std::string& what) { return s.ok() ? s : s.WithContext(what); }

std::string Name(std::string_view op, size_t count, DType dtype) {
  return fmt::format("{}(count={}, {})", op, count, DTypeName(dtype));
}
std::string Name(std::string_view op, size_t count, DType dtype, ReduceOp r, bool in_place) {
  return fmt::format("{}(count={}, {}, {}{})", op, count, DTypeName(dtype), ReduceOpName(r),
                     in_place ? ", in place" : "");
}

// Waits every handle; returns the first error.
Status WaitAll(std::vector<CommHandle>& handles) {
  Status first;
  for (CommHandle& h : handles) {
    Status s = h.Wait();
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

Status ExpectInvalid(const Communicator& comm, CommHandle handle, const std::string& what) {
  Status s = handle.Wait();
  if (s.code() == StatusCode::kInvalidArgument) return OkStatus();
  return InternalError(fmt::format("{} on {} rank {}: expected INVALID_ARGUMENT, got {}", what,
                                   comm.backend_name(), comm.rank(), s.ToString()));
}

constexpr DType kDTypes[] = {DType::kF32, DType::kBF16, DType::kF16};
constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};

}  // namespace

float InputValue(int rank, size_t index, uint32_t seed, DType dtype) {
  const uint64_t h =
      SplitMix64(SplitMix64(uint64_t(seed) * 0x100000001b3ull + uint64_t(rank)) ^ index);
  const float mantissa = 1.0f + float(h & 0x7fffff) / float(1 << 23);  // [1, 2)
  const int exponent = int((h >> 40) % 8) - 4;                         // 2^-4 .. 2^3
  const float v = std::ldexp(mantissa, exponent);
  float rounded = v;
  if (dtype == DType::kBF16) rounded = BF16ToFloat(FloatToBF16(v));
  if (dtype == DType::kF16) rounded = F16ToFloat(FloatToF16(v));
  return rounded;
}

Status CheckAllGather(Communicator& comm, size_t count, DType dtype, uint32_t seed, bool in_place) {
  const std::string what = Name(in_place ? "all_gather in place" : "all_gather", count, dtype);
  const int n = comm.size(), r = comm.rank();
  Buffer recv(count * n, dtype);
  Buffer send = Inputs(r, count, dtype, seed);
  const void* src = send.data();
  if (in_place) {
    recv.FillInputs(size_t(r) * count, count, r, 0, seed);
    src = recv.at(size_t(r) * count);
  }
  ZS_RETURN_IF_ERROR(Named(comm.AllGather(src, recv.data(), count, dtype), what));
  return Compare(comm, what, recv, 0, ExpectGathered(n, count, dtype, seed));
}

Status CheckReduceScatter(Communicator& comm, size_t count, DType dtype, ReduceOp op, uint32_t seed,
                          bool in_place) {
  const std::string what = Name("reduce_scatter", count, dtype, op, in_place);
  const int n = comm.size(), r = comm.rank();
  Buffer send = Inputs(r, count * n, dtype, seed);
  Buffer recv(count, dtype);
  void* dst = in_place ? send.at(size_t(r) * count) : recv.data();
  ZS_RETURN_IF_ERROR(Named(comm.ReduceScatter(send.data(), dst, count, dtype, op), what));
  const Buffer expected = ExpectReduced(n, count, dtype, op, seed, size_t(r) * count);
  return in_place ? Compare(comm, what, send, size_t(r) * count, expected)
                  : Compare(comm, what, recv, 0, expected);
}

Status CheckAllReduce(Communicator& comm, size_t count, DType dtype, ReduceOp op, uint32_t seed,
                      bool in_place) {
  const std::string what = Name("all_reduce", count, dtype, op, in_place);
  Buffer send = Inputs(comm.rank(), count, dtype, seed);
  Buffer recv(count, dtype);
  Buffer& out = in_place ? send : recv;
  ZS_RETURN_IF_ERROR(Named(comm.AllReduce(send.data(), out.data(), count, dtype, op), what));
  return Compare(comm, what, out, 0, ExpectReduced(comm.size(), count, dtype, op, seed, 0));
}

Status CheckBroadcast(Communicator& comm, size_t count, DType dtype, int root, uint32_t seed) {
  const std::string what = fmt::format("{} from root {}", Name("broadcast", count, dtype), root);
  Buffer buffer = comm.rank() == root ? Inputs(root, count, dtype, seed) : Buffer(count, dtype);
  ZS_RETURN_IF_ERROR(Named(comm.Broadcast(buffer.data(), count, dtype, root), what));
  return Compare(comm, what, buffer, 0, Inputs(root, count, dtype, seed));
}

Status CheckSendRecvRing(Communicator& comm, size_t count, DType dtype, uint32_t seed,
                         int messages) {
  const int n = comm.size(), r = comm.rank();
  if (n == 1) return OkStatus();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  auto size_of = [&](int m) { return m % 3 == 0 ? count : m % 3 == 1 ? count / 2 + 1 : 0; };
  std::vector<Buffer> sends, recvs;
  for (int m = 0; m < messages; ++m) {
    sends.push_back(Inputs(r, size_of(m), dtype, seed + m));
    recvs.emplace_back(size_of(m), dtype);
  }
  std::vector<CommHandle> handles;
  for (int m = 0; m < messages; ++m) {
    handles.push_back(comm.StartSend(sends[m].data(), size_of(m), dtype, next));
    handles.push_back(comm.StartRecv(recvs[m].data(), size_of(m), dtype, prev));
  }
  const std::string what =
      fmt::format("ring send/recv ({} messages, {})", messages, Name("first", count, dtype));
  ZS_RETURN_IF_ERROR(Named(WaitAll(handles), what));
  for (int m = 0; m < messages; ++m) {
    ZS_RETURN_IF_ERROR(Compare(comm, fmt::format("{} message {} from rank {}", what, m, prev),
                               recvs[m], 0, Inputs(prev, size_of(m), dtype, seed + m)));
  }
  return OkStatus();
}

Status CheckAllToAll(Communicator& comm, size_t count, DType dtype, uint32_t seed) {
  const std::string what = Name("all_to_all", count, dtype);
  const int n = comm.size(), r = comm.rank();
  Buffer send = Inputs(r, count * n, dtype, seed);
  Buffer recv(count * n, dtype);
  ZS_RETURN_IF_ERROR(Named(comm.AllToAll(send.data(), recv.data(), count, dtype), what));
  for (int p = 0; p < n; ++p) {
    Buffer expected(count, dtype);
    expected.FillInputs(0, count, p, size_t(r) * count, seed);
    ZS_RETURN_IF_ERROR(Compare(comm, fmt::format("{} block from rank {}", what, p), recv,
                               size_t(p) * count, expected));
  }
  return OkStatus();
}

size_t AllToAllCount(int from, int to, size_t base) {
  if ((from + 2 * to) % 3 == 1) return 0;
  return base * size_t(1 + (from * 5 + to * 3) % 4);
}

namespace {

constexpr size_t kGap = 3;  // sentinel elements before every block of the uneven layouts

// Rank `r`'s send layout for CheckAllToAllv: blocks in reverse peer order, each after a gap.
void SendLayout(int r, int n, size_t base, std::vector<size_t>* counts,
                std::vector<size_t>* offsets, size_t* total) {
  counts->assign(n, 0);
  offsets->assign(n, 0);
  size_t at = 0;
  for (int p = n - 1; p >= 0; --p) {
    at += kGap;
    (*counts)[p] = AllToAllCount(r, p, base);
    (*offsets)[p] = at;
    at += (*counts)[p];
  }
  *total = at + kGap;
}

// Receive layout: blocks in the order r+1, r+2, ..., r (rotated), each after a gap.
void RecvLayout(int r, int n, size_t base, std::vector<size_t>* counts,
                std::vector<size_t>* offsets, size_t* total) {
  counts->assign(n, 0);
  offsets->assign(n, 0);
  size_t at = 0;
  for (int i = 1; i <= n; ++i) {
    const int p = (r + i) % n;
    at += kGap;
    (*counts)[p] = AllToAllCount(p, r, base);
    (*offsets)[p] = at;
    at += (*counts)[p];
  }
  *total = at + kGap;
}

}  // namespace

Status CheckAllToAllv(Communicator& comm, size_t base, DType dtype, uint32_t seed) {
  const std::string what = Name("all_to_all_v", base, dtype);
  const int n = comm.size(), r = comm.rank();
  std::vector<size_t> send_counts, send_offsets, recv_counts, recv_offsets;
  size_t send_total = 0, recv_total = 0;
  SendLayout(r, n, base, &send_counts, &send_offsets, &send_total);
  RecvLayout(r, n, base, &recv_counts, &recv_offsets, &recv_total);
  // The block for peer p holds rank r's inputs from index p * 1'000'000.
  Buffer send(send_total, dtype);
  for (int p = 0; p < n; ++p) {
    send.FillInputs(send_offsets[p], send_counts[p], r, size_t(p) * 1'000'000, seed);
  }
  Buffer recv(recv_total, dtype);
  ZS_RETURN_IF_ERROR(Named(comm.AllToAllv(send.data(), send_counts, send_offsets, recv.data(),
                                          recv_counts, recv_offsets, dtype),
                           what));
  // Expected: the whole recv buffer, sentinel in the gaps.
  Buffer expected(recv_total, dtype);
  for (int p = 0; p < n; ++p) {
    expected.FillInputs(recv_offsets[p], recv_counts[p], p, size_t(r) * 1'000'000, seed);
  }
  return Compare(comm, what, recv, 0, expected);
}

Status RunMismatchedAllToAll(Communicator& comm, DType dtype) {
  const int n = comm.size(), r = comm.rank();
  std::vector<size_t> counts(n, 4), offsets(n);
  for (int p = 0; p < n; ++p) offsets[p] = size_t(p) * 8;
  std::vector<size_t> send_counts = counts;
  if (r == 0) send_counts[n - 1] = 5;  // rank n-1 expects 4
  Buffer send = Inputs(r, 8 * size_t(n), dtype, 77);
  Buffer recv(8 * size_t(n), dtype);
  return comm.AllToAllv(send.data(), send_counts, offsets, recv.data(), counts, offsets, dtype);
}

Status CheckBarrier(Communicator& comm) {
  for (int i = 0; i < 3; ++i) {
    ZS_RETURN_IF_ERROR(Named(comm.Barrier(), fmt::format("barrier {}", i)));
    ZS_RETURN_IF_ERROR(CheckAllReduce(comm, 3, DType::kF32, ReduceOp::kSum, 900 + i));
  }
  return Named(comm.Barrier(), "final barrier");
}

Status CheckManyInFlight(Communicator& comm, size_t count, uint32_t seed, int ops) {
  const int n = comm.size(), r = comm.rank();
  struct Op {
    std::string what;
    std::unique_ptr<Buffer> in, out;
    std::function<Buffer()> expected;
    CommHandle handle;
  };
  std::vector<Op> started(ops);
  for (int i = 0; i < ops; ++i) {
    Op& op = started[i];
    const DType dtype = kDTypes[i % 3];
    const ReduceOp reduce = kOps[(i / 3) % 3];
    const size_t c = count + size_t(i);
    const uint32_t s = seed + uint32_t(i);
    switch (i % 4) {
      case 0:
        op.what = Name("in-flight all_reduce", c, dtype, reduce, false);
        op.in = std::make_unique<Buffer>(Inputs(r, c, dtype, s));
        op.out = std::make_unique<Buffer>(c, dtype);
        op.handle = comm.StartAllReduce(op.in->data(), op.out->data(), c, dtype, reduce);
        op.expected = [=] { return ExpectReduced(n, c, dtype, reduce, s, 0); };
        break;
      case 1:
        op.what = Name("in-flight all_gather", c, dtype);
        op.in = std::make_unique<Buffer>(Inputs(r, c, dtype, s));
        op.out = std::make_unique<Buffer>(c * n, dtype);
        op.handle = comm.StartAllGather(op.in->data(), op.out->data(), c, dtype);
        op.expected = [=] { return ExpectGathered(n, c, dtype, s); };
        break;
      case 2:
        op.what = Name("in-flight reduce_scatter", c, dtype, reduce, false);
        op.in = std::make_unique<Buffer>(Inputs(r, c * n, dtype, s));
        op.out = std::make_unique<Buffer>(c, dtype);
        op.handle = comm.StartReduceScatter(op.in->data(), op.out->data(), c, dtype, reduce);
        op.expected = [=] { return ExpectReduced(n, c, dtype, reduce, s, size_t(r) * c); };
        break;
      default: {
        const int root = i % n;
        op.what = fmt::format("in-flight {} from root {}", Name("broadcast", c, dtype), root);
        op.out = std::make_unique<Buffer>(r == root ? Inputs(r, c, dtype, s) : Buffer(c, dtype));
        op.handle = comm.StartBroadcast(op.out->data(), c, dtype, root);
        op.expected = [=] { return Inputs(root, c, dtype, s); };
        break;
      }
    }
  }
  Status first;
  for (Op& op : started) {
    Status s = Named(op.handle.Wait(), op.what);
    if (s.ok()) s = Compare(comm, op.what, *op.out, 0, op.expected());
    if (first.ok() && !s.ok()) first = s;
  }
  return first;
}

Status CheckReduceScatterAllGatherEqualsAllReduce(Communicator& comm, size_t count, DType dtype,
                                                  ReduceOp op, uint32_t seed) {
  const std::string what =
      fmt::format("reduce_scatter+all_gather vs all_reduce (count={} per rank, {}, {})", count,
                  DTypeName(dtype), ReduceOpName(op));
  const int n = comm.size(), r = comm.rank();
  const size_t total = count * n;
  Buffer input = Inputs(r, total, dtype, seed);
  Buffer shard(count, dtype), gathered(total, dtype), reduced(total, dtype);
  ZS_RETURN_IF_ERROR(Named(comm.ReduceScatter(input.data(), shard.data(), count, dtype, op), what));
  ZS_RETURN_IF_ERROR(Named(comm.AllGather(shard.data(), gathered.data(), count, dtype), what));
  ZS_RETURN_IF_ERROR(Named(comm.AllReduce(input.data(), reduced.data(), total, dtype, op), what));
  ZS_RETURN_IF_ERROR(Compare(comm, what, gathered, 0, reduced));
  return Compare(comm, what, reduced, 0, ExpectReduced(n, total, dtype, op, seed, 0));
}

namespace {

// Splits comm, then checks the child's size, rank and membership (parent ranks in child order).
Status CheckOneSplit(Communicator& comm, const std::string& name, int color, int key,
                     const std::vector<int>& expected_members) {
  const std::string what = fmt::format("split '{}' (color={}, key={})", name, color, key);
  StatusOr<std::unique_ptr<Communicator>> split = comm.Split(color, key, name);
  ZS_RETURN_IF_ERROR(Named(split.status(), what));
  std::unique_ptr<Communicator> child = std::move(*split);
  if (color < 0) {
    if (child != nullptr) {
      return InternalError(
          fmt::format("{}: rank {} got a communicator for a negative color", what, comm.rank()));
    }
    return OkStatus();
  }
  if (child == nullptr) return InternalError(fmt::format("{}: got no communicator", what));
  const int m = int(expected_members.size());
  auto it = std::find(expected_members.begin(), expected_members.end(), comm.rank());
  const int expected_rank = int(it - expected_members.begin());
  if (child->size() != m || child->rank() != expected_rank || child->group_name() != name) {
    return InternalError(
        fmt::format("{}: parent rank {} got rank {} of {} in group '{}', "
                    "expected rank {} of {} in '{}'",
                    what, comm.rank(), child->rank(), child->size(), child->group_name(),
                    expected_rank, m, name));
  }
  const float me = float(comm.rank());
  Buffer members(size_t(m), DType::kF32);
  ZS_RETURN_IF_ERROR(
      Named(child->AllGather(&me, members.data(), 1, DType::kF32), what + ": all_gather"));
  for (int i = 0; i < m; ++i) {
    if (members.Get(i) != float(expected_members[i])) {
      return InternalError(fmt::format("{}: child rank {} is parent rank {}, expected {}", what, i,
                                       members.Get(i), expected_members[i]));
    }
  }
  ZS_RETURN_IF_ERROR(Named(CheckAllReduce(*child, 1001, DType::kBF16, ReduceOp::kSum, 41), what));
  ZS_RETURN_IF_ERROR(Named(CheckReduceScatter(*child, 7, DType::kF32, ReduceOp::kAvg, 42), what));
  ZS_RETURN_IF_ERROR(Named(CheckBroadcast(*child, 5, DType::kF16, m - 1, 43), what));
  ZS_RETURN_IF_ERROR(Named(CheckAllToAll(*child, 9, DType::kBF16, 44), what));
  ZS_RETURN_IF_ERROR(Named(CheckAllToAllv(*child, 3, DType::kF32, 45), what));
  return Named(child->Barrier(), what + ": barrier");
}

}  // namespace

Status CheckSplit(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  std::vector<int> members;
  for (int k = r % 2; k < n; k += 2) members.push_back(k);
  ZS_RETURN_IF_ERROR(CheckOneSplit(comm, "even_odd", r % 2, r, members));

  members.clear();
  for (int k = n - 1; k >= 0; --k) members.push_back(k);
  ZS_RETURN_IF_ERROR(CheckOneSplit(comm, "reversed", 7, -r, members));

  // A grid with rows of two: rows are {0,1}, {2,3}, ...; columns {0,2,..}, {1,3,..}.
  members.clear();
  for (int k = r / 2 * 2; k < std::min(n, r / 2 * 2 + 2); ++k) members.push_back(k);
  ZS_RETURN_IF_ERROR(CheckOneSplit(comm, "grid_row", r / 2, r % 2, members));
  members.clear();
  for (int k = r % 2; k < n; k += 2) members.push_back(k);
  ZS_RETURN_IF_ERROR(CheckOneSplit(comm, "grid_column", r % 2, r / 2, members));

  members.clear();
  for (int k = 1; k < n; ++k) members.push_back(k);
  return CheckOneSplit(comm, "without_rank0", r == 0 ? -1 : 3, 0, members);
}

namespace {

// The late-matched messages: f32 counts past the shm provider's inject size (4 KiB), and past
// one fabric segment (1 MiB), so that one-message and segmented sends are both covered.
constexpr size_t kLateCounts[] = {4096, (size_t{1} << 18) + 3};  // 16 KiB, 1 MiB + 12 B

// Starts one send of each kLateCounts size to `peer` (inputs of this rank, seed + i); the
// buffers go to *data, which must outlive the handles.
std::vector<CommHandle> StartLateSends(Communicator& comm, int peer, uint32_t seed,
                                       std::vector<Buffer>* data) {
  std::vector<CommHandle> handles;
  data->reserve(std::size(kLateCounts));
  for (size_t i = 0; i < std::size(kLateCounts); ++i) {
    data->push_back(Inputs(comm.rank(), kLateCounts[i], DType::kF32, seed + uint32_t(i)));
    handles.push_back(comm.StartSend(data->back().data(), kLateCounts[i], DType::kF32, peer));
  }
  return handles;
}

// Receives what StartLateSends(comm, this rank, seed) on `peer` sent, and compares.
Status ReceiveLateSends(Communicator& comm, int peer, uint32_t seed, const std::string& what) {
  for (size_t i = 0; i < std::size(kLateCounts); ++i) {
    Buffer got(kLateCounts[i], DType::kF32);
    const std::string name =
        fmt::format("{}: {} from rank {}", what, Name("recv", kLateCounts[i], DType::kF32), peer);
    ZS_RETURN_IF_ERROR(Named(comm.Recv(got.data(), kLateCounts[i], DType::kF32, peer), name));
    ZS_RETURN_IF_ERROR(
        Compare(comm, name, got, 0, Inputs(peer, kLateCounts[i], DType::kF32, seed + uint32_t(i))));
  }
  return OkStatus();
}

// Every kind of operation, at the size that hung in train_gpt (8192 f32: 16 KiB blocks) and
// past one segment; large sends and receives both ways.
Status BusyTraffic(Communicator& comm, uint32_t seed) {
  for (size_t count : {size_t{8192}, size_t{300'001}}) {
    ZS_RETURN_IF_ERROR(CheckAllReduce(comm, count, DType::kF32, ReduceOp::kSum, seed++));
    ZS_RETURN_IF_ERROR(CheckAllGather(comm, count, DType::kBF16, seed++));
    ZS_RETURN_IF_ERROR(CheckReduceScatter(comm, count, DType::kF32, ReduceOp::kMax, seed++));
    ZS_RETURN_IF_ERROR(CheckBroadcast(comm, count, DType::kF16, comm.size() - 1, seed++));
    ZS_RETURN_IF_ERROR(CheckAllToAll(comm, count, DType::kF32, seed++));
    ZS_RETURN_IF_ERROR(CheckSendRecvRing(comm, count, DType::kF32, seed++));
  }
  return OkStatus();
}

Status FirstError(std::initializer_list<Status> statuses) {
  for (const Status& s : statuses) {
    if (!s.ok()) return s;
  }
  return OkStatus();
}

}  // namespace

Status CheckLateReceives(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  if (n < 3) return OkStatus();
  // "late.a" holds every rank, "late.pair" ranks 0 and 1 only.
  StatusOr<std::unique_ptr<Communicator>> split_a = comm.Split(0, r, "late.a");
  ZS_RETURN_IF_ERROR(Named(split_a.status(), "late receives: split 'late.a'"));
  StatusOr<std::unique_ptr<Communicator>> split_pair = comm.Split(r < 2 ? 0 : -1, r, "late.pair");
  ZS_RETURN_IF_ERROR(Named(split_pair.status(), "late receives: split 'late.pair'"));
  Communicator& a = **split_a;

  // 1. Rank 0's sends to rank 2 on 'late.a' wait while ranks 0 and 1 run everything on
  //    'late.pair'; rank 2 receives after a barrier that ranks 0 and 1 reach only afterwards.
  {
    const std::string what = "late receives across communicators";
    std::vector<Buffer> data;
    std::vector<CommHandle> sends;
    if (r == 0) sends = StartLateSends(a, 2, 7000, &data);
    Status busy = r < 2 ? Named(BusyTraffic(**split_pair, 7100), what) : OkStatus();
    Status barrier = Named(comm.Barrier(), what + ": barrier");
    Status received = r == 2 && barrier.ok() ? ReceiveLateSends(a, 0, 7000, what) : OkStatus();
    Status sent = Named(WaitAll(sends), what + ": rank 0's sends to rank 2");
    ZS_RETURN_IF_ERROR(FirstError({busy, barrier, received, sent}));
  }
  // 2. The same communicator: rank 0's sends to rank 2 wait while it sends to rank 1.
  {
    const std::string what = "late receives on one communicator, another peer";
    std::vector<Buffer> data, data_to_1;
    std::vector<CommHandle> sends;
    Status other;
    if (r == 0) {
      sends = StartLateSends(a, 2, 7200, &data);
      std::vector<CommHandle> to_1 = StartLateSends(a, 1, 7300, &data_to_1);
      other = Named(WaitAll(to_1), what + ": sends to rank 1");
    } else if (r == 1) {
      other = ReceiveLateSends(a, 0, 7300, what);
    }
    Status barrier = Named(comm.Barrier(), what + ": barrier");
    Status received = r == 2 && barrier.ok() ? ReceiveLateSends(a, 0, 7200, what) : OkStatus();
    Status sent = Named(WaitAll(sends), what + ": rank 0's sends to rank 2");
    ZS_RETURN_IF_ERROR(FirstError({other, barrier, received, sent}));
  }
  // 3. The same communicator: rank 0's sends to rank 2 wait while every rank runs collectives
  //    on it (point-to-point operations do not queue behind collectives, nor these behind them).
  {
    const std::string what = "late receives behind collectives of the same communicator";
    std::vector<Buffer> data;
    std::vector<CommHandle> sends;
    if (r == 0) sends = StartLateSends(a, 2, 7400, &data);
    Status busy = Named(CheckAllReduce(a, 300'001, DType::kF32, ReduceOp::kSum, 7500), what);
    if (busy.ok()) busy = Named(CheckAllGather(a, 8192, DType::kF32, 7501), what);
    Status received = r == 2 && busy.ok() ? ReceiveLateSends(a, 0, 7400, what) : OkStatus();
    Status sent = Named(WaitAll(sends), what + ": rank 0's sends to rank 2");
    ZS_RETURN_IF_ERROR(FirstError({busy, received, sent}));
  }
  return Named(comm.Barrier(), "late receives: final barrier");
}

namespace {

// InvalidArgument whose message contains every one of `parts`.
Status ExpectInvalidNaming(const Communicator& comm, CommHandle handle, const std::string& what,
                           std::initializer_list<std::string> parts) {
  Status s = handle.Wait();
  bool named = s.code() == StatusCode::kInvalidArgument;
  for (const std::string& part : parts) {
    named = named && s.message().find(part) != std::string::npos;
  }
  if (named) return OkStatus();
  return InternalError(
      fmt::format("{} on {} rank {}: expected INVALID_ARGUMENT naming '{}', got {}", what,
                  comm.backend_name(), comm.rank(), fmt::join(parts, "', '"), s.ToString()));
}

Status CheckAllToAllArgumentErrors(Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  const DType f32 = DType::kF32;
  std::vector<float> a(8 * size_t(n), 1.0f), b(8 * size_t(n), 1.0f);
  std::vector<size_t> counts(n, 2), offsets(n);
  for (int p = 0; p < n; ++p) offsets[p] = size_t(p) * 2;
  std::vector<size_t> short_counts(n + 1, 2);
  ZS_RETURN_IF_ERROR(ExpectInvalidNaming(
      comm, comm.StartAllToAllv(a.data(), short_counts, offsets, b.data(), counts, offsets, f32),
      "all_to_all_v send_counts of size n+1",
      {"send_counts has " + std::to_string(n + 1) + " entries", std::to_string(n)}));
  ZS_RETURN_IF_ERROR(
      ExpectInvalidNaming(comm,
                          comm.StartAllToAllv(a.data(), counts, offsets, b.data(), counts,
                                              std::span<const size_t>(offsets).first(n - 1), f32),
                          "all_to_all_v recv_offsets of size n-1",
                          {"recv_offsets has " + std::to_string(n - 1) + " entries"}));
  std::vector<size_t> huge = offsets;
  huge[n - 1] = SIZE_MAX - 1;
  ZS_RETURN_IF_ERROR(ExpectInvalidNaming(
      comm, comm.StartAllToAllv(a.data(), counts, offsets, b.data(), counts, huge, f32),
      "all_to_all_v overflowing recv offset",
      {fmt::format("recv_offsets[{}] = {}", n - 1, SIZE_MAX - 1), "overflow"}));
  ZS_RETURN_IF_ERROR(ExpectInvalidNaming(comm, comm.StartAllToAll(a.data(), a.data() + 1, 2, f32),
                                         "all_to_all overlapping", {"send and recv overlap"}));
  ZS_RETURN_IF_ERROR(ExpectInvalidNaming(comm, comm.StartAllToAll(nullptr, b.data(), 2, f32),
                                         "all_to_all null send",
                                         {"send buffer is null", std::to_string(2 * n)}));
  ZS_RETURN_IF_ERROR(ExpectInvalidNaming(comm, comm.StartAllToAll(a.data(), nullptr, 1, f32),
                                         "all_to_all null recv", {"recv buffer is null"}));
  if (n >= 2) {
    std::vector<size_t> same(n, 0);  // every recv block at element 0
    ZS_RETURN_IF_ERROR(ExpectInvalidNaming(
        comm, comm.StartAllToAllv(a.data(), counts, offsets, b.data(), counts, same, f32),
        "all_to_all_v overlapping recv blocks", {"recv ranges from rank", "overlap"}));
  }
  std::vector<size_t> own = counts;
  own[r] = 3;  // sends itself 3, expects 2
  ZS_RETURN_IF_ERROR(ExpectInvalidNaming(
      comm, comm.StartAllToAllv(a.data(), own, offsets, b.data(), counts, offsets, f32),
      "all_to_all_v own counts differ",
      {fmt::format("rank {} sends 3 elements to rank {}, which expects 2", r, r)}));
  // Zero counts everywhere with null buffers are valid (not an argument error).
  std::vector<size_t> zeros(n, 0);
  return Named(comm.AllToAllv(nullptr, zeros, zeros, nullptr, zeros, zeros, f32),
               "all_to_all_v of nothing with null buffers");
}

}  // namespace

Status CheckArgumentErrors(Communicator& comm) {
  const int n = comm.size();
  std::vector<float> buffer(4 * size_t(n), 1.0f), other(4 * size_t(n), 1.0f);
  void* b = buffer.data();
  void* o = other.data();
  const DType f32 = DType::kF32;
  ZS_RETURN_IF_ERROR(ExpectInvalid(comm, comm.StartBroadcast(b, 4, f32, n), "broadcast root=n"));
  ZS_RETURN_IF_ERROR(ExpectInvalid(comm, comm.StartBroadcast(b, 4, f32, -1), "broadcast root=-1"));
  ZS_RETURN_IF_ERROR(ExpectInvalid(comm, comm.StartSend(b, 4, f32, n), "send to rank n"));
  ZS_RETURN_IF_ERROR(ExpectInvalid(comm, comm.StartSend(b, 4, f32, -1), "send to rank -1"));
  ZS_RETURN_IF_ERROR(ExpectInvalid(comm, comm.StartRecv(b, 4, f32, n), "recv from rank n"));
  ZS_RETURN_IF_ERROR(ExpectInvalid(comm, comm.StartRecv(b, 4, f32, -7), "recv from rank -7"));
  const int peer = (comm.rank() + 1) % n;
  ZS_RETURN_IF_ERROR(ExpectInvalid(comm, comm.StartSend(nullptr, 4, f32, peer), "send null"));
  ZS_RETURN_IF_ERROR(ExpectInvalid(comm, comm.StartRecv(nullptr, 4, f32, peer), "recv null"));
  ZS_RETURN_IF_ERROR(ExpectInvalid(comm, comm.StartAllReduce(nullptr, o, 4, f32, ReduceOp::kSum),
                                   "all_reduce null send"));
  ZS_RETURN_IF_ERROR(ExpectInvalid(comm, comm.StartAllReduce(b, nullptr, 4, f32, ReduceOp::kMax),
                                   "all_reduce null recv"));
  ZS_RETURN_IF_ERROR(
      ExpectInvalid(comm, comm.StartAllGather(nullptr, o, 4, f32), "all_gather null send"));
  ZS_RETURN_IF_ERROR(
      ExpectInvalid(comm, comm.StartAllGather(b, nullptr, 4, f32), "all_gather null recv"));
  ZS_RETURN_IF_ERROR(ExpectInvalid(
      comm, comm.StartReduceScatter(nullptr, o, 4, f32, ReduceOp::kAvg), "reduce_scatter null"));
  ZS_RETURN_IF_ERROR(ExpectInvalid(
      comm, comm.StartReduceScatter(b, nullptr, 4, f32, ReduceOp::kSum), "reduce_scatter null"));
  ZS_RETURN_IF_ERROR(
      ExpectInvalid(comm, comm.StartBroadcast(nullptr, 4, f32, 0), "broadcast null"));
  return CheckAllToAllArgumentErrors(comm);
}

Status RunAllCommChecks(Communicator& comm) {
  const int n = comm.size();
  uint32_t seed = 1;
  for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1001}}) {
    for (DType dtype : kDTypes) {
      ZS_RETURN_IF_ERROR(CheckAllGather(comm, count, dtype, seed++));
      ZS_RETURN_IF_ERROR(CheckAllGather(comm, count, dtype, seed++, /*in_place=*/true));
      for (ReduceOp op : kOps) {
        for (bool in_place : {false, true}) {
          ZS_RETURN_IF_ERROR(CheckAllReduce(comm, count, dtype, op, seed++, in_place));
          ZS_RETURN_IF_ERROR(CheckReduceScatter(comm, count, dtype, op, seed++, in_place));
        }
      }
    }
    for (int root = 0; root < n; ++root) {
      ZS_RETURN_IF_ERROR(CheckBroadcast(comm, count, kDTypes[root % 3], root, seed++));
    }
    ZS_RETURN_IF_ERROR(CheckSendRecvRing(comm, count, kDTypes[count % 3], seed++));
    for (DType dtype : kDTypes) {
      ZS_RETURN_IF_ERROR(CheckAllToAll(comm, count, dtype, seed++));
      ZS_RETURN_IF_ERROR(CheckAllToAllv(comm, count, dtype, seed++));
    }
  }
  constexpr size_t kLarge = 65537;
  ZS_RETURN_IF_ERROR(CheckAllReduce(comm, kLarge, DType::kF32, ReduceOp::kSum, seed++));
  ZS_RETURN_IF_ERROR(CheckAllReduce(comm, kLarge, DType::kBF16, ReduceOp::kAvg, seed++, true));
  ZS_RETURN_IF_ERROR(CheckReduceScatter(comm, kLarge, DType::kF16, ReduceOp::kMax, seed++));
  ZS_RETURN_IF_ERROR(CheckAllGather(comm, kLarge, DType::kBF16, seed++));
  ZS_RETURN_IF_ERROR(CheckBroadcast(comm, kLarge, DType::kF32, n - 1, seed++));
  ZS_RETURN_IF_ERROR(CheckSendRecvRing(comm, kLarge, DType::kF32, seed++));
  ZS_RETURN_IF_ERROR(
      CheckReduceScatterAllGatherEqualsAllReduce(comm, 1001, DType::kF32, ReduceOp::kSum, seed++));
  ZS_RETURN_IF_ERROR(
      CheckReduceScatterAllGatherEqualsAllReduce(comm, 4099, DType::kBF16, ReduceOp::kAvg, seed++));
  ZS_RETURN_IF_ERROR(
      CheckReduceScatterAllGatherEqualsAllReduce(comm, 333, DType::kF16, ReduceOp::kMax, seed++));
  ZS_RETURN_IF_ERROR(CheckBarrier(comm));
  ZS_RETURN_IF_ERROR(CheckManyInFlight(comm, 1001, seed));
  seed += 16;
  ZS_RETURN_IF_ERROR(CheckSplit(comm));
  return CheckArgumentErrors(comm);
}

}  // namespace zs::testing
