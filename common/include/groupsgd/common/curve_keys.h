// CurveZMQ key material: Z85 key pairs in files, and the allow-list of client public keys.
// A secret key file must be private to its owner (no group/other permission bits), as
// ssh insists for identity files; a readable one is refused, never used.
// Thread rule: plain functions and values; any thread.
#pragma once

#include <memory>
#include <set>
#include <string>
#include <utility>

#include "groupsgd/common/allow_list.h"
#include "groupsgd/common/status.h"

namespace groupsgd {

inline constexpr std::size_t kZ85KeyChars = 40;  // a 32-byte CURVE key in Z85

struct CurveKeyPair {
  std::string public_key;  // Z85
  std::string secret_key;  // Z85
};

// The keys one process uses on its TCP links; all empty = plain (no CURVE).
struct CurveKeys {
  CurveKeys() = default;
  CurveKeys(std::string own_public, std::string own_secret, std::string server_public,
            std::shared_ptr<const AllowList> allow = nullptr)
      : public_key(std::move(own_public)),
        secret_key(std::move(own_secret)),
        server_public_key(std::move(server_public)),
        allowed(std::move(allow)) {}

  std::string public_key;         // own, Z85
  std::string secret_key;         // own, Z85
  std::string server_public_key;  // the daemons' key, for sockets that connect to them
  // Servers: the process's live allow-list (null: admitted once is admitted for good).
  std::shared_ptr<const AllowList> allowed;
  // Keys with a daemon's rights (configure a group PS, push deltas, read counters): besides
  // its own key, the head's (on a node) and the allow-listed node keys (on the head).
  // Null: its own key only.
  std::shared_ptr<const AllowList> daemons;
  bool enabled() const { return !secret_key.empty(); }
  bool hasDaemonRights(const std::string& key) const;
};

// True when text is a 40-character Z85 string that decodes to 32 bytes.
bool isZ85Key(const std::string& text);
Result<CurveKeyPair> generateKeyPair();

// PREFIX.key (the secret, mode 0600, created exclusively) and PREFIX.pub (the public key).
// Refuses to overwrite either.
Status writeKeyPair(const std::string& prefix, const CurveKeyPair& keys);
// Reads a secret key file; the public key is derived from the secret. Refused when the
// file is group- or world-accessible, or holds no valid key.
Result<CurveKeyPair> loadSecretKeyFile(const std::string& path);
// Reads a public key file (one Z85 key; '#' comment lines allowed).
Result<std::string> loadPublicKeyFile(const std::string& path);

// Allow-list: one key per line as its first word (a label may follow), blank lines and
// lines starting with '#' ignored. Any other line is an error naming its line number.
Result<std::set<std::string>> parseAllowList(const std::string& text);
Result<std::set<std::string>> loadAllowList(const std::string& path);
// The keys of node daemons in an allow-list: lines whose label is the word `node`
// ("KEY node ..."). They are admitted like the others and get a daemon's rights.
Result<std::set<std::string>> loadNodeKeys(const std::string& path);

}  // namespace groupsgd
