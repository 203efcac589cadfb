// A processor group: the ordered devices that take part in one collective.
#pragma once

#include <algorithm>
#include <string>
#include <vector>

namespace typemesh {

struct group {
  std::vector<int> devices;  // global device ids, in member order
  std::string label;         // what the group is, for messages

  int size() const { return static_cast<int>(devices.size()); }

  // Member index of a device, or -1 when the device is not a member.
  int index_of(int device) const {
    auto it = std::find(devices.begin(), devices.end(), device);
    return it == devices.end() ? -1 : static_cast<int>(it - devices.begin());
  }

  friend bool operator==(const group& a, const group& b) { return a.devices == b.devices; }
};

}  // namespace typemesh
