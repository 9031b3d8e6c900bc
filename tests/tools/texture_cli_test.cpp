// `prism texture` end to end on real photos (../shared/data/images): enrol, search, verify, list,
// stats, update, delete, --json, bad input; and the gallery's crash safety, by killing enrolling
// and deleting writer processes at random moments (SIGKILL) and checking that the gallery opens
// cleanly with every acknowledged write in it.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include "cli_support.h"
#include "common/durable_file.h"
#include "gallery_v1.h"
#include "process.h"
#include "texture/gallery.h"
#include "texture_cases.h"

namespace fs = std::filesystem;

namespace prism {
namespace {

using test::run_prism;
using test::TempDir;

// Real photos, or a loud skip (a failure under PRISM_REQUIRE_DATA=1).
std::string images_dir() {
  const std::string d = test::data_dir() + "/images";
  if (!fs::exists(d + "/box.png")) return {};
  return d;
}
#define REQUIRE_IMAGES(dir)                                                                 \
  const std::string dir = images_dir();                                                     \
  if (dir.empty()) {                                                                        \
    if (std::getenv("PRISM_REQUIRE_DATA")) FAIL() << "no ../shared/data/images";            \
    GTEST_SKIP() << "SKIPPED LOUDLY: ../shared/data/images not found (set PRISM_DATA_DIR)"; \
  }

TEST(TextureCli, EnrolSearchVerifyUpdateDelete) {
  REQUIRE_IMAGES(img);
  TempDir dir;
  const std::string g = (dir.path() / "gallery").string();
  auto r = run_prism({"texture", "enroll", "--gallery", g, img + "/box.png", img + "/graf1.png", img + "/baboon.jpg",
                      img + "/building.jpg"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("enrolled 4 of 4"), std::string::npos) << r.output;

  // 1:M: the box inside a cluttered scene, and graf3 (a real viewpoint change of graf1).
  r = run_prism({"texture", "search", "--gallery", g, "--device", "cpu", img + "/box_in_scene.png"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("box_in_scene.png: box ("), std::string::npos) << r.output;
  r = run_prism({"texture", "search", "--gallery", g, "--json", img + "/graf3.png"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\"identified\":true,\"id\":\"graf1\""), std::string::npos) << r.output;
  // --json says what the human form says: the threshold too; ratio_matches apart from matches.
  EXPECT_NE(r.output.find("\"ratio_matches\":"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"min_significance\":3.6"), std::string::npos) << r.output;
  // A photo that was never enrolled.
  r = run_prism({"texture", "search", "--gallery", g, img + "/fruits.jpg"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("not identified"), std::string::npos) << r.output;

  // 1:1
  r = run_prism({"texture", "verify", "--gallery", g, "--id", "box", img + "/box_in_scene.png"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ACCEPT box"), std::string::npos) << r.output;
  r = run_prism({"texture", "verify", "--gallery", g, "--id", "graf1", img + "/box_in_scene.png"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("REJECT graf1"), std::string::npos) << r.output;
  r = run_prism({"texture", "verify", "--gallery", g, "--id", "nobody", img + "/box.png"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("'nobody' is not enrolled"), std::string::npos) << r.output;

  r = run_prism({"texture", "list", "--gallery", g, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("{\"id\":\"baboon\",\"features\":768"), std::string::npos) << r.output;
  r = run_prism({"texture", "stats", "--gallery", g, "--json"});
  EXPECT_NE(r.output.find("\"products\":4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"descriptors\":\"u8\",\"slot_rows\":768"), std::string::npos) << r.output;

  // Update: "box" now holds the fruits photo, so the box scene no longer verifies as box.
  // The same image again is a no-op, as a repeated POST of the API; another image
  // under an enrolled id is refused.
  r = run_prism({"texture", "enroll", "--gallery", g, "--json", img + "/box.png"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("{\"enrolled\":\"box\",\"features\":"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(",\"unchanged\":true}"), std::string::npos) << r.output;
  r = run_prism({"texture", "enroll", "--gallery", g, "--id", "box", img + "/fruits.jpg"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("already enrolled"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("prism texture update --id box IMAGE"), std::string::npos) << r.output;
  // A batch search goes past a bad file, reports it and exits 2.
  r = run_prism({"texture", "search", "--gallery", g, img + "/no-such.png", img + "/box_in_scene.png"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("no-such.png"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("box_in_scene.png: box ("), std::string::npos) << r.output;
  r = run_prism({"texture", "update", "--gallery", g, "--id", "box", img + "/fruits.jpg"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = run_prism({"texture", "verify", "--gallery", g, "--id", "box", img + "/box_in_scene.png"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  r = run_prism({"texture", "delete", "--gallery", g, "box", "graf1"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = run_prism({"texture", "list", "--gallery", g});
  EXPECT_EQ(r.output.find("graf1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("baboon"), std::string::npos) << r.output;
}

// A large JPEG is decoded reduced (2560x1920 at 1/2: kernels/image/decode.h) for its features, which
// are stored in its own pixels: the listed size is the file's, the same pixels as a PNG (decoded at
// full size) verify against it, and enrolling the JPEG again is a no-op (the same features).
TEST(TextureCli, ALargeJpegIsEnrolledInItsOwnPixels) {
  TempDir dir;
  const std::string g = (dir.path() / "gallery").string();
  std::mt19937 rng(54);
  cv::Mat big;
  cv::resize(test::random_texture(rng, 1024, 768), big, cv::Size(2560, 1920), 0, 0, cv::INTER_CUBIC);
  const std::string jpg = (dir.path() / "big.jpg").string(), png = (dir.path() / "big.png").string();
  ASSERT_TRUE(cv::imwrite(jpg, big, {cv::IMWRITE_JPEG_QUALITY, 92}));
  ASSERT_TRUE(cv::imwrite(png, big));
  auto r = run_prism({"texture", "enroll", "--gallery", g, "--device", "cpu", jpg});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_prism({"texture", "list", "--gallery", g, "--json"});
  EXPECT_NE(r.output.find("\"width\":2560,\"height\":1920"), std::string::npos) << r.output;
  r = run_prism({"texture", "verify", "--gallery", g, "--device", "cpu", "--id", "big", png});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ACCEPT big"), std::string::npos) << r.output;
  r = run_prism({"texture", "enroll", "--gallery", g, "--device", "cpu", "--json", jpg});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(",\"unchanged\":true}"), std::string::npos) << r.output;
}

// Every subcommand answers --help with its usage, exit 0.
TEST(TextureCli, EverySubcommandAnswersHelp) {
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"texture", "enroll", "--help"},
                                             {"texture", "search", "--gallery", "x", "-h"},
                                             {"texture", "delete", "--help"},
                                             {"texture", "serve", "--help"},
                                             {"bow", "train", "--help"},
                                             {"bow", "classify", "-h"},
                                             {"run", "--help"},
                                             {"inspect", "--help"}}) {
    const auto r = run_prism(args);
    EXPECT_EQ(r.exit_code, 0) << args[0] << " " << args[1] << ": " << r.output;
    EXPECT_NE(r.output.find("usage"), std::string::npos) << args[0] << " " << args[1] << ": " << r.output;
  }
}

// `prism texture eval` is no longer a command of the product: it names the evaluation tool that
// replaced it, and fails.
TEST(TextureCli, EvalNamesTheEvaluationTool) {
  const auto r = run_prism({"texture", "eval", "--textures", "20"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("prism-texture-eval"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("build/evaluation/texture/"), std::string::npos) << r.output;
}

// Poor light: a new gallery records its contrast normalisation (--normalise; none by
// default, as galleries made before the record mean) and every command against it applies it; a
// --normalise that differs from the record, or an unknown one, is refused naming it.
TEST(TextureCli, NormalisationIsRecordedAndFollowed) {
  REQUIRE_IMAGES(img);
  TempDir dir;
  const std::string g = (dir.path() / "gallery").string(), none = (dir.path() / "none").string();
  const std::string chosen = texture::poor_light_normalisation().name();
  auto r = run_prism({"texture", "enroll", "--gallery", g, "--normalise", "clahe-2", img + "/box.png"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--normalise: unknown normalisation 'clahe-2': expected none, or clahe-CLIP-TILES"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(g)) << "a refused command created the gallery";

  r = run_prism({"texture", "enroll", "--gallery", g, "--normalise", chosen, img + "/box.png", img + "/graf1.png"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(texture::Gallery::read_normalisation(g).name(), chosen);
  r = run_prism({"texture", "stats", "--gallery", g, "--json"});
  EXPECT_NE(r.output.find("\"normalisation\":\"" + chosen + "\""), std::string::npos) << r.output;
  r = run_prism({"texture", "search", "--gallery", g, "--device", "cpu", img + "/box_in_scene.png"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("box_in_scene.png: box ("), std::string::npos) << r.output;
  r = run_prism({"texture", "verify", "--gallery", g, "--id", "graf1", img + "/graf3.png"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* sub : {"search", "enroll"}) {
    r = run_prism({"texture", sub, "--gallery", g, "--normalise", "none", img + "/graf3.png"});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("--normalise none: the gallery " + g + " records normalisation " + chosen),
              std::string::npos)
        << r.output;
  }
  // Enrolling into it without --normalise follows the record.
  r = run_prism({"texture", "enroll", "--gallery", g, img + "/baboon.jpg"});
  EXPECT_EQ(r.exit_code, 0) << r.output;

  // A new gallery without --normalise records the poor-light choice.
  const std::string plain = (dir.path() / "plain").string();
  r = run_prism({"texture", "enroll", "--gallery", plain, img + "/box.png"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(texture::Gallery::read_normalisation(plain), texture::poor_light_normalisation());

  // --normalise none: format 2 exactly as galleries made before the record, which mean none.
  r = run_prism({"texture", "enroll", "--gallery", none, "--normalise", "none", img + "/box.png", img + "/graf1.png"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  {
    std::ifstream m(none + "/gallery.prism");
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(m), {}), "prism texture gallery, format 2\n");
  }
  EXPECT_EQ(texture::Gallery::read_normalisation(none).name(), "none");
  r = run_prism({"texture", "verify", "--gallery", none, "--id", "box", img + "/box_in_scene.png"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = run_prism({"texture", "stats", "--gallery", none});
  EXPECT_NE(r.output.find("normalisation   none"), std::string::npos) << r.output;

  // The same image enrolled under each record: the normalised gallery's features differ, and a
  // gallery created with the same --normalise holds the same features.
  const std::string again = (dir.path() / "again").string();
  r = run_prism({"texture", "enroll", "--gallery", again, "--normalise", chosen, img + "/graf1.png"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const texture::Gallery a = texture::Gallery::open(g), b = texture::Gallery::open(none),
                         c = texture::Gallery::open(again);
  EXPECT_EQ(a.normalisation(), texture::poor_light_normalisation());
  EXPECT_EQ(b.normalisation(), texture::Normalisation{});
  ASSERT_TRUE(a.find("graf1") && b.find("graf1") && c.find("graf1"));
  EXPECT_NE(a.find("graf1")->features.descriptors, b.find("graf1")->features.descriptors);
  EXPECT_EQ(a.find("graf1")->features.descriptors, c.find("graf1")->features.descriptors);
}

// Two `prism texture enroll --normalise` into one new folder at once: both pass the
// fresh-folder check while the test holds the gallery's writer lock; the first to get the lock
// creates the gallery with its normalisation, and the other is refused naming that record (exit 2,
// nothing enrolled) when it asked for another, or enrols beside it when they agree. The gallery
// holds exactly the enrolments that succeeded, under the winner's record.
TEST(TextureCli, RacingEnrolmentsIntoANewFolderAgreeOnTheNormalisation) {
  REQUIRE_IMAGES(img);
  TempDir dir;
  const std::string chosen = texture::poor_light_normalisation().name();
  for (const bool differ : {true, false}) {
    const fs::path g = dir.path() / (differ ? "differ" : "agree");
    fs::create_directories(g);
    const int lock = ::open((g / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);  // not inherited
    ASSERT_GE(lock, 0);
    ASSERT_EQ(::flock(lock, LOCK_EX), 0);
    const std::string norms[2] = {differ ? "none" : chosen, chosen};
    const std::string ids[2] = {"box", "graf1"};
    test::BackgroundPrism runs[2];
    for (int i = 0; i < 2; ++i)
      runs[i] = test::start_prism({"texture", "enroll", "--gallery", g.string(), "--normalise", norms[i], "--device",
                                   "cpu", img + "/" + ids[i] + ".png"},
                                  (dir.path() / ("log" + std::to_string(i) + "-" + g.filename().string())).string());
    // Time for both to reach the lock (a sequencing aid: a later one opens the gallery as it is,
    // which must end the same way).
    std::this_thread::sleep_for(std::chrono::seconds(1));
    ::close(lock);
    test::CommandResult r[2];
    for (int i = 0; i < 2; ++i) r[i] = test::wait_prism(runs[i], 120);
    const std::string recorded = texture::Gallery::read_normalisation(g).name();
    const texture::Gallery gallery = texture::Gallery::open(g);
    if (!differ) {
      EXPECT_EQ(r[0].exit_code, 0) << r[0].output;
      EXPECT_EQ(r[1].exit_code, 0) << r[1].output;
      EXPECT_EQ(recorded, chosen);
      EXPECT_EQ(gallery.entries().size(), 2u);
      continue;
    }
    ASSERT_EQ((r[0].exit_code == 0) + (r[1].exit_code == 0), 1) << "exactly one wins\n"
                                                                << r[0].output << "\n"
                                                                << r[1].output;
    const int winner = r[0].exit_code == 0 ? 0 : 1, loser = 1 - winner;
    EXPECT_EQ(recorded, norms[winner]);
    EXPECT_EQ(r[loser].exit_code, 2) << r[loser].output;
    EXPECT_NE(r[loser].output.find("--normalise " + norms[loser] + ": the gallery " + g.string() +
                                   " records normalisation " + norms[winner]),
              std::string::npos)
        << r[loser].output;
    ASSERT_EQ(gallery.entries().size(), 1u);
    EXPECT_EQ(gallery.entries()[0].id, ids[winner]);
    EXPECT_EQ(gallery.normalisation().name(), norms[winner]);
  }
}

// The pack's note: a reader that finds pack.log gone rebuilds it and says so on stderr, never in
// the --json output on stdout; a pack read as it was is not mentioned.
TEST(TextureCli, ARebuiltPackIsNotedOnStderrOnly) {
  REQUIRE_IMAGES(img);
  TempDir dir;
  const std::string g = (dir.path() / "gallery").string();
  auto r = run_prism({"texture", "enroll", "--gallery", g, img + "/box.png", img + "/graf1.png"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> search = {"texture",  "search", "--gallery", g,
                                           "--device", "cpu",    "--json",    img + "/box_in_scene.png"};
  fs::remove(fs::path(g) / "pack.log");
  std::string command = "'" PRISM_EXE "'";
  for (const auto& a : search) command += " '" + a + "'";
  std::string out;
  EXPECT_EQ(test::run_command("(" + command + " 2>/dev/null)", out), 0) << out;  // stdout alone
  EXPECT_EQ(out.rfind("{\"image\":", 0), 0u) << out;
  EXPECT_EQ(out.find("note"), std::string::npos) << out;
  EXPECT_TRUE(fs::exists(fs::path(g) / "pack.log"));
  fs::remove(fs::path(g) / "pack.log");
  r = run_prism(search);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("prism texture: note: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rebuilt the pack from the entry files"), std::string::npos) << r.output;
  using Args = std::vector<std::string>;
  for (const Args& args : {search, Args{"texture", "list", "--gallery", g}, Args{"texture", "stats", "--gallery", g}}) {
    r = run_prism(args);
    EXPECT_EQ(r.exit_code, 0) << args[1] << ": " << r.output;
    EXPECT_EQ(r.output.find("note:"), std::string::npos) << args[1] << ": " << r.output;
  }
  fs::remove(fs::path(g) / "pack.log");
  r = run_prism({"texture", "stats", "--gallery", g, "--json"});
  EXPECT_NE(r.output.find("\"products\":2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rebuilt the pack"), std::string::npos) << r.output;
}

// Collections: set by enroll and update, kept by an update that does not name one, shown by list
// and stats; a bad name is refused by name. migrate rewrites a format-1 gallery and runs again as a
// no-op.
TEST(TextureCli, CollectionsAndMigrate) {
  REQUIRE_IMAGES(img);
  TempDir dir;
  const std::string g = (dir.path() / "gallery").string();
  auto r =
      run_prism({"texture", "enroll", "--gallery", g, "--collection", "lot-1", img + "/box.png", img + "/graf1.png"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_prism({"texture", "enroll", "--gallery", g, img + "/baboon.jpg"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_prism({"texture", "enroll", "--gallery", g, "--collection", "lot/2", img + "/fruits.jpg"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--collection: invalid collection 'lot/2'"), std::string::npos) << r.output;
  r = run_prism({"texture", "update", "--gallery", g, "--id", "box", img + "/box.png"});  // keeps lot-1
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_prism({"texture", "update", "--gallery", g, "--id", "graf1", "--collection", "lot-2", img + "/graf1.png"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_prism({"texture", "list", "--gallery", g, "--json"});
  EXPECT_NE(r.output.find("\"id\":\"box\""), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"collection\":\"lot-1\",\"format\":2,"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"collection\":\"lot-2\",\"format\":2,"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"collection\":null,\"format\":2,"), std::string::npos) << r.output;
  r = run_prism({"texture", "stats", "--gallery", g, "--json"});
  EXPECT_NE(r.output.find("\"format1_entries\":0,\"no_collection\":1,\"collections\":{\"lot-1\":1,\"lot-2\":1}"),
            std::string::npos)
      << r.output;
  r = run_prism({"texture", "stats", "--gallery", g});
  EXPECT_NE(r.output.find("lot-1"), std::string::npos) << r.output;

  // A format-1 gallery: entries re-encoded by the old encoder.
  const texture::Gallery now = texture::Gallery::open(g);
  const std::string old = (dir.path() / "old").string();
  texture::Gallery::open(old, true);
  for (const auto& e : now.entries()) {
    texture::Features f = e.features;
    f.descriptors_fp16.resize(f.descriptors.size());
    for (size_t i = 0; i < f.descriptors.size(); ++i)
      f.descriptors_fp16[i] = match::float_to_half(f.descriptors[i] / 512.f);
    const std::vector<uint8_t> bytes = test::encode_gallery_entry_v1(e.id, e.source, e.enrolled_unix, f);
    std::ofstream(fs::path(old) / "entries" / (e.id + ".tex"), std::ios::binary)
        .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  }
  r = run_prism({"texture", "stats", "--gallery", old, "--json"});
  EXPECT_NE(r.output.find("\"format1_entries\":3"), std::string::npos) << r.output;
  r = run_prism({"texture", "search", "--gallery", old, "--device", "cpu", img + "/box_in_scene.png"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("box_in_scene.png: box ("), std::string::npos) << r.output;
  r = run_prism({"texture", "migrate", "--gallery", old});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("migrated 3 of 3 entries"), std::string::npos) << r.output;
  r = run_prism({"texture", "migrate", "--gallery", old});
  EXPECT_NE(r.output.find("migrated 0 of 3 entries"), std::string::npos) << r.output;
  const texture::Gallery migrated = texture::Gallery::open(old);
  ASSERT_EQ(migrated.entries().size(), 3u);
  for (size_t i = 0; i < 3; ++i) {  // k/512 survives FP16 and comes back as k
    EXPECT_EQ(migrated.entries()[i].version, 2);
    EXPECT_EQ(migrated.entries()[i].features.descriptors, now.entries()[i].features.descriptors);
  }
}

// Search within collections, the index's budgets and where stats says the products would live.
TEST(TextureCli, CollectionScopesAndMemoryBudgets) {
  REQUIRE_IMAGES(img);
  TempDir dir;
  const std::string g = (dir.path() / "gallery").string();
  auto r =
      run_prism({"texture", "enroll", "--gallery", g, "--collection", "lot-1", img + "/box.png", img + "/graf1.png"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_prism({"texture", "enroll", "--gallery", g, "--collection", "lot-2", img + "/baboon.jpg"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string query = img + "/box_in_scene.png";
  r = run_prism({"texture", "search", "--gallery", g, "--device", "cpu", "--collection", "lot-2", query});
  EXPECT_EQ(r.exit_code, 1) << r.output;  // box is not in lot-2
  EXPECT_NE(r.output.find("not identified"), std::string::npos) << r.output;
  r = run_prism({"texture", "search", "--gallery", g, "--device", "cpu", "--collection", "lot-2", "--collection",
                 "lot-1", query});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("box_in_scene.png: box ("), std::string::npos) << r.output;
  // Two products' worth of host memory (98,304 bytes each) for three: refused naming the budget.
  r = run_prism({"texture", "search", "--gallery", g, "--device", "cpu", "--host-memory", "196608", query});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("host budget"), std::string::npos) << r.output;
  r = run_prism({"texture", "search", "--gallery", g, "--device", "cpu", "--host-memory", "12Q", query});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--host-memory takes a size"), std::string::npos) << r.output;
  // Through the host tier's digests (every product is in host memory on the CPU): the best digest slot,
  // holding all three products at 256 rows each, is re-matched; bad digest settings name the option.
  r = run_prism({"texture", "search", "--gallery", g, "--device", "cpu", "--digest-rows", "256", "--digest-candidates",
                 "1", query});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("box_in_scene.png: box ("), std::string::npos) << r.output;
  const std::string kept = r.output;
  r = run_prism({"texture", "search", "--gallery", g, "--device", "cpu", "--digest-rows", "256", "--digest-candidates",
                 "1", "--stream-digests", query});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, kept) << "streamed digests answer as kept ones";
  r = run_prism({"texture", "search", "--gallery", g, "--device", "cpu", "--stream-digests", query});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--stream-digests needs --digest-rows"), std::string::npos) << r.output;
  r = run_prism({"texture", "search", "--gallery", g, "--device", "cpu", "--digest-rows", "100", query});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--digest-rows"), std::string::npos) << r.output;
  r = run_prism({"texture", "search", "--gallery", g, "--device", "cpu", "--digest-candidates", "4", query});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--digest-candidates needs --digest-rows"), std::string::npos) << r.output;
  r = run_prism({"texture", "stats", "--gallery", g, "--device", "cpu", "--host-memory", "196608", "--json"});
  EXPECT_NE(r.output.find("\"gpu_products\":0,\"host_products\":2,\"gpu_capacity\":0,\"host_capacity\":2,"
                          "\"unplaced\":1"),
            std::string::npos)
      << r.output;
}

TEST(TextureCli, BadInputGetsClearErrors) {
  REQUIRE_IMAGES(img);
  TempDir dir;
  const std::string g = (dir.path() / "gallery").string();
  auto r = run_prism({"texture", "search", "--gallery", g, img + "/box.png"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("no such gallery directory"), std::string::npos) << r.output;
  r = run_prism({"texture", "enroll", "--gallery", g, (dir.path() / "missing.png").string()});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("missing.png"), std::string::npos) << r.output;
  const std::string notimage = dir.write("notimage.png", "this is text");
  r = run_prism({"texture", "enroll", "--gallery", g, notimage});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("notimage.png"), std::string::npos) << r.output;
  const std::string list = dir.write("list.txt", "ok1 " + img + "/box.png\nbad/id " + img + "/box.png\n");
  r = run_prism({"texture", "enroll", "--gallery", g, "--list", list});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("list.txt:2: invalid product id 'bad/id'"), std::string::npos) << r.output;
  r = run_prism({"texture", "search", "--gallery", g, "--device", "gpu", img + "/box.png"});
  EXPECT_NE(r.output.find("--device takes auto, cpu or cuda"), std::string::npos) << r.output;
  r = run_prism({"texture", "frobnicate", "--gallery", g});
  EXPECT_NE(r.output.find("unknown subcommand 'frobnicate'"), std::string::npos) << r.output;
  // A corrupt entry is refused by name.
  r = run_prism({"texture", "enroll", "--gallery", g, img + "/box.png"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path entry = fs::path(g) / "entries" / "box.tex";
  fs::resize_file(entry, fs::file_size(entry) - 100);
  fs::remove(fs::path(g) / "pack.log");  // else its intact copy of the entry is read
  r = run_prism({"texture", "list", "--gallery", g});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find(entry.string() + ": corrupt gallery entry"), std::string::npos) << r.output;
}

// enroll --gallery pointed at a folder of other files refuses it and leaves it as it was.
TEST(TextureCli, EnrolRefusesAFolderThatIsNotEmptyAndNotAGallery) {
  TempDir dir;
  const fs::path g = dir.path() / "photos";
  fs::create_directory(g);
  { std::ofstream(g / "holiday.jpg") << "not mine to touch"; }
  const std::string image = dir.write("box.png", "the folder is refused before any image is read");
  const auto r = run_prism({"texture", "enroll", "--gallery", g.string(), image});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(g.string() + ": not a Prism texture gallery and not empty; choose a new or empty folder"),
            std::string::npos)
      << r.output;
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(g)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"holiday.jpg"});
  std::ifstream in(g / "holiday.jpg");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "not mine to touch");
}

// A w x h PNG of one grey value, written by hand (one stored deflate block: small images only).
std::string grey_png(int w, int h, uint8_t value) {
  auto be32 = [](std::string& s, uint32_t v) {
    for (int i = 3; i >= 0; --i) s += char(v >> (8 * i));
  };
  std::string png = "\x89PNG\r\n\x1a\n";
  auto chunk = [&](const char* type, const std::string& data) {
    be32(png, uint32_t(data.size()));
    const std::string body = type + data;
    png += body;
    be32(png, crc32(reinterpret_cast<const uint8_t*>(body.data()), body.size()));
  };
  std::string ihdr;
  be32(ihdr, uint32_t(w));
  be32(ihdr, uint32_t(h));
  ihdr += std::string("\x08\x00\x00\x00\x00", 5);  // 8-bit grey, no interlace
  std::string raw;
  for (int y = 0; y < h; ++y) raw += '\0' + std::string(size_t(w), char(value));  // filter 0 per row
  const uint16_t len = uint16_t(raw.size());
  std::string z = "\x78\x01\x01";
  z += {char(len & 0xff), char(len >> 8), char(~len & 0xff), char((~len >> 8) & 0xff)};
  z += raw;
  uint32_t a = 1, b = 0;
  for (unsigned char c : raw) a = (a + c) % 65521, b = (b + a) % 65521;
  be32(z, (b << 16) | a);
  chunk("IHDR", ihdr);
  chunk("IDAT", z);
  chunk("IEND", "");
  return png;
}

// A flat or 1x1 image has no features and could never be identified: enrol and
// update refuse it, naming the file and the count, and the gallery is unchanged.
TEST(TextureCli, FlatAndTinyImagesAreRefused) {
  REQUIRE_IMAGES(img);
  TempDir dir;
  const std::string g = (dir.path() / "gallery").string();
  const std::string flat = dir.write("flat.png", grey_png(64, 64, 128));
  const std::string tiny = dir.write("tiny.png", grey_png(1, 1, 200));
  for (const std::string& image : {flat, tiny}) {
    auto r = run_prism({"texture", "enroll", "--gallery", g, image});
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find(image + ": 0 features"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("enrolled 0 of 1"), std::string::npos) << r.output;
  }
  auto r = run_prism({"texture", "enroll", "--gallery", g, "--id", "box", img + "/box.png"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_prism({"texture", "update", "--gallery", g, "--id", "box", flat});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(flat + ": 0 features"), std::string::npos) << r.output;
  r = run_prism({"texture", "list", "--gallery", g, "--json"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("/box.png\"}"), std::string::npos) << r.output;  // the old texture is kept
  EXPECT_EQ(r.output.find("flat"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("tiny"), std::string::npos) << r.output;
}

// Item 12: a damaged entry makes list refuse the gallery with the repair, and delete and update
// (which do not read the entries) repair it.
TEST(TextureCli, ADamagedEntryCanBeDeletedOrUpdated) {
  REQUIRE_IMAGES(img);
  TempDir dir;
  const std::string g = (dir.path() / "gallery").string();
  auto r = run_prism({"texture", "enroll", "--gallery", g, img + "/box.png", img + "/graf1.png"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path entry = fs::path(g) / "entries" / "box.tex";
  auto damage = [&] {  // the entry file and the pack's copy of it
    fs::resize_file(entry, 20);
    fs::remove(fs::path(g) / "pack.log");
  };
  damage();
  r = run_prism({"texture", "list", "--gallery", g});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(entry.string() + ": corrupt gallery entry"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("prism texture delete --gallery " + g + " box"), std::string::npos) << r.output;
  r = run_prism({"texture", "update", "--gallery", g, "--id", "box", img + "/box.png"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = run_prism({"texture", "list", "--gallery", g});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("box "), std::string::npos) << r.output;
  damage();
  r = run_prism({"texture", "delete", "--gallery", g, "box"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = run_prism({"texture", "list", "--gallery", g});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("box"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("graf1"), std::string::npos) << r.output;
}

// Starts prism with `args`, returns its pid and a pipe reading its stdout.
pid_t spawn_prism(const std::vector<std::string>& args, int& out_fd) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    const int devnull = ::open("/dev/null", O_WRONLY);
    dup2(devnull, STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> argv{const_cast<char*>(PRISM_EXE)};
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(PRISM_EXE, argv.data());
    _exit(127);
  }
  close(fds[1]);
  out_fd = fds[0];
  return pid;
}

// Reads stdout lines until `acks` lines containing `key` arrived (or EOF), waits `delay_us`, then
// SIGKILLs the writer. Returns the acknowledged ids.
std::set<std::string> kill_after(pid_t pid, int fd, const std::string& key, int acks, int delay_us) {
  std::set<std::string> acked;
  std::string buffer;
  char chunk[4096];
  while (int(acked.size()) < acks) {
    const ssize_t n = read(fd, chunk, sizeof chunk);
    if (n <= 0) break;
    buffer.append(chunk, size_t(n));
    size_t nl;
    while ((nl = buffer.find('\n')) != std::string::npos) {
      const std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      const std::string prefix = "{\"" + key + "\":\"";
      if (line.rfind(prefix, 0) == 0)
        acked.insert(line.substr(prefix.size(), line.find('"', prefix.size()) - prefix.size()));
    }
  }
  std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  // Lines flushed before the kill are acknowledged too.
  for (ssize_t n; (n = read(fd, chunk, sizeof chunk)) > 0;) buffer.append(chunk, size_t(n));
  std::istringstream rest(buffer);
  for (std::string line; std::getline(rest, line);) {
    const std::string prefix = "{\"" + key + "\":\"";
    if (line.rfind(prefix, 0) == 0 && line.find('}') != std::string::npos)
      acked.insert(line.substr(prefix.size(), line.find('"', prefix.size()) - prefix.size()));
  }
  close(fd);
  return acked;
}

TEST(TextureCli, KilledWritersLoseNothingAcknowledgedAndCorruptNothing) {
  REQUIRE_IMAGES(img);
  TempDir dir;
  const std::string g = (dir.path() / "gallery").string();
  // 60 products from 6 small photos (a thumbnail-sized enrolment keeps the test short).
  const std::vector<std::string> photos{"box.png",    "smarties.png",     "apple.jpg",
                                        "orange.jpg", "box_in_scene.png", "messi5.jpg"};
  std::ostringstream list;
  std::vector<std::string> ids;
  for (int i = 0; i < 60; ++i) {
    ids.push_back("p" + std::to_string(i));
    list << ids.back() << " " << img << "/" << photos[i % photos.size()] << "\n";
  }
  const std::string list_file = dir.write("list.txt", list.str());
  std::mt19937 rng(std::random_device{}());
  std::set<std::string> acknowledged;
  for (int round = 0; round < 4; ++round) {
    int fd = -1;
    const pid_t pid = spawn_prism({"texture", "enroll", "--gallery", g, "--json", "--update", "--list", list_file}, fd);
    ASSERT_GT(pid, 0);
    const std::set<std::string> acked = kill_after(pid, fd, "enrolled", 3 + int(rng() % 12), int(rng() % 3000));
    acknowledged.insert(acked.begin(), acked.end());
    const texture::Gallery gallery = texture::Gallery::open(g);  // throws on any corrupt entry
    for (const auto& id : acknowledged) EXPECT_NE(gallery.find(id), nullptr) << "acknowledged " << id << " lost";
    for (const auto& e : gallery.entries()) {
      EXPECT_GT(e.features.count(), 0) << e.id;
      EXPECT_TRUE(std::find(ids.begin(), ids.end(), e.id) != ids.end()) << e.id;
    }
  }
  // A killed deleter: what it acknowledged is gone, the rest is intact.
  std::vector<std::string> del{"delete", "--gallery", g, "--json"};
  for (const auto& id : acknowledged) del.push_back(id);
  int fd = -1;
  const pid_t pid = spawn_prism(del, fd);
  const std::set<std::string> deleted = kill_after(pid, fd, "deleted", int(acknowledged.size()) / 2, int(rng() % 500));
  const texture::Gallery after = texture::Gallery::open(g);
  for (const auto& id : deleted) EXPECT_EQ(after.find(id), nullptr) << id;
  // Finishing the enrolment afterwards completes the gallery.
  const auto r = run_prism({"texture", "enroll", "--gallery", g, "--update", "--list", list_file});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(texture::Gallery::open(g).entries().size(), ids.size());
}

}  // namespace
}  // namespace prism
