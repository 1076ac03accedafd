// (value, micro-batch) -> tensor buffer: the activations a stage holds between ops. Buffers come
// from a pool keyed by size, so a steady-state training step allocates nothing. Counts current and
// peak bytes, and separately the bytes of values marked as stash (what values.h predicts).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "schedule/values.h"

namespace hp {

// Every entry carries two marks; it is freed (its buffer back to the pool) when both are off:
//   live  - in flight: an op's output waiting to be consumed or sent, or a received input.
//   stash - kept from a forward for its backward (or from I for W), as values.h says. A count:
//           two parts of one stage may keep the same value (O:l by attn:l and post:l); it is
//           counted once in the bytes and freed when the last keeper lets go.
template <typename T>
class ValueStoreT {
 public:
  ValueStoreT() = default;
  ValueStoreT(const ValueStoreT&) = delete;
  ValueStoreT& operator=(const ValueStoreT&) = delete;

  // A new live entry of `elems` elements (contents undefined). Throws if (v, mb) already exists.
  T* create(Value v, int mb, int64_t elems);
  // The buffer of (v, mb); throws hp::Error naming it (and what the store holds) when absent.
  T* get(Value v, int mb) const;
  T* find(Value v, int mb) const;  // nullptr when absent
  bool contains(Value v, int mb) const { return find(v, mb) != nullptr; }
  int64_t elems(Value v, int mb) const;  // throws when absent

  void keep(Value v, int mb);     // stash count + 1 (throws when absent)
  void unkeep(Value v, int mb);   // stash count - 1; at 0 frees the entry unless live
  void release(Value v, int mb);  // live mark off; frees the entry unless stashed
  void erase(Value v, int mb);    // frees regardless of marks (no-op when absent)
  bool is_live(Value v, int mb) const;
  bool is_stashed(Value v, int mb) const;

  // Bytes (elements * sizeof(T)) of every entry / of entries with the stash mark.
  int64_t bytes() const { return bytes_; }
  int64_t peak_bytes() const { return peak_bytes_; }
  int64_t stash_bytes() const { return stash_bytes_; }
  int64_t peak_stash_bytes() const { return peak_stash_bytes_; }
  void reset_peaks();
  // While deferred, stash changes do not move peak_stash_bytes(); ending the deferral takes the
  // stash as it is then. The model defers around an op's stash bookkeeping so the peak is measured
  // between ops, as the validator's stash trace is (I adds W's stash and drops F's in one step).
  void defer_stash_peak(bool on);
  // Bytes held by the pool (in use + free buffers kept for reuse), and buffers ever allocated.
  int64_t pool_bytes() const { return pool_bytes_; }
  int64_t allocations() const { return allocations_; }

  size_t size() const { return entries_.size(); }
  std::vector<std::pair<Value, int>> keys() const;  // sorted, for leak checks and messages
  std::string describe() const;                      // "X:1@0 (live) A:1@0 (stash) ..."
  void clear();                                      // every entry back to the pool

 private:
  struct Entry {
    std::unique_ptr<T[]> buf;
    int64_t elems = 0;
    bool live = false;
    int stash = 0;
  };
  using Key = std::pair<Value, int>;
  Entry& entry(Value v, int mb);
  void free_entry(typename std::map<Key, Entry>::iterator it);
  void update_peaks();

  std::map<Key, Entry> entries_;
  std::multimap<int64_t, std::unique_ptr<T[]>> pool_;  // free buffers by element count
  int64_t bytes_ = 0, peak_bytes_ = 0, stash_bytes_ = 0, peak_stash_bytes_ = 0;
  int64_t pool_bytes_ = 0, allocations_ = 0;
  bool defer_stash_peak_ = false;
};

using ValueStore = ValueStoreT<float>;

}  // namespace hp
