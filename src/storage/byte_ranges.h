// ByteRanges: a set of disjoint half-open byte ranges [begin, end), kept
// merged. The node cache records with it which parts of a copy in progress
// are written (by the fill, or by readers that fetched them) and which are
// being fetched right now, so that no byte of a file is read twice from its
// source in one fill.
//
// Thread safety: none; the owner guards it (NodeCache: the slot's mutex).
#ifndef GPUFEED_STORAGE_BYTE_RANGES_H_
#define GPUFEED_STORAGE_BYTE_RANGES_H_

#include <cstdint>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

namespace gpufeed {

using ByteRange = std::pair<uint64_t, uint64_t>;  // [first, second)

class ByteRanges {
 public:
  // Adds [begin, end), merging it with the ranges it touches.
  void Add(uint64_t begin, uint64_t end) {
    if (begin >= end) return;
    auto it = ranges_.upper_bound(begin);
    if (it != ranges_.begin() && std::prev(it)->second >= begin) --it;
    while (it != ranges_.end() && it->first <= end) {
      if (it->first < begin) begin = it->first;
      if (it->second > end) end = it->second;
      it = ranges_.erase(it);
    }
    ranges_.emplace(begin, end);
  }

  // Removes [begin, end) (parts of ranges outside it stay).
  void Remove(uint64_t begin, uint64_t end) {
    if (begin >= end) return;
    std::vector<ByteRange> kept;
    auto it = ranges_.upper_bound(begin);
    if (it != ranges_.begin()) --it;
    while (it != ranges_.end() && it->first < end) {
      if (it->second <= begin) {
        ++it;
        continue;
      }
      if (it->first < begin) kept.emplace_back(it->first, begin);
      if (it->second > end) kept.emplace_back(end, it->second);
      it = ranges_.erase(it);
    }
    for (const ByteRange& range : kept) ranges_.emplace(range.first, range.second);
  }

  // Whether every byte of [begin, end) is in the set (true when empty).
  bool Covers(uint64_t begin, uint64_t end) const {
    if (begin >= end) return true;
    auto it = ranges_.upper_bound(begin);
    if (it == ranges_.begin()) return false;
    --it;
    return it->first <= begin && it->second >= end;
  }

  // Whether any byte of [begin, end) is in the set.
  bool Overlaps(uint64_t begin, uint64_t end) const {
    if (begin >= end) return false;
    auto it = ranges_.lower_bound(end);
    if (it == ranges_.begin()) return false;
    return std::prev(it)->second > begin;
  }

  // The parts of [begin, end) not in the set, in order.
  std::vector<ByteRange> Gaps(uint64_t begin, uint64_t end) const {
    std::vector<ByteRange> gaps;
    uint64_t at = begin;
    auto it = ranges_.upper_bound(begin);
    if (it != ranges_.begin()) --it;
    for (; it != ranges_.end() && it->first < end && at < end; ++it) {
      if (it->second <= at) continue;
      if (it->first > at) gaps.emplace_back(at, it->first);
      at = it->second;
    }
    if (at < end) gaps.emplace_back(at, end);
    return gaps;
  }

  // Bytes in the set.
  uint64_t bytes() const {
    uint64_t total = 0;
    for (const auto& range : ranges_) total += range.second - range.first;
    return total;
  }
  void Clear() { ranges_.clear(); }

 private:
  std::map<uint64_t, uint64_t> ranges_;  // begin -> end
};

}  // namespace gpufeed

#endif  // GPUFEED_STORAGE_BYTE_RANGES_H_
