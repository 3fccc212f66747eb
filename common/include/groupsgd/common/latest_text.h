// One text that a thread publishes (each time replacing the last) and another reads when
// it is newer than what it saw: the primary coordinator's state for the standby link
// (docs/reliability.md, "Standby head"). Numbers start at 1; 0 is "nothing seen".
// Thread rule: any thread; a mutex guards the text (copied out, never borrowed).
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>

namespace groupsgd {

class LatestText {
 public:
  void publish(std::string text) {
    std::lock_guard<std::mutex> lock(mu_);
    text_ = std::move(text);
    ++number_;
  }
  // The text when its number is above *seen (then *seen becomes that number).
  std::optional<std::string> newerThan(std::uint64_t* seen) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (number_ <= *seen) return std::nullopt;
    *seen = number_;
    return text_;
  }

 private:
  mutable std::mutex mu_;
  std::string text_;
  std::uint64_t number_ = 0;
};

}  // namespace groupsgd
