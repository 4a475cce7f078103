#include "offload/block_checksum.h"

#include <bit>
#include <cstring>

#include "runtime/base/splitmix64.h"

namespace zs {
namespace {

constexpr uint64_t kMultiplier = 0x9fb21c651e98df25ull;  // odd: multiplying is a bijection

inline uint64_t Load(const unsigned char* p) {
  uint64_t w;
  std::memcpy(&w, p, sizeof(w));  // no aliasing or alignment assumptions
  return w;
}

// Word i feeds lane i % kLanes: eight independent multiply chains keep the multiplier busy
// (one chain waits ~5 cycles per word; eight lanes run at ~10-15 GB/s on data in cache, where a
// piece just read by the disk sits, and at DRAM speed beyond).
constexpr int kLanes = 8;

// One lane step. Each part is a bijection of the lane for a fixed word, so two inputs that
// differ in one word always leave the lane different. The rotation carries the high bits the
// multiplication produced back down; without it, flipping bit 63 of two words of one lane (two
// sign bits) would cancel out, since multiplying moves differences only upwards.
inline uint64_t Step(uint64_t lane, uint64_t word) {
  return std::rotl((lane ^ word) * kMultiplier, 32);
}

}  // namespace

uint64_t PageChecksum(const void* page, uint64_t file_offset) {
  const auto* p = static_cast<const unsigned char*>(page);
  // Seeding by offset makes the checksum depend on where the page lives.
  const uint64_t seed = SplitMix64(file_offset);
  uint64_t lane[kLanes];
  for (int l = 0; l < kLanes; ++l) lane[l] = seed ^ static_cast<uint64_t>(l);
  for (int64_t i = 0; i < kChecksumPageBytes; i += 8 * kLanes) {
    for (int l = 0; l < kLanes; ++l) lane[l] = Step(lane[l], Load(p + i + 8 * l));
  }
  // SplitMix64 and rotations are bijections, so a difference in one lane survives the xor.
  uint64_t h = 0;
  for (int l = 0; l < kLanes; ++l) h ^= std::rotl(SplitMix64(lane[l]), 8 * l);
  return h;
}

}  // namespace zs
