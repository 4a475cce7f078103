// PageChecksum: the 64-bit checksum NvmeStore keeps for every 4096-byte page it writes.
//
// Contract
// - A pure function of the page's bytes and its byte offset in the file: the same data written
//   at another offset gets another checksum, so a page that lands in the wrong place (or a stale
//   page of another offset) is caught like a corrupted one.
// - Any change confined to one 64-bit word of a page always changes the checksum (every step
//   is a bijection of the lane that word feeds); other changes are missed with probability
//   about 2^-64. It is an integrity check against bit rot, torn and misplaced writes and
//   truncation, not a cryptographic hash.
// - Runs at memory speed: eight independent multiply-rotate lanes over uint64 words keep the
//   multiplier busy (a bytewise hash would cap a read stream at ~1 GB/s). bench_offload's
//   BM_PageChecksum measures it in cache and from DRAM.
// - Thread-safe (no state). Blocks nothing.
#pragma once

#include <cstdint>

namespace zs {

inline constexpr int64_t kChecksumPageBytes = 4096;

// The checksum of the kChecksumPageBytes bytes at `page` (any alignment), stored at byte
// `file_offset` of its file.
uint64_t PageChecksum(const void* page, uint64_t file_offset);

}  // namespace zs
