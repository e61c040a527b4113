#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "mla/core/error.hpp"
#include "mla/core/sha256.hpp"
#include "support/temp_dir.hpp"

namespace {

std::span<const uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// FIPS 180-2 / NIST CAVP known answers.
TEST(Sha256, KnownAnswers) {
  EXPECT_EQ(mla::sha256_hex(bytes_of("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(mla::sha256_hex(bytes_of("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(mla::sha256_hex(bytes_of("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

class Sha256File : public ::testing::Test {
 protected:
  mla::testing::TempDir tmp_{"mla-sha256"};
  const std::filesystem::path& dir_ = tmp_.path();
};

// One million 'a' (NIST): also crosses the streaming buffer boundary of sha256_file.
TEST_F(Sha256File, MillionAStreamsAcrossBuffers) {
  const std::string data(1000000, 'a');
  const auto path = dir_ / "a.bin";
  std::ofstream(path, std::ios::binary) << data;
  const std::string want = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  EXPECT_EQ(mla::sha256_hex(bytes_of(data)), want);
  EXPECT_EQ(mla::sha256_file(path), want);
}

TEST_F(Sha256File, BufferSizedFileMatchesInMemoryDigest) {
  // Exactly the 1 MiB read size and one byte more: the loop's edge cases.
  for (std::size_t n : {std::size_t{1} << 20, (std::size_t{1} << 20) + 1}) {
    std::string data(n, '\0');
    for (std::size_t i = 0; i < n; ++i) data[i] = static_cast<char>((i * 131) ^ (i >> 7));
    const auto path = dir_ / "edge.bin";
    std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
    EXPECT_EQ(mla::sha256_file(path), mla::sha256_hex(bytes_of(data))) << n;
  }
}

TEST_F(Sha256File, MissingFileIsATypedErrorNamingIt) {
  const auto path = dir_ / "nope.bin";
  try {
    mla::sha256_file(path);
    FAIL() << "no error";
  } catch (const mla::Error& e) {
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
}

}  // namespace
