#include "groupsgd/common/allow_list.h"

#include <algorithm>
#include <iterator>

namespace groupsgd {

bool AllowList::contains(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_.count(key) != 0;
}

std::size_t AllowList::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_.size();
}

AllowListChange AllowList::replace(std::set<std::string> keys) {
  AllowListChange c;
  std::lock_guard<std::mutex> lock(mu_);
  std::set<std::string> gone, fresh;
  std::set_difference(keys_.begin(), keys_.end(), keys.begin(), keys.end(),
                      std::inserter(gone, gone.end()));
  std::set_difference(keys.begin(), keys.end(), keys_.begin(), keys_.end(),
                      std::inserter(fresh, fresh.end()));
  c.removed = gone.size();
  c.added = fresh.size();
  keys_ = std::move(keys);
  c.size = keys_.size();
  return c;
}

Status checkPeerAllowed(const std::shared_ptr<const AllowList>& list, const std::string& key) {
  if (key.empty() || list == nullptr || list->contains(key)) return Status::ok();
  return permissionDenied("key " + key + " is no longer in the allow-list");
}

}  // namespace groupsgd
