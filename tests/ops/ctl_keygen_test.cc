// groupsgdctl keygen, run in-process through runCtl (no daemon, no socket involved).
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <filesystem>
#include <sstream>

#include "groupsgd/common/curve_keys.h"
#include "groupsgd/ops/ctl.h"
#include "support/temp_dir.h"

using namespace groupsgd;
using namespace groupsgd::ops;

TEST_CASE(
    "groupsgdctl keygen: writes a 0600 secret and the public key it prints; never "
    "overwrites" *
    doctest::skip(zmq_has("curve") == 0)) {
  const groupsgd::testing::TempDir tmp;
  const std::string dir = tmp.path();
  const std::string prefix = dir + "/node1";
  std::ostringstream out, err;
  REQUIRE(runCtl({"--socket", dir + "/absent.sock", "keygen", "--out", prefix}, "", out, err) ==
          kCtlOk);
  auto pub = loadPublicKeyFile(prefix + ".pub");
  REQUIRE(pub.isOk());
  CHECK(out.str() == *pub + "\n");
  auto secret = loadSecretKeyFile(prefix + ".key");
  REQUIRE(secret.isOk());
  CHECK(secret->public_key == *pub);
  struct stat st {};
  REQUIRE(::stat((prefix + ".key").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);

  std::ostringstream out2, err2;
  CHECK(runCtl({"keygen", "--out", prefix}, "", out2, err2) == kCtlRefused);
  CHECK(err2.str().find("refusing to overwrite") != std::string::npos);
  CHECK(loadSecretKeyFile(prefix + ".key")->secret_key == secret->secret_key);  // unchanged
  std::ostringstream out3, err3;
  CHECK(runCtl({"keygen"}, "", out3, err3) == kCtlUsageOrConnection);
  CHECK(runCtl({"keygen", "--bogus"}, "", out3, err3) == kCtlUsageOrConnection);
  std::filesystem::remove_all(dir);
}
