// `prism bow` end to end on real photos (../shared/data/sun8, a few per class so that it runs in
// seconds): train with --eval, eval with the confusion picture, classify (text and --json), and bad
// input named by file and line: a list line without a class, a class the model does not know, a
// missing image, a missing or damaged model, bad options.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

#include "bow_scenes.h"
#include "cli_support.h"

namespace fs = std::filesystem;

namespace prism {
namespace {

using test::run_prism;
using test::TempDir;

// The first `per` lines of each of `classes` in sun8's LIST, written to `out`.
void subset(const std::string& list, const std::vector<std::string>& classes, int per, const fs::path& out) {
  std::ifstream in(list);
  std::ofstream o(out);
  std::map<std::string, int> taken;
  for (std::string line; std::getline(in, line);) {
    const std::string cls = line.substr(0, line.find('/'));
    if (std::find(classes.begin(), classes.end(), cls) != classes.end() && taken[cls]++ < per) o << line << "\n";
  }
}

TEST(BowCli, TrainEvalClassifyAndBadInput) {
  const std::string data = test::data_dir() + "/sun8";
  if (!fs::exists(data + "/train.txt")) {
    if (std::getenv("PRISM_REQUIRE_DATA")) FAIL() << "no ../shared/data/sun8";
    GTEST_SKIP() << "SKIPPED LOUDLY: ../shared/data/sun8 not found (set PRISM_DATA_DIR)";
  }
  TempDir dir;
  const std::vector<std::string> classes = {"rainforest", "desert", "auditorium"};
  subset(data + "/train.txt", classes, 12, dir.path() / "train.txt");
  subset(data + "/test.txt", classes, 4, dir.path() / "test.txt");
  const std::string model = (dir.path() / "m.bow").string(), picture = (dir.path() / "confusion.png").string();
  auto r = run_prism({"bow", "train", "--data", data, "--train", (dir.path() / "train.txt").string(), "--out", model,
                      "--k", "40", "--samples", "100", "--levels", "1", "--eval", (dir.path() / "test.txt").string(),
                      "--confusion", picture});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("on 36 images of 3 classes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| k-NN chi-squared, K = 10, one histogram |"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("| linear SVM on sqrt(histogram), spatial pyramid L = 1 |"), std::string::npos) << r.output;
  // The three classes are far apart: the SVM gets at least 9 of the 12 test photos.
  const size_t at = r.output.find("accuracy on ");
  ASSERT_NE(at, std::string::npos) << r.output;
  int right = 0, total = 0;
  ASSERT_EQ(std::sscanf(r.output.c_str() + r.output.find('(', at), "(%d of %d)", &right, &total), 2) << r.output;
  EXPECT_EQ(total, 12);
  EXPECT_GE(right, 9) << r.output;
  EXPECT_GT(fs::file_size(picture), 1000u);

  r = run_prism({"bow", "eval", "--model", model, "--data", data, "--test", (dir.path() / "test.txt").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("(" + std::to_string(right) + " of 12)"), std::string::npos) << "a reloaded model differs\n"
                                                                                       << r.output;

  std::string first;
  std::getline(*std::make_unique<std::ifstream>(dir.path() / "test.txt"), first);
  r = run_prism({"bow", "classify", "--model", model, "--json", data + "/" + first});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"label\":\""), std::string::npos) << r.output;

  // Weights so large that every decision overflows: the SVM's rule gives a label and confidence 0
  // (it was NaN, printed as a bare nan that is not JSON); the line stays one valid JSON object. NaN
  // weights themselves are refused naming the file and field.
  const std::string huge = (dir.path() / "huge.bow").string();
  fs::copy_file(model, huge);
  test::set_bow_svm_weights(huge, std::numeric_limits<double>::max());
  r = run_prism({"bow", "classify", "--model", huge, "--json", data + "/" + first});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(
      std::regex_match(r.output, std::regex(R"(\{"image":"[^"\\]+","label":"[a-z]+","confidence":0\.0000\}\n)")))
      << r.output;
  test::set_bow_svm_weights(huge, std::nan(""));
  r = run_prism({"bow", "classify", "--model", huge, "--json", data + "/" + first});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find(huge + ": a non-finite value in the SVM weights"), std::string::npos) << r.output;

  // Bad input, named.
  { std::ofstream(dir.path() / "bad.txt") << first << "\nno_class_folder.jpg\n"; }
  r = run_prism({"bow", "eval", "--model", model, "--data", data, "--test", (dir.path() / "bad.txt").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("bad.txt:2: 'no_class_folder.jpg' has no class folder"), std::string::npos) << r.output;
  { std::ofstream(dir.path() / "other.txt") << "bedroom/x.jpg\n"; }
  r = run_prism({"bow", "eval", "--model", model, "--data", data, "--test", (dir.path() / "other.txt").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("class 'bedroom' is not one the model knows"), std::string::npos) << r.output;
  r = run_prism({"bow", "classify", "--model", model, (dir.path() / "missing.jpg").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("missing.jpg"), std::string::npos) << r.output;
  r = run_prism({"bow", "classify", "--model", (dir.path() / "nope.bow").string(), data + "/" + first});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("nope.bow"), std::string::npos) << r.output;
  {
    std::fstream f(model, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x5a');
  }
  r = run_prism({"bow", "classify", "--model", model, data + "/" + first});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("CRC-32 mismatch"), std::string::npos) << r.output;
  r = run_prism(
      {"bow", "train", "--data", data, "--train", (dir.path() / "train.txt").string(), "--out", model, "--k", "0"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--k takes an integer in 2..100000, not '0'"), std::string::npos) << r.output;
  r = run_prism({"bow", "train", "--levels", "9"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--levels"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace prism
