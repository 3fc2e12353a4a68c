// ImageFolder enumeration matches torchvision's rules.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include "format/datasets.h"
#include "gpufeed/dataset.h"
#include "test_util.h"
#include "util/path.h"

namespace gpufeed {
namespace {

TEST(ImageFolderTest, OrderAndLabelsLikeTorchvision) {
  TempDir dir;
  std::string root = dir.path();
  for (const char* d : {"cat", "dog", "dog/nested", "ant"}) {
    ASSERT_TRUE(CreateDirectories(JoinPath(root, d)).ok());
  }
  WriteBytes(JoinPath(root, "dog/b.jpg"), "dog-b");
  WriteBytes(JoinPath(root, "dog/A.PNG"), "dog-A");
  WriteBytes(JoinPath(root, "dog/nested/c.jpeg"), "dog-c");
  WriteBytes(JoinPath(root, "dog/notes.txt"), "skip");
  WriteBytes(JoinPath(root, "cat/z.webp"), "cat-z");
  WriteBytes(JoinPath(root, "ant/1.bmp"), "ant-1");
  WriteBytes(JoinPath(root, "README"), "not a class");
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(root, {}, &dataset);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(dataset->format(), DatasetFormat::kImageFolder);
  EXPECT_EQ(dataset->classes(), (std::vector<std::string>{"ant", "cat", "dog"}));
  ASSERT_EQ(dataset->size(), 5u);
  std::vector<std::string> keys, data;
  std::vector<float> labels;
  Record record;
  for (uint64_t i = 0; i < dataset->size(); ++i) {
    ASSERT_TRUE(dataset->Read(i, &record).ok());
    keys.push_back(record.key);
    data.push_back(record.data);
    labels.push_back(record.labels.at(0));
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"ant/1.bmp", "cat/z.webp", "dog/A.PNG", "dog/b.jpg",
                                            "dog/nested/c.jpeg"}));
  EXPECT_EQ(data[4], "dog-c");
  EXPECT_EQ(labels, (std::vector<float>{0, 1, 2, 2, 2}));
}

TEST(ImageFolderTest, EmptyClassAndNoClassesAreErrors) {
  TempDir dir;
  ASSERT_TRUE(CreateDirectories(JoinPath(dir.path(), "a")).ok());
  ASSERT_TRUE(CreateDirectories(JoinPath(dir.path(), "b")).ok());
  WriteBytes(JoinPath(dir.path(), "a/x.jpg"), "x");
  std::unique_ptr<Dataset> dataset;
  Status status = Dataset::Open(dir.path(), {}, &dataset);
  EXPECT_TRUE(status.IsNotFound()) << status.ToString();
  EXPECT_NE(status.message().find("class folder(s) b"), std::string::npos) << status.ToString();

  TempDir empty;
  status = Dataset::Open(empty.path(), {}, &dataset);
  EXPECT_TRUE(status.IsInvalidArgument()) << status.ToString();
  EXPECT_NE(status.message().find("empty"), std::string::npos);
}

TEST(ImageFolderTest, SymlinkLoopDoesNotHang) {
  TempDir dir;
  ASSERT_TRUE(CreateDirectories(JoinPath(dir.path(), "a")).ok());
  WriteBytes(JoinPath(dir.path(), "a/x.jpg"), "x");
  ASSERT_EQ(::symlink(JoinPath(dir.path(), "a").c_str(), JoinPath(dir.path(), "a/loop").c_str()), 0);
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(dir.path(), {}, &dataset).ok());
  EXPECT_EQ(dataset->size(), 1u);
}

TEST(ImageFolderTest, FileRemovedAfterOpenIsNotFoundNamingIt) {
  TempDir dir;
  ASSERT_TRUE(CreateDirectories(JoinPath(dir.path(), "a")).ok());
  WriteBytes(JoinPath(dir.path(), "a/x.jpg"), "x");
  std::unique_ptr<Dataset> dataset;
  ASSERT_TRUE(Dataset::Open(dir.path(), {}, &dataset).ok());
  ::unlink(JoinPath(dir.path(), "a/x.jpg").c_str());
  Record record;
  Status status = dataset->Read(0, &record);
  EXPECT_TRUE(status.IsNotFound());
  EXPECT_NE(status.message().find("a/x.jpg"), std::string::npos);
}

}  // namespace
}  // namespace gpufeed
