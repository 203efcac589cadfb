// Values a conversion computes from its meshes and shape alone (its
// description, its transfer plan), kept per thread and reused: a training
// step converts the same tensors between the same meshes at every step, and
// formatting the description and making the plan took 3-5 us a call on each
// device, as long as its copies take in a 1 MiB conversion over 8 devices
// (docs/performance.md, "Watched waits").
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

namespace typemesh::detail {

// make(), computed once per thread for each key (compared with ==) and then
// returned again. Holds at most `capacity` keys: a program that keeps making
// new ones starts over, so the memory stays bounded. Declare one as a
// thread_local inside the function template that uses it.
template <class Key, class Value, std::size_t capacity = 32>
class per_thread_memo {
 public:
  template <class Make>
  const Value& get(const Key& key, Make make) {
    for (const auto& [k, v] : entries_)
      if (k == key) return v;
    if (entries_.size() == capacity) entries_.clear();
    entries_.emplace_back(key, make());
    return entries_.back().second;
  }

 private:
  std::vector<std::pair<Key, Value>> entries_;
};

}  // namespace typemesh::detail
