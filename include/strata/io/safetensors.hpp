#pragma once
// strata-header: host-only
// Checkpoint files in the safetensors format (github.com/huggingface/safetensors), so that
// PyTorch, NumPy and every other safetensors reader load them as they are:
//
//   8 bytes    N, little-endian uint64: the header's length
//   N bytes    UTF-8 JSON, space-padded to a multiple of 8:
//              {"__metadata__": {string: string}, "<name>": {"dtype": "F32", "shape": [2, 3],
//               "data_offsets": [begin, end]}, ...}
//   the rest   the tensors' bytes, row-major, little-endian; data_offsets are relative to
//              here, and together they cover it exactly: no gap, no overlap, nothing after.
//
// The writer lays tensors out by decreasing element size (as the reference writer does),
// in insertion order otherwise, so every tensor is aligned to its element size in the file.
// It adds three kinds of metadata entries, which make a "strata checkpoint":
//   "strata.format": "strata-checkpoint-1"
//   "crc32.<name>": 8 lowercase hex digits, zlib CRC-32 of the tensor's bytes
//   "strata.header_crc32": CRC-32 of the length prefix and header, computed with this
//                          value's 8 digits set to '0' (the CRC cannot cover itself).
// The reader validates every rule of the format when it opens a file (the same rules as the
// reference implementation, in tensor.rs) and, for a strata checkpoint, every CRC, all on
// open: after the constructor returns, every byte was checked. Files of other writers (no
// "strata.format") load after the structural checks; checksummed() tells which it was.
// Every failure is a checkpoint_error: "checkpoint <path>: <what is wrong, with numbers>".
#include "strata/io/safetensors_format.hpp"
#include "strata/io/safetensors_reader.hpp"
#include "strata/io/safetensors_writer.hpp"
