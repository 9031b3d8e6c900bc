// Bad input to the prism CLI, one table per command (issue 19): each row is an argv and the files it
// reads, with the exit status and a substring of the output it must give. test::check_cli_case runs
// a row in its own folder within a time bound and fails it on a signal, a hang, another status or a
// GLib CRITICAL/WARNING. Rows already tested in prism_cli_test, texture_cli_test, bow_cli_test and
// config_loader_test are not repeated here; DEVELOPERS.md ("Bad input") counts the rows.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "bad_input.h"
#include "cli_support.h"

namespace prism {
namespace {

using test::CliCase;
using test::fifo;
using test::folder;
using test::png_declaring;
using test::symlink_to;
using test::text_file;

void check_table(const std::vector<CliCase>& table) {
  for (const CliCase& c : table) EXPECT_EQ(test::check_cli_case(c), "");
}

// A config that runs: CONFIG_TAIL is appended (more elements, or a replaced links list).
const std::string kConfig = R"(elements:
  src: {element: videotestsrc, properties: {num-buffers: 2}}
  sink: {element: fakesink}
links: [[src, sink]]
)";
CliCase run_case(const std::string& name, const std::string& yaml, int status, const std::string& output,
                 std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"run", "c.yaml"};
  args.insert(args.end(), extra.begin(), extra.end());
  return {name, args, {text_file("c.yaml", yaml)}, status, output};
}

// ---- prism run ----------------------------------------------------------------------------------------------

const std::vector<CliCase> kRun = {
    run_case("a good config runs", kConfig, 0, ""),
    {"config is a directory", {"run", "c.yaml"}, {folder("c.yaml")}, 2, "c.yaml: error: the config is not a regular"},
    {"config is a FIFO", {"run", "c.yaml"}, {fifo("c.yaml")}, 2, "c.yaml: error: the config is not a regular file"},
    {"config is /dev/zero",
     {"run", "c.yaml"},
     {symlink_to("c.yaml", "/dev/zero")},
     2,
     "c.yaml: error: the config is not a regular file"},
    run_case("config is empty", "", 2, "c.yaml"),
    run_case("config is a YAML list", "- a\n- b\n", 2, "c.yaml:1"),
    run_case("unclosed flow map", "elements: {src: {element: videotestsrc}\n", 2, "c.yaml:"),
    run_case("tab indentation", "elements:\n\tsrc: {element: videotestsrc}\n", 2, "c.yaml:2"),
    run_case("not UTF-8", "elements:\n  src: {element: \"caf\xe9\"}\n", 2, "c.yaml:2"),
    run_case("unknown element",
             "elements:\n  src: {element: nosuchelement}\n  sink: {element: fakesink}\nlinks: [[src, sink]]\n", 2,
             "nosuchelement"),
    run_case("caps with an invalid feature (found by the config fuzzer: a GStreamer-WARNING)",
             "elements:\n  src: {element: videotestsrc}\n  sink: {element: fakesink}\n"
             "links: [[src, {caps: \"video/x-raw(format=RGBA)\"}, sink]]\n",
             2, "'format=RGBA' is not a caps feature"),
    run_case("caps whose media type starts with a digit (found by the config fuzzer: a GStreamer-CRITICAL)",
             "elements:\n  src: {element: videotestsrc}\n  sink: {element: fakesink}\n"
             "links: [[src, {caps: \"0video/x-raw\"}, sink]]\n",
             2, "c.yaml:4:22: error: invalid caps '0video/x-raw'"),
    run_case("caps with a nested structure named by a digit",
             "elements:\n  src: {element: videotestsrc}\n  sink: {element: fakesink}\n"
             "links: [[src, {caps: 'video/x-raw,a=(structure)\"9\"'}, sink]]\n",
             2, "c.yaml:4:22: error: invalid caps"),
    run_case("a caps property starting with an underscore",
             "elements:\n  src: {element: videotestsrc}\n  f: {element: capsfilter, properties: {caps: _x/y}}\n"
             "  sink: {element: fakesink}\nlinks: [[src, f, sink]]\n",
             2, "caps"),
    run_case("property value not a number",
             "elements:\n  src: {element: videotestsrc, properties: {num-buffers: many}}\n  sink: {element: fakesink}\n"
             "links: [[src, sink]]\n",
             2, "num-buffers"),
    run_case(
        "property value out of range",
        "elements:\n  src: {element: videotestsrc, properties: {num-buffers: 1e100}}\n  sink: {element: fakesink}\n"
        "links: [[src, sink]]\n",
        2, "num-buffers"),
    run_case("enum value unknown",
             "elements:\n  src: {element: videotestsrc, properties: {pattern: nope}}\n  sink: {element: fakesink}\n"
             "links: [[src, sink]]\n",
             2, "pattern"),
    run_case("link to a pad that does not exist",
             "elements:\n  src: {element: videotestsrc}\n  sink: {element: fakesink}\n"
             "links: [[src.nopad, sink]]\n",
             2, "nopad"),
    run_case("--set of an unknown property", kConfig, 2, "nosuch", {"--set", "src.nosuch=1"}),
    run_case("--set of a bad value", kConfig, 2, "num-buffers", {"--set", "src.num-buffers=x"}),
    run_case("--set of an unknown element", kConfig, 2, "nowhere", {"--set", "nowhere.num-buffers=1"}),
    run_case("--set with an empty name", kConfig, 2, "--set", {"--set", "=1"}),
    run_case("--timeout negative", kConfig, 2, "--timeout", {"--timeout", "-1"}),
    run_case("--timeout NaN", kConfig, 2, "--timeout", {"--timeout", "nan"}),
    run_case("--grace negative", kConfig, 2, "--grace", {"--grace", "-1"}),
    run_case("--results without a value", kConfig, 2, "--results needs a FILE", {"--results"}),
    run_case("--results empty", kConfig, 2, "--results needs a FILE", {"--results", ""}),
    run_case("--results in a missing folder", kConfig, 2, "--results: results file 'no/r.jsonl': cannot open",
             {"--results", "no/r.jsonl"}),
    {"--results is a directory",
     {"run", "c.yaml", "--results", "r"},
     {text_file("c.yaml", kConfig), folder("r")},
     2,
     "results file 'r': cannot open it for writing: Is a directory"},
    {"--results is a FIFO without a reader",
     {"run", "c.yaml", "--results", "r"},
     {text_file("c.yaml", kConfig), fifo("r")},
     2,
     "results file 'r': cannot open it for writing: No such device"},
    run_case("--results is /dev/full",
             "elements:\n  src: {element: videotestsrc, properties: {num-buffers: 2}}\n"
             "  emd: {element: emdtracker, properties: {device: cpu, target: \"1,1,1,1,1,1,1,1,1,1,1\"}}\n"
             "  sink: {element: fakesink}\nlinks: [[src, {caps: \"video/x-raw,format=GRAY8,width=32,height=24\"}, "
             "emd, sink]]\n",
             1, "prism: error: --results: results file '/dev/full': cannot write", {"--results", "/dev/full"}),
    {"mask declaring 16384x16384 through a config",
     {"run", "c.yaml"},
     {png_declaring("m.png", 16384, 16384),
      text_file("c.yaml",
                "elements:\n"
                "  bg: {element: videotestsrc, properties: {num-buffers: 2}}\n"
                "  ov: {element: videotestsrc, properties: {num-buffers: 2}}\n"
                "  b: {element: poissonblend, properties: {device: cpu, \"overlay_0::mask-location\": "
                "m.png}}\n"
                "  sink: {element: fakesink}\n"
                "links:\n  - [bg, {caps: \"video/x-raw,format=BGR,width=64,height=48\"}, b.sink]\n"
                "  - [ov, {caps: \"video/x-raw,format=BGR,width=16,height=12\"}, b.overlay_0]\n"
                "  - [b, sink]\n")},
     1,
     "16384x16384"},
};

TEST(BadInputCli, Run) { check_table(kRun); }

// ---- prism texture ------------------------------------------------------------------------------------------

std::vector<std::string> texture(const std::string& sub, std::vector<std::string> rest) {
  rest.insert(rest.begin(), {"texture", sub, "--gallery", "g"});
  return rest;
}
// An empty gallery as 'prism texture enroll' leaves it, plus `more` files.
std::vector<test::CaseFile> gallery(std::vector<test::CaseFile> more = {}) {
  more.push_back(text_file("g/gallery.prism", "prism texture gallery, format 1\n"));
  more.push_back(folder("g/entries"));
  return more;
}

const std::vector<CliCase> kTexture = {
    {"enroll an image declaring 100000x100000",
     texture("enroll", {"i.png"}),
     {png_declaring("i.png", 100000, 100000)},
     2,
     "100000x100000"},
    {"enroll an image declaring 16384x16384",
     texture("enroll", {"i.png"}),
     {png_declaring("i.png", 16384, 16384, 2)},
     2,
     "16384x16384"},
    {"enroll a directory", texture("enroll", {"i.png"}), {folder("i.png")}, 2, "i.png"},
    {"enroll a FIFO", texture("enroll", {"i.png"}), {fifo("i.png")}, 2, "i.png"},
    {"enroll /dev/zero", texture("enroll", {"i.png"}), {symlink_to("i.png", "/dev/zero")}, 2, "i.png"},
    {"enroll an empty file", texture("enroll", {"i.png"}), {text_file("i.png", "")}, 2, "i.png"},
    {"enroll --list that is a FIFO",
     texture("enroll", {"--list", "l.txt"}),
     {fifo("l.txt")},
     2,
     "l.txt: not a regular file"},
    {"enroll with an id holding '/'",
     texture("enroll", {"--id", "a/b", "i.png"}),
     {png_declaring("i.png", 8, 8)},
     2,
     "a/b"},
    {"enroll --list that does not exist", texture("enroll", {"--list", "l.txt"}), {}, 2, "l.txt"},
    {"search a gallery that is a file", texture("search", {"i.png"}), {text_file("g", "x")}, 2, "g"},
    {"search an empty gallery", texture("search", {"i.png"}), gallery({png_declaring("i.png", 100000, 100000)}), 2,
     "100000x100000"},
    {"search with --min-significance NaN", texture("search", {"--min-significance", "nan", "i.png"}), gallery(), 2,
     "--min-significance"},
    {"search with --min-significance negative", texture("search", {"--min-significance", "-1", "i.png"}), gallery(), 2,
     "--min-significance"},
    {"search with --top 0", texture("search", {"--top", "0", "i.png"}), gallery(), 2, "--top"},
    {"search with --shortlist 0", texture("search", {"--shortlist", "0", "i.png"}), gallery(), 2, "--shortlist"},
    {"search with --ratio 2", texture("search", {"--ratio", "2", "i.png"}), gallery(), 2, "--ratio"},
    {"search with --min-inliers x", texture("search", {"--min-inliers", "x", "i.png"}), gallery(), 2, "--min-inliers"},
    {"verify without --id", texture("verify", {"i.png"}), gallery(), 2, "--id"},
    {"verify an id not enrolled", texture("verify", {"--id", "nobody", "i.png"}),
     gallery({png_declaring("i.png", 8, 8)}), 2, "nobody"},
    {"delete an id not enrolled", texture("delete", {"nobody"}), gallery(), 2, "nobody"},
    {"list a folder that is not a gallery", texture("list", {}), {text_file("g/notes.txt", "x")}, 2, "gallery.prism"},
    {"list with an entry that is a FIFO", texture("list", {}), gallery({fifo("g/entries/a.tex")}), 2, "a.tex"},
    {"stats with an empty entry", texture("stats", {}), gallery({text_file("g/entries/a.tex", "")}), 2, "a.tex"},
    {"list without --gallery", {"texture", "list"}, {}, 2, "--gallery"},
    {"enroll with an unknown --normalise",
     texture("enroll", {"--normalise", "retinex", "i.png"}),
     {png_declaring("i.png", 8, 8)},
     2,
     "--normalise: unknown normalisation 'retinex'"},
    {"enroll with --normalise clahe-0-8",
     texture("enroll", {"--normalise", "clahe-0-8", "i.png"}),
     {png_declaring("i.png", 8, 8)},
     2,
     "unknown normalisation 'clahe-0-8'"},
    {"search with a --normalise the gallery does not record", texture("search", {"--normalise", "clahe-2-8", "i.png"}),
     gallery({png_declaring("i.png", 8, 8)}), 2, "records normalisation none"},
    {"search a gallery recording an unknown normalisation",
     texture("search", {"i.png"}),
     {text_file("g/gallery.prism", "prism texture gallery, format 3\nnormalise retinex\n"), folder("g/entries"),
      png_declaring("i.png", 8, 8)},
     2,
     "gallery.prism:2: unknown normalisation 'retinex'"},
};

TEST(BadInputCli, Texture) { check_table(kTexture); }

// ---- prism bow ----------------------------------------------------------------------------------------------

std::vector<std::string> classify(const std::string& model, const std::string& image) {
  return {"bow", "classify", "--model", model, image};
}

const std::vector<CliCase> kBow = {
    {"classify with a model that is a directory", classify("m", "i.png"), {folder("m")}, 2, "m"},
    {"classify with a model that is a FIFO", classify("m", "i.png"), {fifo("m")}, 2, "m"},
    {"classify with a model that is /dev/zero", classify("m", "i.png"), {symlink_to("m", "/dev/zero")}, 2, "m"},
    {"classify with an empty model", classify("m", "i.png"), {text_file("m", "")}, 2, "m"},
    {"train with a --train list that is a FIFO",
     {"bow", "train", "--data", ".", "--train", "t.txt", "--out", "m"},
     {fifo("t.txt")},
     2,
     "t.txt: not a regular file"},
    {"classify with only the magic", classify("m", "i.png"), {text_file("m", "PRISMBOW")}, 2, "m"},
    {"train with a missing --data",
     {"bow", "train", "--data", "nodir", "--train", "t.txt", "--out", "m"},
     {text_file("t.txt", "a/x.jpg\nb/y.jpg\n")},
     2,
     "nodir"},
    {"train with an empty list",
     {"bow", "train", "--data", ".", "--train", "t.txt", "--out", "m"},
     {text_file("t.txt", "")},
     2,
     "t.txt"},
    {"train with an even filter size", {"bow", "train", "--sizes", "3,4"}, {}, 2, "--sizes"},
    {"train with --k x", {"bow", "train", "--k", "x"}, {}, 2, "--k"},
    {"train with --svm-c NaN", {"bow", "train", "--svm-c", "nan"}, {}, 2, "--svm-c"},
    {"train with --levels -1", {"bow", "train", "--levels", "-1"}, {}, 2, "--levels"},
    {"classify without --model", {"bow", "classify", "i.png"}, {}, 2, "--model"},
    {"unknown bow subcommand", {"bow", "frobnicate"}, {}, 2, "frobnicate"},
};

TEST(BadInputCli, Bow) { check_table(kBow); }

// ---- prism inspect ------------------------------------------------------------------------------------------

const std::vector<CliCase> kInspect = {
    {"inspect with an argument", {"inspect", "poissonblend"}, {}, 2, "unexpected argument 'poissonblend'"},
    {"inspect with an unknown option", {"inspect", "--bogus"}, {}, 2, "--bogus"},
};

TEST(BadInputCli, Inspect) { check_table(kInspect); }

}  // namespace
}  // namespace prism
