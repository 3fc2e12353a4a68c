#include "gpufeed/status.h"

#include <gtest/gtest.h>

#include <cerrno>

namespace gpufeed {
namespace {

TEST(StatusTest, OkIsCheapAndEmpty) {
  Status status;
  EXPECT_TRUE(status.ok());
  EXPECT_EQ(status.ToString(), "OK");
  EXPECT_EQ(status.message(), "");
}

TEST(StatusTest, NamedFactoriesCarryCodeAndMessage) {
  Status status = Status::Corruption("a.rec at byte offset 8: bad magic");
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(status.IsCorruption());
  EXPECT_EQ(status.ToString(), "Corruption: a.rec at byte offset 8: bad magic");
  Status copy = status;
  EXPECT_EQ(copy.ToString(), status.ToString());
  EXPECT_EQ(status.WithContext("sample 3").message(), "sample 3: a.rec at byte offset 8: bad magic");
}

TEST(StatusTest, ErrnoMapsOnce) {
  EXPECT_TRUE(Status::FromErrno(ENOENT, "x").IsNotFound());
  EXPECT_TRUE(Status::FromErrno(EACCES, "x").IsPermissionDenied());
  EXPECT_TRUE(Status::FromErrno(EIO, "x").IsIOError());
  EXPECT_NE(Status::FromErrno(EIO, "/data/x").message().find("/data/x"), std::string::npos);
}

TEST(StatusTest, ResultHoldsValueOrStatus) {
  Result<int> value(42);
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(value.value(), 42);
  Result<int> error(Status::NotFound("nope"));
  EXPECT_FALSE(error.ok());
  EXPECT_TRUE(error.status().IsNotFound());
}

}  // namespace
}  // namespace gpufeed
