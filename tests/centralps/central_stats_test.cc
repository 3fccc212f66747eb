#include "groupsgd/centralps/central_stats.h"

#include <doctest/doctest.h>

#include <capnp/message.h>

#include "support/proto_fields.h"

using namespace groupsgd;
using centralps::CentralStats;

TEST_CASE("central stats: every field survives a round trip through Cap'n Proto") {
  CentralStats in;
  in.version = 1;
  in.updates_applied = 2;
  in.updates_refused = 3;
  in.samples_applied = 4;
  in.samples_refused = 5;
  in.bad_messages = 6;
  in.max_staleness = 7;
  in.mean_staleness = 8.5f;
  in.checkpoint_version = 9;
  in.checkpoint_failures = 10;
  in.standby_configured = true;
  in.standby_attached = true;
  in.standby_acked_version = 11;
  in.standby_losses = 12;
  in.standby_max_lag = 13;
  in.standby_ack_wait_ms = 14.5f;
  in.standby_alone = true;
  in.uncommitted_deltas = 15;

  capnp::MallocMessageBuilder message;
  auto builder = message.initRoot<proto::CentralStats>();
  centralps::toProto(in, builder);
  CHECK(testing::fieldsLeftDefault(builder.asReader()).empty());

  const CentralStats out = centralps::fromProto(builder.asReader());
  CHECK(out.version == 1);
  CHECK(out.updates_applied == 2);
  CHECK(out.updates_refused == 3);
  CHECK(out.samples_applied == 4);
  CHECK(out.samples_refused == 5);
  CHECK(out.bad_messages == 6);
  CHECK(out.max_staleness == 7);
  CHECK(out.mean_staleness == 8.5f);
  CHECK(out.checkpoint_version == 9);
  CHECK(out.checkpoint_failures == 10);
  CHECK(out.standby_configured);
  CHECK(out.standby_attached);
  CHECK(out.standby_acked_version == 11);
  CHECK(out.standby_losses == 12);
  CHECK(out.standby_max_lag == 13);
  CHECK(out.standby_ack_wait_ms == 14.5f);
  CHECK(out.standby_alone);
  CHECK(out.uncommitted_deltas == 15);
}
