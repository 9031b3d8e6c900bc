// Bad input to the prism CLI, one table per command: each row is an argv and the files it
// reads, with the exit status and a substring of the output it must give. test::check_cli_case runs
// a row in its own folder within a time bound and fails it on a signal, a hang, another status or a
// GLib CRITICAL/WARNING. Rows already tested in prism_cli_test, texture_cli_test, bow_cli_test,
// config_loader_test and test_serve_cli are not repeated here; DEVELOPERS.md ("Bad input") counts the rows.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "bad_input.h"
#include "bow/model.h"
#include "bow_scenes.h"
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
    run_case("--control without a value", kConfig, 2, "--control needs HOST:PORT", {"--control"}),
    run_case("--control without a port", kConfig, 2, "--control takes HOST:PORT", {"--control", "127.0.0.1"}),
    run_case("--control port out of range", kConfig, 2, "--control takes HOST:PORT", {"--control", "127.0.0.1:70000"}),
    run_case("--metrics without a host", kConfig, 2, "--metrics takes HOST:PORT", {"--metrics", ":8082"}),
    run_case("--metrics port not a number", kConfig, 2, "--metrics takes HOST:PORT", {"--metrics", "127.0.0.1:http"}),
    run_case("cameras without per-camera", "cameras: [rtsp://127.0.0.1:1/x]\n", 2,
             "c.yaml:1:1: error: 'cameras:' needs 'per-camera:'", {"--control", "127.0.0.1:0"}),
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

// ---- prism texture update, migrate ----------------------------------------------------------------------

const std::vector<CliCase> kTextureUpdate = {
    {"update without --id", texture("update", {"i.png"}), gallery(), 2, "update takes --id ID and one IMAGE"},
    {"update with two images", texture("update", {"--id", "a", "i.png", "j.png"}), gallery(), 2,
     "update takes --id ID and one IMAGE"},
    // Was a warning that the entry is damaged and its collection lost, after decoding the image.
    {"update an id holding '/'", texture("update", {"--id", "a/b", "i.png"}), gallery({fifo("i.png")}), 2,
     "prism texture: error: --id: invalid product id 'a/b'"},
    {"update in a missing gallery",
     texture("update", {"--id", "a", "i.png"}),
     {png_declaring("i.png", 8, 8)},
     2,
     "no such gallery directory"},
    {"update an image that is a FIFO", texture("update", {"--id", "a", "i.png"}), gallery({fifo("i.png")}), 2,
     "i.png: not a regular file (a FIFO)"},
    {"update an image that is /dev/zero", texture("update", {"--id", "a", "i.png"}),
     gallery({symlink_to("i.png", "/dev/zero")}), 2, "i.png: not a regular file"},
    {"update an image declaring 100000x100000", texture("update", {"--id", "a", "i.png"}),
     gallery({png_declaring("i.png", 100000, 100000)}), 2, "100000x100000"},
    {"update with an invalid --collection", texture("update", {"--id", "a", "--collection", "lot/2", "i.png"}),
     gallery(), 2, "--collection: invalid collection 'lot/2'"},
    {"update with a --normalise the gallery does not record",
     texture("update", {"--id", "a", "--normalise", "clahe-2-8", "i.png"}), gallery({png_declaring("i.png", 8, 8)}), 2,
     "records normalisation none"},
};

TEST(BadInputCli, TextureUpdate) { check_table(kTextureUpdate); }

const std::vector<CliCase> kTextureMigrate = {
    {"migrate a missing gallery", texture("migrate", {}), {}, 2, "g: no such gallery directory"},
    {"migrate a gallery that is a file", texture("migrate", {}), {text_file("g", "x")}, 2, "g: not a Prism texture"},
    {"migrate a gallery of a newer format",
     texture("migrate", {}),
     {text_file("g/gallery.prism", "prism texture gallery, format 99\n"), folder("g/entries")},
     2,
     "g/gallery.prism:1: unknown gallery format"},
    {"migrate a gallery without its entries folder",
     texture("migrate", {}),
     {text_file("g/gallery.prism", "prism texture gallery, format 1\n")},
     2,
     "g/entries: missing"},
    {"migrate with an entry that is a FIFO", texture("migrate", {}), gallery({fifo("g/entries/a.tex")}), 2,
     "a.tex: not a regular file (a FIFO)"},
    {"migrate with an entry that is /dev/zero", texture("migrate", {}),
     gallery({symlink_to("g/entries/a.tex", "/dev/zero")}), 2, "a.tex: not a regular file"},
    {"migrate with a truncated entry", texture("migrate", {}), gallery({text_file("g/entries/a.tex", "PRISMTEX")}), 2,
     "a.tex: corrupt gallery entry"},
    // Was ignored: the gallery given as an argument instead of --gallery.
    {"migrate with an argument",
     {"texture", "migrate", "--gallery", "g", "other"},
     gallery(),
     2,
     "migrate takes no argument, not 'other'"},
    {"list with an argument",
     {"texture", "list", "--gallery", "g", "other"},
     gallery(),
     2,
     "list takes no argument, not 'other'"},
};

TEST(BadInputCli, TextureMigrate) { check_table(kTextureMigrate); }

// ---- prism texture serve, shard (refused at start-up: nothing listens, no Redis is needed) --------------------

std::vector<std::string> serve(std::vector<std::string> rest) {
  rest.insert(rest.begin(), {"texture", "serve", "--listen", "127.0.0.1:0"});
  return rest;
}
const std::string kKey = "0123456789abcdef0123";

const std::vector<CliCase> kTextureServe = {
    {"serve with --gallery and --redis",
     serve({"--gallery", "g", "--redis", "redis://127.0.0.1:6379"}),
     {},
     2,
     "give one of --gallery DIR and --redis URL"},
    {"serve with an http:// --redis",
     serve({"--redis", "http://127.0.0.1:6379"}),
     {},
     2,
     "--redis: Redis URL 'http://127.0.0.1:6379': not a redis:// URL"},
    {"serve with a --redis port out of range",
     serve({"--redis", "redis://127.0.0.1:99999"}),
     {},
     2,
     "port '99999' is not in 1..65535"},
    {"serve with a --redis database not a number",
     serve({"--redis", "redis://127.0.0.1:6379/x"}),
     {},
     2,
     "database 'x' is not a number"},
    {"serve with a --redis without a host", serve({"--redis", "redis://"}), {}, 2, "'redis://': no host"},
    {"serve with --listen without a host",
     serve({"--gallery", "g", "--listen", ":8080"}),
     {},
     2,
     "--listen takes HOST:PORT such as 127.0.0.1:8080, not ':8080'"},
    {"serve with a negative --listen port",
     serve({"--gallery", "g", "--listen", "127.0.0.1:-1"}),
     {},
     2,
     "--listen's port takes an integer in 0..65535, not '-1'"},
    {"serve with --max-body 12Q", serve({"--gallery", "g", "--max-body", "12Q"}), {}, 2, "--max-body takes a size"},
    {"serve with --max-pixels 0", serve({"--gallery", "g", "--max-pixels", "0"}), {}, 2, "--max-pixels"},
    {"serve with --deadline beyond 120000",
     serve({"--gallery", "g", "--deadline", "120001"}),
     {},
     2,
     "--deadline takes an integer in 1..120000"},
    {"serve with --device gpu",
     serve({"--gallery", "g", "--device", "gpu"}),
     {},
     2,
     "--device takes auto, cpu or cuda, not 'gpu'"},
    {"serve with an unknown --normalise",
     serve({"--gallery", "g", "--normalise", "retinex"}),
     {},
     2,
     "unknown normalisation 'retinex'"},
    {"serve with --min-significance NaN",
     serve({"--gallery", "g", "--min-significance", "nan"}),
     {},
     2,
     "--min-significance"},
    {"serve with --threads without a value", serve({"--gallery", "g", "--threads"}), {}, 2, "--threads needs a value"},
    {"serve a gallery that is a file", serve({"--gallery", "g"}), {text_file("g", "x")}, 2, "g: not a directory"},
    {"serve a folder of other files",
     serve({"--gallery", "g"}),
     {text_file("g/notes.txt", "x")},
     2,
     "g: not a Prism texture gallery and not empty"},
    {"serve a gallery with an entry that is a FIFO", serve({"--gallery", "g"}), gallery({fifo("g/entries/a.tex")}), 2,
     "a.tex: not a regular file (a FIFO)"},
    {"serve a gallery with a truncated entry", serve({"--gallery", "g"}),
     gallery({text_file("g/entries/a.tex", "PRISMTEX")}), 2, "a.tex: corrupt gallery entry"},
    {"serve with a --normalise the gallery does not record", serve({"--gallery", "g", "--normalise", "clahe-2-8"}),
     gallery(), 2, "the gallery g records normalisation none"},
    // Were read forever (--keys FIFO, /dev/zero) or taken for a file without keys (a directory).
    {"serve with --keys a FIFO", serve({"--gallery", "g", "--keys", "k"}), gallery({fifo("k")}), 2,
     "k: not a regular file (a FIFO)"},
    {"serve with --keys /dev/zero", serve({"--gallery", "g", "--keys", "k"}), gallery({symlink_to("k", "/dev/zero")}),
     2, "k: not a regular file"},
    {"serve with --keys a directory", serve({"--gallery", "g", "--keys", "k"}), gallery({folder("k")}), 2,
     "k: not a regular file (a directory)"},
    {"serve with --keys empty", serve({"--gallery", "g", "--keys", "k"}), gallery({text_file("k", "")}), 2,
     "k: no keys"},
    {"serve with a key too short", serve({"--gallery", "g", "--keys", "k"}), gallery({text_file("k", "short read\n")}),
     2, "k:1: a key is 16..256 characters"},
    {"serve with a key without a role", serve({"--gallery", "g", "--keys", "k"}),
     gallery({text_file("k", "# keys\n" + kKey + " admin\n")}), 2, "k:2: the key's role (read or write)"},
    {"serve with a key listed twice", serve({"--gallery", "g", "--keys", "k"}),
     gallery({text_file("k", kKey + " read\n" + kKey + " write\n")}), 2, "k:2: this key is listed twice"},
};

TEST(BadInputCli, TextureServe) { check_table(kTextureServe); }

// An unreachable Redis (port 1) is retried for ever by a worker, so every row is refused before.
std::vector<std::string> shard(std::vector<std::string> rest) {
  rest.insert(rest.begin(), {"texture", "shard"});
  return rest;
}
const std::vector<std::string> kShard0 = {"--redis", "redis://127.0.0.1:1", "--shard", "0", "--gallery", "g"};
std::vector<std::string> shard0(const std::vector<std::string>& more) {
  std::vector<std::string> args = kShard0;
  args.insert(args.end(), more.begin(), more.end());
  return shard(args);
}

const std::vector<CliCase> kTextureShard = {
    {"shard without --redis",
     shard({"--shard", "0", "--gallery", "g"}),
     {},
     2,
     "--redis URL (or --sentinel HOST:PORT,... --master NAME) is required"},
    {"shard without --shard",
     shard({"--redis", "redis://127.0.0.1:1", "--gallery", "g"}),
     {},
     2,
     "--shard K is required"},
    {"shard without --gallery",
     shard({"--redis", "redis://127.0.0.1:1", "--shard", "0"}),
     {},
     2,
     "--gallery DIR is required"},
    {"shard with --shard not below --shards",
     shard({"--redis", "redis://127.0.0.1:1", "--shard", "3", "--shards", "2", "--gallery", "g"}),
     {},
     2,
     "--shard 3 is not below --shards 2"},
    {"shard with --shard -1",
     shard({"--redis", "redis://127.0.0.1:1", "--shard", "-1", "--gallery", "g"}),
     {},
     2,
     "--shard takes an integer in 0..4095, not '-1'"},
    {"shard with --shards 0", shard0({"--shards", "0"}), {}, 2, "--shards takes an integer in 1..4096, not '0'"},
    {"shard with --shard without a value",
     shard({"--redis", "redis://127.0.0.1:1", "--shard"}),
     {},
     2,
     "--shard needs a value"},
    {"shard with --replica holding '/'", shard0({"--replica", "a/b"}), {}, 2, "--replica: invalid name 'a/b'"},
    {"shard with --readers 0", shard0({"--readers", "0"}), {}, 2, "--readers takes an integer in 1..64, not '0'"},
    {"shard with --device gpu", shard0({"--device", "gpu"}), {}, 2, "--device takes auto, cpu or cuda, not 'gpu'"},
    {"shard with --device cuda:x", shard0({"--device", "cuda:x"}), {}, 2, "--device cuda:N takes an integer"},
    {"shard with --device cuda:64", shard0({"--device", "cuda:64"}), {}, 2, "in 0..63, not '64'"},
    {"shard with an unknown --normalise", shard0({"--normalise", "retinex"}), {}, 2, "unknown normalisation 'retinex'"},
    {"shard with --host-memory 12Q", shard0({"--host-memory", "12Q"}), {}, 2, "--host-memory takes a size"},
    {"shard with an unknown option", shard0({"--bogus"}), {}, 2, "unknown option '--bogus'"},
    {"shard with an http:// --redis",
     shard({"--redis", "http://x:1", "--shard", "0", "--gallery", "g"}),
     {},
     2,
     "--redis: Redis URL 'http://x:1': not a redis:// URL"},
    {"shard with a --redis port 0",
     shard({"--redis", "redis://h:0", "--shard", "0", "--gallery", "g"}),
     {},
     2,
     "port '0' is not in 1..65535"},
    {"shard with a --redis database -1",
     shard({"--redis", "redis://h:1/-1", "--shard", "0", "--gallery", "g"}),
     {},
     2,
     "database '-1' is not a number"},
    {"shard a gallery that is a file", shard0({}), {text_file("g", "x")}, 2, "g: not a directory"},
    {"shard a folder of other files",
     shard0({}),
     {text_file("g/notes.txt", "x")},
     2,
     "g: not a Prism texture gallery and not empty"},
    {"shard a gallery with an entry that is a FIFO", shard0({}), gallery({fifo("g/entries/a.tex")}), 2,
     "a.tex: not a regular file (a FIFO)"},
    {"shard a gallery with an empty entry", shard0({}), gallery({text_file("g/entries/a.tex", "")}), 2,
     "a.tex: corrupt gallery entry"},
};

TEST(BadInputCli, TextureShard) { check_table(kTextureShard); }

// ---- prism bow ----------------------------------------------------------------------------------------------

std::vector<std::string> classify(const std::string& model, const std::string& image) {
  return {"bow", "classify", "--model", model, image};
}

// A small model that loads and classifies (three synthetic scene classes, a dictionary of 8 words),
// so that a row gets past the model to the image.
test::CaseFile small_model(const std::string& name) {
  return {name, [](const std::string& path) {
            std::mt19937 rng(7);
            std::vector<cv::Mat> images;
            std::vector<int> labels;
            for (int i = 0; i < 9; ++i)
              images.push_back(test::bow_scene(rng, i % 3, 48, 32, 0)), labels.push_back(i % 3);
            bow::TrainConfig c;
            c.k = 8;
            c.samples_per_image = 50;
            c.levels = 0;
            c.device = gpu::Device::kCpu;
            bow::Model::train(images, labels, {"h", "v", "b"}, c).save(path);
          }};
}

const std::vector<CliCase> kBow = {
    {"classify an image declaring 100000x100000",
     classify("m", "i.png"),
     {small_model("m"), png_declaring("i.png", 100000, 100000)},
     2,
     "i.png' declares 100000x100000 pixels"},
    {"classify two images declaring 100000x100000 (RGBA, RGB)",
     {"bow", "classify", "--model", "m", "i.png", "j.png"},
     {small_model("m"), png_declaring("i.png", 100000, 100000, 6), png_declaring("j.png", 100000, 100000, 2)},
     2,
     "j.png' declares 100000x100000 pixels"},
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
