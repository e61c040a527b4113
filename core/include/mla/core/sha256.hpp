// sha256 (OpenSSL EVP) as lowercase hex, for the manifest and generated-input checksums.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

namespace mla {

std::string sha256_hex(std::span<const uint8_t> bytes);
// Streams the file; throws mla::Error naming the file when it cannot be read.
std::string sha256_file(const std::filesystem::path& path);

}  // namespace mla
