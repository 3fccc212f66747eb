// The head's endpoints as workers and node daemons know them: one, or a
// comma-separated list ("tcp://head-a:5555,tcp://head-b:5555") tried in turn,
// so a head restarted on another host or port is found again
// (docs/reliability.md, "Head restart"). Thread rule: plain data; one thread.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "groupsgd/common/status.h"

namespace groupsgd::client {

class EndpointList {
 public:
  // Splits on commas and trims blanks; refuses an empty list, an empty entry
  // and an entry without a transport ("tcp://", "ipc://", ...).
  static Result<EndpointList> parse(const std::string& text);
  const std::string& current() const { return endpoints_[at_]; }
  // Moves on to the next endpoint (wrapping around); returns the new current
  // one.
  const std::string& advance();
  std::size_t size() const { return endpoints_.size(); }
  const std::vector<std::string>& all() const { return endpoints_; }

 private:
  explicit EndpointList(std::vector<std::string> endpoints) : endpoints_(std::move(endpoints)) {}
  std::vector<std::string> endpoints_;
  std::size_t at_ = 0;
};

}  // namespace groupsgd::client
