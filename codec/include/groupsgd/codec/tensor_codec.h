// The kernels' compression codecs on the wire: the encodings as the message header names
// them, the decoder a received message's compressed tensors go through, and the checks of
// a received tensor seen in place. The message layer (common/message.h) carries encoded
// bytes without knowing any codec; this is where the two meet.
// Thread rule: plain functions, reentrant.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "envelope.capnp.h"
#include "groupsgd/common/message.h"
#include "groupsgd/common/status.h"
#include "groupsgd/common/tensor_view.h"
#include "groupsgd/kernels/compression.h"

namespace groupsgd {

proto::Encoding toWire(kernels::Encoding encoding);
kernels::Encoding fromWire(proto::Encoding encoding);

// Decodes a compressed payload into out (exactly out.size() elements) with the kernels'
// codecs, which validate everything (kernels::decode): the PayloadDecoder for
// InMessage::readTensor and viewTensor. kDataLoss for a corrupt payload (bad indices,
// values, padding), kInvalidArgument for a wrong length.
Status decodePayload(proto::Encoding encoding, std::span<const std::uint8_t> payload,
                     std::span<float> out);

// Over every part of a view, with the kernels' vectorised loops. The sum of squares is in
// double and not finite exactly when an element is not (squares of finite floats cannot
// overflow a double sum of < 2^60 elements).
double sumSquares(const TensorView& view);
std::size_t countNonFinite(const TensorView& view);

}  // namespace groupsgd
