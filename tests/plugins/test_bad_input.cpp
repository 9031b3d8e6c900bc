// Bad input, one table per element: each row is a launch line and the files it reads,
// and either a substring of the clear error it must end with (naming the property, pad, file or
// field) or "" for a run to EOS. prism::test::check_launch_case runs a row within a time bound and
// fails it on a crash, a hang, another error, or any GLib CRITICAL or WARNING logged meanwhile.
// Cases already tested beside their element (test_poissonblend, test_emdtracker, test_tensor,
// test_textureid, test_bowclassify, test_results) are not repeated here. DEVELOPERS.md ("Bad input") counts the rows.
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bad_input.h"

namespace prism {
namespace {

using test::CaseFile;
using test::fifo;
using test::folder;
using test::LaunchCase;
using test::png_declaring;
using test::symlink_to;
using test::text_file;

class BadInput : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { gst_init(nullptr, nullptr); }
};

void check_table(const std::vector<LaunchCase>& table) {
  for (const LaunchCase& c : table) EXPECT_EQ(test::check_launch_case(c), "");
}

// A name that is not UTF-8 (Latin-1 "é"): file names are bytes on Linux.
const std::string kLatin1 = "caf\xe9";

// ---- poissonblend ------------------------------------------------------------------------------------------

const std::string kBg = "videotestsrc num-buffers=2 ! video/x-raw,format=BGR,width=64,height=48 ! ";
const std::string kOv = "videotestsrc num-buffers=2 pattern=ball ! video/x-raw,format=BGRA,width=16,height=12 ! ";
// poissonblend with overlay_0 given PAD_PROPS, a 64x48 background and a 16x12 BGRA overlay.
std::string blend(const std::string& pad_props) {
  return "poissonblend name=b device=cpu " + pad_props + " ! fakesink " + kBg + "b.sink " + kOv + "b.overlay_0";
}
std::string mask(const std::string& file) { return blend("overlay_0::mask-location=\"@DIR@/" + file + "\""); }

const std::vector<LaunchCase> kPoissonBlend = {
    {"mask is a directory", mask("m.png"), {folder("m.png")}, "not a regular file"},
    {"mask is a FIFO", mask("m.png"), {fifo("m.png")}, "not a regular file"},
    {"mask is /dev/zero", mask("m.png"), {symlink_to("m.png", "/dev/zero")}, "not a regular file"},
    {"mask is empty", mask("m.png"), {text_file("m.png", "")}, "m.png"},
    {"mask is truncated", mask("m.png"), {text_file("m.png", "\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR")}, "m.png"},
    {"mask declares 16384x16384", mask("m.png"), {png_declaring("m.png", 16384, 16384)}, "16384x16384"},
    {"mask declares 0 rows", mask("m.png"), {png_declaring("m.png", 16, 0)}, "m.png"},
    {"mask has a non-UTF-8 name", blend(""), {}, "overlay_0", {{"b.overlay_0", "mask-location", "@DIR@/" + kLatin1}}},
    {"xpos at INT_MAX", blend("overlay_0::xpos=2147483647 overlay_0::ypos=2147483647"), {}, ""},
    {"xpos at INT_MIN", blend("overlay_0::xpos=-2147483648 overlay_0::ypos=-2147483648"), {}, ""},
    {"overlay larger than the background",
     "poissonblend name=b device=cpu overlay_0::xpos=32 overlay_0::ypos=24 ! fakesink " + kBg +
         "b.sink videotestsrc num-buffers=2 ! video/x-raw,format=BGRA,width=200,height=150 ! b.overlay_0",
     {},
     ""},
    {"background in a format it does not take",
     "videotestsrc num-buffers=1 ! video/x-raw,format=GRAY16_LE,width=64,height=48 ! poissonblend device=cpu ! "
     "fakesink",
     {},
     "can't handle caps"},
    {"1x1 background and overlay",
     "poissonblend name=b device=cpu ! fakesink videotestsrc num-buffers=2 ! video/x-raw,format=BGR,width=1,height=1 "
     "! b.sink videotestsrc num-buffers=2 ! video/x-raw,format=BGRA,width=1,height=1 ! b.overlay_0",
     {},
     ""},
    // background-timeout is short here (the default, 30 s, would only slow the row): the row is about the error.
    {"sink (the background) unlinked while an overlay has data: an error naming it after background-timeout",
     "poissonblend name=b device=cpu background-timeout=500 ! fakesink videotestsrc num-buffers=5 ! "
     "video/x-raw,format=BGRA ! b.overlay_0",
     {},
     "pad 'sink' (the background) is not linked"},
    {"still background at framerate 0/1 through jpegdec",
     "videotestsrc num-buffers=1 ! video/x-raw,width=64,height=48 ! jpegenc ! jpegdec ! videoconvert ! "
     "video/x-raw,format=BGR ! poissonblend device=cpu ! fakesink",
     {},
     ""},
};

TEST_F(BadInput, PoissonBlend) { check_table(kPoissonBlend); }

// ---- emdtracker ---------------------------------------------------------------------------------------------

const std::string kVideo = "videotestsrc num-buffers=2 ! video/x-raw,format=I420,width=32,height=24 ! ";
std::string tracker(const std::string& props) { return kVideo + "emdtracker device=cpu " + props + " ! fakesink"; }
const std::string kTarget = "target=\"1,1,1,1,1,1,1,1,1,1,1\" ";
const std::string kMatrix4 = "bins=4 target=\"1,1,1,1\" ground-distance=matrix ";

const std::vector<LaunchCase> kEmdTracker = {
    {"target-rect with negative size", tracker("target-rect=2,2,-5,-5"), {}, "target-rect"},
    {"target-rect of zero size", tracker("target-rect=2,2,0,0"), {}, "target-rect"},
    {"target-rect partly outside the frame is clipped", tracker("target-rect=30,20,10,10"), {}, ""},
    {"target-rect empty", tracker("target-rect=\"\""), {}, "target"},
    {"target-rect of NaN", tracker("target-rect=nan,nan,4,4"), {}, "target-rect"},
    {"target-rect of huge numbers", tracker("target-rect=0,0,1e30,1e30"), {}, "target-rect"},
    {"target-location is a directory", tracker("target-location=@DIR@/t"), {folder("t")}, "target-location"},
    {"target-location is a FIFO", tracker("target-location=@DIR@/t"), {fifo("t")}, "not a regular file"},
    {"target-location is /dev/zero",
     tracker("target-location=@DIR@/t"),
     {symlink_to("t", "/dev/zero")},
     "not a regular file"},
    {"target-location is empty",
     tracker("target-location=@DIR@/t"),
     {text_file("t", "")},
     "property 'target-location': "},
    {"target-location holds only spaces",
     tracker("target-location=@DIR@/t"),
     {text_file("t", " \n\n")},
     "holds no numbers"},
    {"target of only spaces", tracker("target=\"  \""), {}, "property 'target': '  ' holds no numbers"},
    {"target-location holds NaN",
     tracker("target-location=@DIR@/t"),
     {text_file("t", "1 1 1 1 1 nan 1 1 1 1 1\n")},
     "target"},
    {"target with a negative bin", tracker("target=\"1,1,1,1,1,-1,1,1,1,1,1\""), {}, "target"},
    {"target with an infinite bin", tracker("target=\"1,1,1,1,1,inf,1,1,1,1,1\""), {}, "target"},
    {"ground-distance-location is a FIFO",
     tracker(kMatrix4 + "ground-distance-location=@DIR@/m"),
     {fifo("m")},
     "not a regular file"},
    {"ground-distance-location is /dev/zero",
     tracker(kMatrix4 + "ground-distance-location=@DIR@/m"),
     {symlink_to("m", "/dev/zero")},
     "not a regular file"},
    {"ground-distance-location is a directory",
     tracker(kMatrix4 + "ground-distance-location=@DIR@/m"),
     {folder("m")},
     "ground-distance-location"},
    {"ground-distance-location is empty",
     tracker(kMatrix4 + "ground-distance-location=@DIR@/m"),
     {text_file("m", "")},
     "ground-distance-location"},
    {"ground distance not square",
     tracker(kMatrix4 + "ground-distance-location=@DIR@/m"),
     {text_file("m", "0 1 2 3\n1 0 1 2\n2 1 0 1\n")},
     "ground-distance-location"},
    {"ground distance with a negative cost",
     tracker(kMatrix4 + "ground-distance-location=@DIR@/m"),
     {text_file("m", "0 1 2 3\n1 0 -1 2\n2 1 0 1\n3 2 1 0\n")},
     "ground-distance-location"},
    {"ground distance with NaN",
     tracker(kMatrix4 + "ground-distance-location=@DIR@/m"),
     {text_file("m", "0 1 2 3\n1 0 nan 2\n2 1 0 1\n3 2 1 0\n")},
     "ground-distance-location"},
    {"wavelengths not numbers",
     tracker("bins=3 target=\"1,1,1\" ground-distance=wavelengths wavelengths=\"a,b,c\""),
     {},
     "wavelengths"},
    {"cache-size 0 runs", tracker(kTarget + "cache-size=0"), {}, ""},
    {"window larger than the frame runs", tracker(kTarget + "window=31"), {}, ""},
    {"1x1 frames run",
     "videotestsrc num-buffers=2 ! video/x-raw,format=I420,width=1,height=1 ! emdtracker device=cpu " + kTarget +
         "! fakesink",
     {},
     ""},
};

TEST_F(BadInput, EmdTracker) { check_table(kEmdTracker); }

// ---- spectralize --------------------------------------------------------------------------------------------

const std::vector<LaunchCase> kSpectralize = {
    {"even window", kVideo + "spectralize device=cpu window=4 ! fakesink", {}, "window"},
    {"window larger than the frame runs", kVideo + "spectralize device=cpu window=31 ! fakesink", {}, ""},
    {"1x1 frames run",
     "videotestsrc num-buffers=2 ! video/x-raw,format=GRAY8,width=1,height=1 ! spectralize device=cpu ! fakesink",
     {},
     ""},
    {"tensor input is not video",
     kVideo + "spectralize device=cpu ! spectralize device=cpu ! fakesink",
     {},
     "could not link"},
    {"a format it does not take",
     "videotestsrc num-buffers=1 ! video/x-raw,format=GRAY16_LE,width=32,height=24 ! spectralize device=cpu ! fakesink",
     {},
     "can't handle caps"},
};

TEST_F(BadInput, Spectralize) { check_table(kSpectralize); }

// ---- envisrc ------------------------------------------------------------------------------------------------

// An 8-bit 2x2x1 BSQ cube header with FIELD appended (a later line overrides an earlier one).
std::string header(const std::string& fields) {
  return "ENVI\nsamples = 2\nlines = 2\nbands = 1\ndata type = 1\ninterleave = bsq\n" + fields;
}
LaunchCase cube(const std::string& name, const std::string& hdr, const std::string& data, const std::string& error) {
  return {name, "envisrc location=@DIR@/c.hdr ! fakesink", {text_file("c.hdr", hdr), text_file("c", data)}, error};
}
const std::string k4 = std::string(4, '\x10');

const std::vector<LaunchCase> kEnviSrc = {
    cube("a good cube runs", header(""), k4, ""),
    {"location is a directory", "envisrc location=@DIR@/c.hdr ! fakesink", {folder("c.hdr")}, "not a regular file"},
    {"location unset", "envisrc ! fakesink", {}, "location"},
    {"location with a non-UTF-8 name",
     "envisrc name=e ! fakesink",
     {},
     "location",
     {{"e", "location", "@DIR@/" + kLatin1}}},
    cube("empty header", "", k4, "c.hdr"),
    cube("no ENVI magic", "samples = 2\nlines = 2\nbands = 1\ndata type = 1\n", k4, "c.hdr:1"),
    cube("samples missing", "ENVI\nlines = 2\nbands = 1\ndata type = 1\ninterleave = bsq\n", k4, "samples"),
    cube("samples 0", header("samples = 0\n"), k4, "c.hdr:7"),
    cube("samples negative", header("samples = -2\n"), k4, "c.hdr:7"),
    cube("bands 0", header("bands = 0\n"), k4, "c.hdr:7"),
    cube("bands 1025", header("bands = 1025\n"), k4, "c.hdr:7"),
    cube("lines beyond 32768", header("lines = 32769\n"), k4, "c.hdr:7"),
    cube("complex data type", header("data type = 6\n"), k4, "data type"),
    cube("unknown data type", header("data type = 99\n"), k4, "data type"),
    cube("byte order 2", header("byte order = 2\n"), k4, "byte order"),
    cube("unknown interleave", header("interleave = zig\n"), k4, "interleave"),
    cube("header offset past the data", header("header offset = 100\n"), k4, "c"),
    cube("data one byte short", header(""), std::string(3, '\0'), "c"),
    cube("data file empty", header(""), "", "c"),
    cube("unterminated brace", header("wavelength = { 1, 2\n"), k4, "c.hdr"),
    {"data file missing", "envisrc location=@DIR@/c.hdr ! fakesink", {text_file("c.hdr", header(""))}, "c"},
    {"location is a FIFO", "envisrc location=@DIR@/c.hdr ! fakesink", {fifo("c.hdr")}, "c.hdr: not a regular file"},
    {"location is /dev/zero",
     "envisrc location=@DIR@/c.hdr ! fakesink",
     {symlink_to("c.hdr", "/dev/zero")},
     "c.hdr: not a regular file"},
    {"data file is a FIFO",
     "envisrc location=@DIR@/c.hdr ! fakesink",
     {text_file("c.hdr", header("")), fifo("c")},
     "/c: not a regular file"},
    {"data file is /dev/zero",
     "envisrc location=@DIR@/c.hdr ! fakesink",
     {text_file("c.hdr", header("")), symlink_to("c", "/dev/zero")},
     "/c: not a regular file"},
    {"framerate 0/1 runs (frames without timestamps)",
     "envisrc location=@DIR@/c.hdr framerate=0/1 ! fakesink",
     {text_file("c.hdr", header("")), text_file("c", k4)},
     ""},
    {"framerate 0/1 looped into emdtracker runs",
     "envisrc location=@DIR@/c.hdr framerate=0/1 loop=true ! emdtracker device=cpu target=\"1,1\" ! "
     "fakesink num-buffers=3",
     {text_file("c.hdr", header("bands = 2\n")), text_file("c", k4 + k4)},
     ""},
    {"stop-index before start-index",
     "envisrc location=@DIR@/s_%03d.hdr start-index=1 stop-index=0 ! fakesink",
     {text_file("s_001.hdr", header("")), text_file("s_001", k4)},
     "stop-index"},
};

TEST_F(BadInput, EnviSrc) { check_table(kEnviSrc); }

// ---- textureid ----------------------------------------------------------------------------------------------

const std::string kRgba = "videotestsrc num-buffers=2 ! video/x-raw,format=RGBA,width=32,height=24 ! ";
std::string textureid(const std::string& props) { return kRgba + "textureid name=t " + props + " ! fakesink"; }
// An empty gallery as 'prism texture enroll' leaves it, plus `more` files.
std::vector<CaseFile> gallery(std::vector<CaseFile> more = {}) {
  more.push_back(text_file("g/gallery.prism", "prism texture gallery, format 1\n"));
  more.push_back(folder("g/entries"));
  return more;
}

const std::vector<LaunchCase> kTextureId = {
    {"gallery unset", textureid(""), {}, "gallery"},
    {"gallery is a file", textureid("gallery=@DIR@/g"), {text_file("g", "x")}, "g"},
    {"gallery is an empty folder", textureid("gallery=@DIR@/g"), {folder("g")}, "gallery.prism"},
    {"gallery is a folder of other files",
     textureid("gallery=@DIR@/g"),
     {text_file("g/notes.txt", "x")},
     "gallery.prism"},
    {"gallery marker of another version",
     textureid("gallery=@DIR@/g"),
     {text_file("g/gallery.prism", "prism texture gallery, format 99\n")},
     "g"},
    {"gallery with no entries folder",
     textureid("gallery=@DIR@/g"),
     {text_file("g/gallery.prism", "prism texture gallery, format 1\n")},
     "entries"},
    {"gallery with no entries runs (nothing is identified)", textureid("gallery=@DIR@/g"), gallery(), ""},
    {"entry is a FIFO", textureid("gallery=@DIR@/g"), gallery({fifo("g/entries/a.tex")}), "a.tex"},
    {"entry is /dev/zero", textureid("gallery=@DIR@/g"), gallery({symlink_to("g/entries/a.tex", "/dev/zero")}),
     "a.tex"},
    {"entry is a directory", textureid("gallery=@DIR@/g"), gallery({folder("g/entries/a.tex")}), "a.tex"},
    {"entry is empty", textureid("gallery=@DIR@/g"), gallery({text_file("g/entries/a.tex", "")}), "a.tex"},
    {"entry is truncated", textureid("gallery=@DIR@/g"), gallery({text_file("g/entries/a.tex", "PRISMTEX")}), "a.tex"},
    {"gallery with a non-UTF-8 name", textureid(""), {}, "gallery", {{"t", "gallery", "@DIR@/" + kLatin1}}},
};

TEST_F(BadInput, TextureId) { check_table(kTextureId); }

// ---- bowclassify --------------------------------------------------------------------------------------------

std::string bow(const std::string& props) { return kRgba + "bowclassify name=c " + props + " ! fakesink"; }

const std::vector<LaunchCase> kBowClassify = {
    {"model unset", bow(""), {}, "model"},
    {"model is a directory", bow("model=@DIR@/m"), {folder("m")}, "m"},
    {"model is a FIFO", bow("model=@DIR@/m"), {fifo("m")}, "not a regular file"},
    {"model is /dev/zero", bow("model=@DIR@/m"), {symlink_to("m", "/dev/zero")}, "not a regular file"},
    {"model is empty", bow("model=@DIR@/m"), {text_file("m", "")}, "m"},
    {"model is only the magic", bow("model=@DIR@/m"), {text_file("m", "PRISMBOW")}, "m"},
    {"model with a non-UTF-8 name", bow(""), {}, "model", {{"c", "model", "@DIR@/" + kLatin1}}},
};

TEST_F(BadInput, BowClassify) { check_table(kBowClassify); }

// ---- prismconvert -------------------------------------------------------------------------------------------

std::string convert(const std::string& in, const std::string& out) {
  return "videotestsrc num-buffers=2 ! " + in + " ! prismconvert device=cpu ! " + out + " ! fakesink";
}

const std::vector<LaunchCase> kPrismConvert = {
    {"1x1 I420 to 64x48 RGBA",
     convert("video/x-raw,format=I420,width=1,height=1", "video/x-raw,format=RGBA,width=64,height=48"),
     {},
     ""},
    {"odd-sized NV12 to 1x1 BGR",
     convert("video/x-raw,format=NV12,width=33,height=17", "video/x-raw,format=BGR,width=1,height=1"),
     {},
     ""},
    {"an output format it does not make",
     convert("video/x-raw,format=RGBA,width=32,height=24", "video/x-raw,format=GRAY16_LE"),
     {},
     "can't handle caps"},
    {"an input format it does not take",
     convert("video/x-raw,format=GRAY16_LE,width=32,height=24", "video/x-raw,format=RGBA"),
     {},
     "can't handle caps"},
    {"tensor input",
     "videotestsrc num-buffers=1 ! video/x-raw,format=I420,width=32,height=24 ! spectralize device=cpu ! prismconvert "
     "device=cpu ! fakesink",
     {},
     "could not link"},
};

TEST_F(BadInput, PrismConvert) { check_table(kPrismConvert); }

// ---- prismresults -------------------------------------------------------------------------------------------

std::string results(const std::string& props) {
  return kVideo + "emdtracker device=cpu " + kTarget + "! prismresults name=r " + props + " ! fakesink";
}

const std::vector<LaunchCase> kPrismResults = {
    {"location unset", results(""), {}, "property 'location' is not set"},
    {"location in a missing folder", results("location=@DIR@/no/r.jsonl"), {}, "no/r.jsonl': cannot open"},
    {"location is a directory", results("location=@DIR@/r"), {folder("r")}, "'location': results file"},
    {"location is a FIFO without a reader", results("location=@DIR@/r"), {fifo("r")}, "No such device"},
    {"location is /dev/full", results("location=/dev/full"), {}, "'/dev/full': cannot write"},
    {"location has a non-UTF-8 name", results(""), {}, "", {{"r", "location", "@DIR@/" + kLatin1}}},
    {"location has a non-UTF-8 name in a missing folder",
     results(""),
     {},
     "cannot open",
     {{"r", "location", "@DIR@/" + kLatin1 + "/r.jsonl"}}},
};

TEST_F(BadInput, PrismResults) { check_table(kPrismResults); }

}  // namespace
}  // namespace prism
