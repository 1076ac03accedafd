// The value store: entries with live/stash marks over backend Buffers, byte accounting.
#include "model/value_store.h"

#include <algorithm>

#include "util/error.h"

namespace hp {

DType value_dtype(ValueKind kind, const Precision& p) {
  switch (kind) {
    case ValueKind::kRstd1:
    case ValueKind::kRstd2:
    case ValueKind::kRstdF:
    case ValueKind::kLse:
    case ValueKind::kLseCE: return p.stats();
    case ValueKind::kdW: return p.master;
    default: return p.compute;
  }
}

ElemBytes elem_bytes(const Precision& p) {
  return {static_cast<int>(dtype_bytes(p.compute)), static_cast<int>(dtype_bytes(p.master)),
          static_cast<int>(dtype_bytes(p.stats()))};
}

DataPtr ValueStore::create(Value v, int mb, int64_t elems) {
  HP_CHECK(elems > 0, "ValueStore: {} of micro-batch {} must have a positive size, got {}", v.str(),
           mb, elems);
  Key key{v, mb};
  HP_CHECK(!entries_.count(key), "ValueStore: {} of micro-batch {} already exists (a part produced "
           "it twice, or it was never consumed)", v.str(), mb);
  Entry e;
  e.buf = Buffer(*be_, value_dtype(v.kind, prec_), elems);
  e.live = true;
  const DataPtr p = e.buf.ptr();
  bytes_ += e.buf.bytes();
  entries_.emplace(key, std::move(e));
  update_peaks();
  return p;
}

DataPtr ValueStore::find(Value v, int mb) const {
  auto it = entries_.find(Key{v, mb});
  return it == entries_.end() ? DataPtr() : it->second.buf.ptr();
}

ValueStore::Entry& ValueStore::entry(Value v, int mb) {
  auto it = entries_.find(Key{v, mb});
  HP_CHECK(it != entries_.end(), "ValueStore: {} of micro-batch {} is not here (the store holds: {})",
           v.str(), mb, describe());
  return it->second;
}

DataPtr ValueStore::get(Value v, int mb) const {
  DataPtr p = find(v, mb);
  HP_CHECK(p, "ValueStore: {} of micro-batch {} is not here; was it received or produced by the "
           "previous op? (the store holds: {})", v.str(), mb, describe());
  return p;
}

int64_t ValueStore::elems(Value v, int mb) const {
  auto it = entries_.find(Key{v, mb});
  HP_CHECK(it != entries_.end(), "ValueStore: {} of micro-batch {} is not here", v.str(), mb);
  return it->second.buf.elems();
}

void ValueStore::keep(Value v, int mb) {
  Entry& e = entry(v, mb);
  if (e.stash++ == 0) {
    stash_bytes_ += e.buf.bytes();
    update_peaks();
  }
}

void ValueStore::unkeep(Value v, int mb) {
  auto it = entries_.find(Key{v, mb});
  HP_CHECK(it != entries_.end(), "ValueStore: cannot unstash {} of micro-batch {}: not here", v.str(),
           mb);
  Entry& e = it->second;
  HP_CHECK(e.stash > 0, "ValueStore: cannot unstash {} of micro-batch {}: it is not stashed", v.str(),
           mb);
  if (--e.stash == 0) {
    stash_bytes_ -= e.buf.bytes();
    if (!e.live) free_entry(it);
  }
}

void ValueStore::release(Value v, int mb) {
  auto it = entries_.find(Key{v, mb});
  HP_CHECK(it != entries_.end(), "ValueStore: cannot release {} of micro-batch {}: not here",
           v.str(), mb);
  it->second.live = false;
  if (it->second.stash == 0) free_entry(it);
}

void ValueStore::erase(Value v, int mb) {
  auto it = entries_.find(Key{v, mb});
  if (it == entries_.end()) return;
  if (it->second.stash > 0) stash_bytes_ -= it->second.buf.bytes();
  free_entry(it);
}

bool ValueStore::is_live(Value v, int mb) const {
  auto it = entries_.find(Key{v, mb});
  return it != entries_.end() && it->second.live;
}

bool ValueStore::is_stashed(Value v, int mb) const {
  auto it = entries_.find(Key{v, mb});
  return it != entries_.end() && it->second.stash > 0;
}

void ValueStore::free_entry(std::map<Key, Entry>::iterator it) {
  bytes_ -= it->second.buf.bytes();
  entries_.erase(it);  // the Buffer goes back to the backend's cache
}

void ValueStore::update_peaks() {
  peak_bytes_ = std::max(peak_bytes_, bytes_);
  if (!defer_stash_peak_) peak_stash_bytes_ = std::max(peak_stash_bytes_, stash_bytes_);
}

void ValueStore::defer_stash_peak(bool on) {
  defer_stash_peak_ = on;
  update_peaks();
}

void ValueStore::reset_peaks() {
  peak_bytes_ = bytes_;
  peak_stash_bytes_ = stash_bytes_;
}

std::vector<std::pair<Value, int>> ValueStore::keys() const {
  std::vector<std::pair<Value, int>> out;
  for (const auto& [k, e] : entries_) out.push_back(k);
  return out;
}

std::string ValueStore::describe() const {
  if (entries_.empty()) return "nothing";
  std::string s;
  for (const auto& [k, e] : entries_) {
    if (!s.empty()) s += ' ';
    s += k.first.str() + "@" + std::to_string(k.second);
    s += e.live ? (e.stash > 0 ? " (live, stash)" : " (live)") : " (stash)";
  }
  return s;
}

void ValueStore::clear() {
  while (!entries_.empty()) erase(entries_.begin()->first.first, entries_.begin()->first.second);
}


}  // namespace hp
