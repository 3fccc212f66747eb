// A host-wide cache of unpacked dataset files: the first process that reads a gzipped
// IDX file also writes its plain bytes to the cache directory; later ones read that copy
// (tens of ms) instead of inflating again (Fashion-MNIST's training images: ~250 ms of
// CPU per worker on a 2-vCPU machine, paid by every trainer of a run before it can
// register). docs/architecture.md "Dataset cache".
//
// A copy is keyed by the source's absolute path, size and modification time, and is used
// only when its size and CRC-32 equal those in the gzip trailer; anything else (no cache
// directory, a full disk, a stale or corrupt copy, a multi-member gzip) falls back to
// inflating the source, so the cache can make loading faster but never wrong.
// Thread rule: plain functions; concurrent callers (threads or processes) are safe: each
// writer stages its own temporary file and renames it into place.
#pragma once

#include <optional>
#include <string>

namespace groupsgd::dataset::detail {

// The cache directory: $GROUPSGD_DATA_CACHE ("off" or "" disables it), else
// $CACHE_DIRECTORY/datasets (systemd's CacheDirectory=), else
// $XDG_CACHE_HOME/groupsgd/datasets, else $HOME/.cache/groupsgd/datasets; "" if none.
std::string dataCacheDir();

// The path of a verified plain copy of the gzipped file gz_path (made now if missing or
// bad), or nothing when the cache is off or cannot serve this file.
std::optional<std::string> unpackedCopy(const std::string& gz_path);

}  // namespace groupsgd::dataset::detail
