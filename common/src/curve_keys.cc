#include "groupsgd/common/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "groupsgd/common/atomic_file.h"

namespace groupsgd {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

Result<std::string> readSmallFile(const std::string& path) {
  std::ifstream f(path);
  if (!f) return notFound("cannot read " + path + ": " + std::strerror(errno));
  std::ostringstream os;
  os << f.rdbuf();
  if (os.str().size() > (1u << 20)) return resourceExhausted(path + " is over 1 MiB");
  return os.str();
}

// The first line that is not blank or a comment, trimmed.
Result<std::string> firstKeyLine(const std::string& text, const std::string& path) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    line = trim(line);
    if (line.empty() || (line[0] == '#' && !isZ85Key(line))) continue;
    if (!isZ85Key(line)) return invalidArgument(path + " does not hold a 40-character Z85 key");
    return line;
  }
  return invalidArgument(path + " holds no key");
}

// Writes a new key file; never replaces an existing file or link.
Status writeNewFile(const std::string& path, const std::string& text, mode_t mode) {
  AtomicWriteOptions how;
  how.mode = mode;
  how.replace = false;
  return writeFileAtomically(path, text, how);
}

}  // namespace

bool isZ85Key(const std::string& text) {
  if (text.size() != kZ85KeyChars) return false;
  std::uint8_t raw[32];
  return zmq_z85_decode(raw, text.c_str()) != nullptr;
}

Result<CurveKeyPair> generateKeyPair() {
  char pub[kZ85KeyChars + 1];
  char sec[kZ85KeyChars + 1];
  if (zmq_curve_keypair(pub, sec) != 0) {
    return unavailable(std::string("this libzmq cannot make CURVE keys: ") + zmq_strerror(errno));
  }
  return CurveKeyPair{pub, sec};
}

Status writeKeyPair(const std::string& prefix, const CurveKeyPair& keys) {
  if (prefix.empty()) return invalidArgument("keygen needs an output prefix");
  const std::string sec = prefix + ".key";
  const std::string pub = prefix + ".pub";
  if (::access(sec.c_str(), F_OK) == 0 || ::access(pub.c_str(), F_OK) == 0) {
    return failedPrecondition(sec + " or " + pub + " exists; refusing to overwrite a key");
  }
  GSGD_RETURN_IF_ERROR(writeNewFile(
      sec, "# groupsgd CURVE secret key: keep private (mode 0600)\n" + keys.secret_key + "\n",
      0600));
  return writeNewFile(pub, "# groupsgd CURVE public key\n" + keys.public_key + "\n", 0644);
}

Result<CurveKeyPair> loadSecretKeyFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return notFound("cannot read secret key file " + path + ": " + std::strerror(errno));
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return permissionDenied("secret key file " + path + " is accessible by group or others (mode " +
                            mode + "); run chmod 600 " + path);
  }
  auto text = readSmallFile(path);
  if (!text) return text.status();
  auto secret = firstKeyLine(*text, path);
  if (!secret) return secret.status();
  char pub[kZ85KeyChars + 1];
  if (zmq_curve_public(pub, secret->c_str()) != 0) {
    return invalidArgument("cannot derive the public key from " + path);
  }
  return CurveKeyPair{pub, *secret};
}

Result<std::string> loadPublicKeyFile(const std::string& path) {
  auto text = readSmallFile(path);
  if (!text) return text.status();
  return firstKeyLine(*text, path);
}

Result<std::set<std::string>> parseAllowList(const std::string& text) {
  std::set<std::string> keys;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    line = trim(line);
    const std::string first = line.substr(0, line.find_first_of(" \t"));
    if (isZ85Key(first)) {
      keys.insert(first);
    } else if (!line.empty() && line[0] != '#') {
      return invalidArgument("allow-list line " + std::to_string(n) +
                             ": expected a 40-character Z85 public key, got '" + first + "'");
    }
  }
  return keys;
}

bool CurveKeys::hasDaemonRights(const std::string& key) const {
  return key == public_key || (daemons != nullptr && daemons->contains(key));
}

Result<std::set<std::string>> loadNodeKeys(const std::string& path) {
  auto text = readSmallFile(path);
  if (!text) return text.status();
  if (auto valid = parseAllowList(*text); !valid)
    return invalidArgument(path + ": " + valid.status().message());
  std::set<std::string> nodes;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(trim(line));
    std::string key, label;
    words >> key >> label;
    if (label == "node" && isZ85Key(key)) nodes.insert(key);
  }
  return nodes;
}

Result<std::set<std::string>> loadAllowList(const std::string& path) {
  auto text = readSmallFile(path);
  if (!text) return text.status();
  auto keys = parseAllowList(*text);
  if (!keys) return invalidArgument(path + ": " + keys.status().message());
  return keys;
}

}  // namespace groupsgd
