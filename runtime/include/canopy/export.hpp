#pragma once

/// @file
/// `CANOPY_API` marks what `libcanopy.so` exports. The library is built with
/// hidden visibility: every symbol not marked here stays inside it, so a
/// program sees the API of these headers and nothing of the implementation
/// (CAF, LMDB, the HTTP server) that the library links.

#define CANOPY_API __attribute__((visibility("default")))
