#include "mla/core/sha256.hpp"

#include <array>
#include <fstream>
#include <memory>
#include <vector>

#include <fmt/format.h>
#include <openssl/evp.h>

#include "mla/core/error.hpp"

namespace mla {

namespace {

struct CtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using Ctx = std::unique_ptr<EVP_MD_CTX, CtxDeleter>;

Ctx new_ctx() {
  Ctx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    throw Error("sha256: OpenSSL could not initialise a SHA-256 context");
  }
  return ctx;
}

std::string finish(EVP_MD_CTX* ctx) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
  unsigned int len = 0;
  if (EVP_DigestFinal_ex(ctx, md.data(), &len) != 1) throw Error("sha256: OpenSSL digest failed");
  std::string hex;
  hex.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) hex += fmt::format("{:02x}", md[i]);
  return hex;
}

}  // namespace

std::string sha256_hex(std::span<const uint8_t> bytes) {
  Ctx ctx = new_ctx();
  if (EVP_DigestUpdate(ctx.get(), bytes.data(), bytes.size()) != 1) {
    throw Error("sha256: OpenSSL digest update failed");
  }
  return finish(ctx.get());
}

std::string sha256_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(fmt::format("sha256: cannot open {}", path.string()));
  Ctx ctx = new_ctx();
  // Streamed: golden files can be far larger than we want resident just to hash them.
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const std::streamsize got = in.gcount();
    if (got > 0 && EVP_DigestUpdate(ctx.get(), buf.data(), static_cast<std::size_t>(got)) != 1) {
      throw Error(fmt::format("sha256: digest update failed on {}", path.string()));
    }
  }
  if (in.bad()) throw Error(fmt::format("sha256: read error on {}", path.string()));
  return finish(ctx.get());
}

}  // namespace mla
