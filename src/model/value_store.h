// (value, micro-batch) -> tensor buffer in backend memory: the activations a stage holds between
// ops. Each entry is a Buffer of its value's type under the store's Precision (value_dtype); the
// backend's caching allocator reuses freed buffers, so a steady-state training step allocates
// nothing. Counts current and peak bytes, and separately the bytes of values marked as stash (what
// values.h predicts).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"
#include "schedule/values.h"

namespace hp {

// The element type of a value under a precision: per-row statistics (rstd1, rstd2, rstdf, lse,
// lsece) in the stats type, a shipped W_qkv gradient (dW) in the master type (it is added to the
// gradient arena), everything else (activations, their gradients, the W copy) in the compute type.
DType value_dtype(ValueKind kind, const Precision& p);
// The same mapping as element bytes, for the validator's and the simulator's byte counts.
ElemBytes elem_bytes(const Precision& p);

// Every entry carries two marks; it is freed (its buffer back to the pool) when both are off:
//   live  - in flight: an op's output waiting to be consumed or sent, or a received input.
//   stash - kept from a forward for its backward (or from I for W), as values.h says. A count:
//           two parts of one stage may keep the same value (O:l by attn:l and post:l); it is
//           counted once in the bytes and freed when the last keeper lets go.
class ValueStore {
 public:
  explicit ValueStore(Backend& be, Precision prec = Precision::fp32()) : be_(&be), prec_(prec) {}
  ValueStore(const ValueStore&) = delete;
  ValueStore& operator=(const ValueStore&) = delete;

  Backend& backend() const { return *be_; }
  const Precision& precision() const { return prec_; }

  // A new live entry of `elems` elements of value_dtype(v.kind) (contents undefined). Throws if
  // (v, mb) already exists.
  DataPtr create(Value v, int mb, int64_t elems);
  // The buffer of (v, mb); throws hp::Error naming it (and what the store holds) when absent.
  DataPtr get(Value v, int mb) const;
  DataPtr find(Value v, int mb) const;  // a null pointer when absent
  bool contains(Value v, int mb) const { return static_cast<bool>(find(v, mb)); }
  int64_t elems(Value v, int mb) const;  // throws when absent

  void keep(Value v, int mb);     // stash count + 1 (throws when absent)
  void unkeep(Value v, int mb);   // stash count - 1; at 0 frees the entry unless live
  void release(Value v, int mb);  // live mark off; frees the entry unless stashed
  void erase(Value v, int mb);    // frees regardless of marks (no-op when absent)
  bool is_live(Value v, int mb) const;
  bool is_stashed(Value v, int mb) const;

  // Bytes (elements * bytes of their type) of every entry / of entries with the stash mark.
  int64_t bytes() const { return bytes_; }
  int64_t peak_bytes() const { return peak_bytes_; }
  int64_t stash_bytes() const { return stash_bytes_; }
  int64_t peak_stash_bytes() const { return peak_stash_bytes_; }
  void reset_peaks();
  // While deferred, stash changes do not move peak_stash_bytes(); ending the deferral takes the
  // stash as it is then. The model defers around an op's stash bookkeeping so the peak is measured
  // between ops, as the validator's stash trace is (I adds W's stash and drops F's in one step).
  void defer_stash_peak(bool on);

  size_t size() const { return entries_.size(); }
  std::vector<std::pair<Value, int>> keys() const;  // sorted, for leak checks and messages
  std::string describe() const;                      // "X:1@0 (live) A:1@0 (stash) ..."
  void clear();                                      // every entry back to the backend

 private:
  struct Entry {
    Buffer buf;
    bool live = false;
    int stash = 0;
  };
  using Key = std::pair<Value, int>;
  Entry& entry(Value v, int mb);
  void free_entry(std::map<Key, Entry>::iterator it);
  void update_peaks();

  Backend* be_;
  Precision prec_;
  std::map<Key, Entry> entries_;
  int64_t bytes_ = 0, peak_bytes_ = 0, stash_bytes_ = 0, peak_stash_bytes_ = 0;
  bool defer_stash_peak_ = false;
};

}  // namespace hp
