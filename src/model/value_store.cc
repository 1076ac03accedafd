// The value store: entries with live/stash marks, a size-keyed buffer pool, byte accounting.
#include "model/value_store.h"

#include <algorithm>

#include "util/error.h"

namespace hp {

template <typename T>
T* ValueStoreT<T>::create(Value v, int mb, int64_t elems) {
  HP_CHECK(elems > 0, "ValueStore: {} of micro-batch {} must have a positive size, got {}", v.str(),
           mb, elems);
  Key key{v, mb};
  HP_CHECK(!entries_.count(key), "ValueStore: {} of micro-batch {} already exists (a part produced "
           "it twice, or it was never consumed)", v.str(), mb);
  Entry e;
  auto it = pool_.find(elems);
  if (it != pool_.end()) {
    e.buf = std::move(it->second);
    pool_.erase(it);
  } else {
    e.buf.reset(new T[static_cast<size_t>(elems)]);
    pool_bytes_ += elems * static_cast<int64_t>(sizeof(T));
    ++allocations_;
  }
  e.elems = elems;
  e.live = true;
  T* p = e.buf.get();
  entries_.emplace(key, std::move(e));
  bytes_ += elems * static_cast<int64_t>(sizeof(T));
  update_peaks();
  return p;
}

template <typename T>
T* ValueStoreT<T>::find(Value v, int mb) const {
  auto it = entries_.find(Key{v, mb});
  return it == entries_.end() ? nullptr : it->second.buf.get();
}

template <typename T>
typename ValueStoreT<T>::Entry& ValueStoreT<T>::entry(Value v, int mb) {
  auto it = entries_.find(Key{v, mb});
  HP_CHECK(it != entries_.end(), "ValueStore: {} of micro-batch {} is not here (the store holds: {})",
           v.str(), mb, describe());
  return it->second;
}

template <typename T>
T* ValueStoreT<T>::get(Value v, int mb) const {
  T* p = find(v, mb);
  HP_CHECK(p, "ValueStore: {} of micro-batch {} is not here; was it received or produced by the "
           "previous op? (the store holds: {})", v.str(), mb, describe());
  return p;
}

template <typename T>
int64_t ValueStoreT<T>::elems(Value v, int mb) const {
  auto it = entries_.find(Key{v, mb});
  HP_CHECK(it != entries_.end(), "ValueStore: {} of micro-batch {} is not here", v.str(), mb);
  return it->second.elems;
}

template <typename T>
void ValueStoreT<T>::keep(Value v, int mb) {
  Entry& e = entry(v, mb);
  if (e.stash++ == 0) {
    stash_bytes_ += e.elems * static_cast<int64_t>(sizeof(T));
    update_peaks();
  }
}

template <typename T>
void ValueStoreT<T>::unkeep(Value v, int mb) {
  auto it = entries_.find(Key{v, mb});
  HP_CHECK(it != entries_.end(), "ValueStore: cannot unstash {} of micro-batch {}: not here", v.str(),
           mb);
  Entry& e = it->second;
  HP_CHECK(e.stash > 0, "ValueStore: cannot unstash {} of micro-batch {}: it is not stashed", v.str(),
           mb);
  if (--e.stash == 0) {
    stash_bytes_ -= e.elems * static_cast<int64_t>(sizeof(T));
    if (!e.live) free_entry(it);
  }
}

template <typename T>
void ValueStoreT<T>::release(Value v, int mb) {
  auto it = entries_.find(Key{v, mb});
  HP_CHECK(it != entries_.end(), "ValueStore: cannot release {} of micro-batch {}: not here",
           v.str(), mb);
  it->second.live = false;
  if (it->second.stash == 0) free_entry(it);
}

template <typename T>
void ValueStoreT<T>::erase(Value v, int mb) {
  auto it = entries_.find(Key{v, mb});
  if (it == entries_.end()) return;
  if (it->second.stash > 0) stash_bytes_ -= it->second.elems * static_cast<int64_t>(sizeof(T));
  free_entry(it);
}

template <typename T>
bool ValueStoreT<T>::is_live(Value v, int mb) const {
  auto it = entries_.find(Key{v, mb});
  return it != entries_.end() && it->second.live;
}

template <typename T>
bool ValueStoreT<T>::is_stashed(Value v, int mb) const {
  auto it = entries_.find(Key{v, mb});
  return it != entries_.end() && it->second.stash > 0;
}

template <typename T>
void ValueStoreT<T>::free_entry(typename std::map<Key, Entry>::iterator it) {
  bytes_ -= it->second.elems * static_cast<int64_t>(sizeof(T));
  pool_.emplace(it->second.elems, std::move(it->second.buf));
  entries_.erase(it);
}

template <typename T>
void ValueStoreT<T>::update_peaks() {
  peak_bytes_ = std::max(peak_bytes_, bytes_);
  if (!defer_stash_peak_) peak_stash_bytes_ = std::max(peak_stash_bytes_, stash_bytes_);
}

template <typename T>
void ValueStoreT<T>::defer_stash_peak(bool on) {
  defer_stash_peak_ = on;
  update_peaks();
}

template <typename T>
void ValueStoreT<T>::reset_peaks() {
  peak_bytes_ = bytes_;
  peak_stash_bytes_ = stash_bytes_;
}

template <typename T>
std::vector<std::pair<Value, int>> ValueStoreT<T>::keys() const {
  std::vector<std::pair<Value, int>> out;
  for (const auto& [k, e] : entries_) out.push_back(k);
  return out;
}

template <typename T>
std::string ValueStoreT<T>::describe() const {
  if (entries_.empty()) return "nothing";
  std::string s;
  for (const auto& [k, e] : entries_) {
    if (!s.empty()) s += ' ';
    s += k.first.str() + "@" + std::to_string(k.second);
    s += e.live ? (e.stash > 0 ? " (live, stash)" : " (live)") : " (stash)";
  }
  return s;
}

template <typename T>
void ValueStoreT<T>::clear() {
  while (!entries_.empty()) erase(entries_.begin()->first.first, entries_.begin()->first.second);
}

template class ValueStoreT<float>;
template class ValueStoreT<double>;

}  // namespace hp
