// The CURVE allow-list a process admits, shared by its ZAP handler (new connections) and
// its servers (every message of an open connection), and replaceable while they run: an
// operator who removes a key expects that key's open connections to stop working too,
// not only its next handshake.
// Thread rule: any thread (one mutex; lookups are one set search).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "groupsgd/common/status.h"

namespace groupsgd {

struct AllowListChange {
  std::size_t added = 0;
  std::size_t removed = 0;
  std::size_t size = 0;  // keys admitted after the change
};

class AllowList {
 public:
  explicit AllowList(std::set<std::string> keys) : keys_(std::move(keys)) {}

  bool contains(const std::string& key) const;
  std::size_t size() const;
  // Replaces every key at once (a reader never sees half a list).
  AllowListChange replace(std::set<std::string> keys);

 private:
  mutable std::mutex mu_;
  std::set<std::string> keys_;
};

// What a server checks on each message: "" (plain TCP, inproc) and processes without an
// allow-list pass; a key that was removed since its connection was admitted gets the
// refusal (permission_denied: the client is told, and counted).
Status checkPeerAllowed(const std::shared_ptr<const AllowList>& list, const std::string& key);

}  // namespace groupsgd
