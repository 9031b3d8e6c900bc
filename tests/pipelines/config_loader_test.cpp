// Loader and validator tests: good configs, variables, --set, paths, and every kind of bad config
// with its exact FILE:LINE:COLUMN.
#include <gst/gst.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "gst_setup.h"
#include "launch_line.h"
#include "pipeline_config.h"
#include "process.h"
#include "test_support.h"

namespace fs = std::filesystem;

namespace prism {
namespace {

using test::joined;
using test::load_text;
using test::TempDir;

// Asserts that some error is at `line`:`column` of `file` and contains `fragment`.
void expect_error(const std::vector<ConfigError>& errors, const std::string& file, int line, int column,
                  const std::string& fragment) {
  const std::string where = file + ":" + std::to_string(line) + ":" + std::to_string(column);
  for (const auto& e : errors) {
    const std::string text = e.to_string();
    if (text.rfind(where + ": error: ", 0) == 0 && text.find(fragment) != std::string::npos) return;
  }
  ADD_FAILURE() << "expected an error at " << where << " containing \"" << fragment << "\"; got:\n" << joined(errors);
}

const PropertySetting* find_property(const PipelineConfig& config, const std::string& element,
                                     const std::string& property) {
  const ElementSpec* spec = config.find_element(element);
  if (!spec) return nullptr;
  for (const auto& p : spec->properties) {
    if (p.name == property) return &p;
  }
  return nullptr;
}

std::string property(const PipelineConfig& config, const std::string& element, const std::string& name) {
  const PropertySetting* p = find_property(config, element, name);
  return p ? p->value : "<unset>";
}

constexpr char kTeeConfig[] = R"(description: two branches from a tee
variables:
  frames: 10
  size: {width: 320, height: 240}
  out: frames/f-%04d.png
elements:
  src: {element: videotestsrc, properties: {num-buffers: "${frames}", pattern: ball}}
  t: {element: tee}
  q1: {element: queue}
  enc: {element: pngenc}
  sink: {element: multifilesink, properties: {location: "${out}"}}
  q2: {element: queue}
  fake: {element: fakesink, properties: {sync: false}}
links:
  - [src, {caps: "video/x-raw, format=RGB, width=${size.width}, height=${size.height}"}, t, q1, enc, sink]
  - [t, q2, fake]
)";

TEST(PipelineConfig, GoodConfigParses) {
  TempDir dir;
  std::vector<ConfigError> errors;
  const PipelineConfig config = load_text(dir, "tee.yaml", kTeeConfig, errors);
  ASSERT_TRUE(errors.empty()) << joined(errors);
  EXPECT_EQ(config.description, "two branches from a tee");
  ASSERT_EQ(config.elements.size(), 7u);
  EXPECT_EQ(config.elements[0].name, "src");
  EXPECT_EQ(config.elements[0].factory, "videotestsrc");
  EXPECT_EQ(config.elements[0].where.line, 7);
  EXPECT_EQ(config.elements[0].where.column, 3);
  EXPECT_EQ(property(config, "src", "num-buffers"), "10");
  EXPECT_EQ(property(config, "src", "pattern"), "ball");
  ASSERT_EQ(config.chains.size(), 2u);
  ASSERT_EQ(config.chains[0].size(), 6u);
  EXPECT_EQ(config.chains[0][1].kind, LinkItem::Kind::Caps);
  EXPECT_EQ(config.chains[0][1].caps, "video/x-raw,format=RGB,width=320,height=240");
  EXPECT_EQ(config.chains[1][0].element, "t");
}

TEST(PipelineConfig, SetOverridesVariablesAndElementProperties) {
  TempDir dir;
  std::vector<ConfigError> errors;
  const PipelineConfig config = load_text(
      dir, "tee.yaml", kTeeConfig, errors,
      {{"frames", "3"}, {"size.width", "64"}, {"src.pattern", "snow"}, {"src.is-live", "true"}, {"fake.sync", "true"}});
  ASSERT_TRUE(errors.empty()) << joined(errors);
  EXPECT_EQ(property(config, "src", "num-buffers"), "3");
  EXPECT_EQ(property(config, "src", "pattern"), "snow");
  EXPECT_EQ(property(config, "src", "is-live"), "true");  // added
  EXPECT_EQ(property(config, "fake", "sync"), "true");    // replaced
  EXPECT_EQ(config.chains[0][1].caps, "video/x-raw,format=RGB,width=64,height=240");
}

TEST(PipelineConfig, VariablesMayUseVariablesAndEscapes) {
  TempDir dir;
  std::vector<ConfigError> errors;
  const PipelineConfig config = load_text(dir, "v.yaml", R"(variables:
  n: 4
  twice: "${n}${n}"
elements:
  a: {element: fakesrc, properties: {num-buffers: "${twice}"}}
  b: {element: fakesink, properties: {last-message-x: 1}}
links: [[a, b]]
)",
                                          errors);
  expect_error(errors, (dir.path() / "v.yaml").string(), 6, 39, "no property 'last-message-x'");
  EXPECT_EQ(property(config, "a", "num-buffers"), "44");

  errors.clear();
  const PipelineConfig escaped = load_text(dir, "e.yaml", R"(elements:
  a: {element: fakesrc}
  b: {element: filesink, properties: {location: "/tmp/$${literal}"}}
links: [[a, b]]
)",
                                           errors);
  ASSERT_TRUE(errors.empty()) << joined(errors);
  EXPECT_EQ(property(escaped, "b", "location"), "/tmp/${literal}");
}

// `${name + K}` and `${name - K}` (identity's eos-after ends the stream at its Nth
// buffer, so "N frames" is eos-after N + 1); anything else in braces with a space is an error.
TEST(PipelineConfig, WholeNumberVariablesTakeAnOffset) {
  TempDir dir;
  std::vector<ConfigError> errors;
  const PipelineConfig config = load_text(dir, "o.yaml", R"(variables:
  frames: 7
elements:
  a: {element: fakesrc, properties: {num-buffers: "${frames - 2}"}}
  b: {element: identity, properties: {eos-after: "${frames + 1}"}}
  c: {element: fakesink}
links: [[a, b, c]]
)",
                                          errors);
  ASSERT_TRUE(errors.empty()) << joined(errors);
  EXPECT_EQ(property(config, "a", "num-buffers"), "5");
  EXPECT_EQ(property(config, "b", "eos-after"), "8");
  for (const auto& [text, message] : std::vector<std::pair<std::string, std::string>>{
           {"${frames + x}", "is neither a variable nor NAME + K"},
           {"${frames +1}", "undefined variable 'frames +1'"},
           {"${name + 1}", "undefined variable 'name'"},
           {"${label + 1}", "variable 'label' is 'box', not a whole number"}}) {
    errors.clear();
    load_text(dir, "bad.yaml",
              "variables:\n  frames: 7\n  label: box\nelements:\n  a: {element: fakesrc, properties: "
              "{num-buffers: \"" +
                  text + "\"}}\n  b: {element: fakesink}\nlinks: [[a, b]]\n",
              errors);
    ASSERT_FALSE(errors.empty()) << text;
    EXPECT_NE(joined(errors).find(message), std::string::npos) << text << ": " << joined(errors);
  }
}

TEST(PipelineConfig, RelativePathsResolveAgainstTheConfigFolder) {
  TempDir dir;
  TempDir cwd;  // the current directory is not the config's folder
  const std::string path = dir.write("sub/p.yaml", R"(variables:
  out: out/f-%04d.png
elements:
  src: {element: filesrc, properties: {location: in.mp4}}
  d: {element: qtdemux}
  q: {element: queue}
  sink: {element: multifilesink, properties: {location: "${out}"}}
links:
  - [src, d]
  - [d.video_0, q, sink]
)");
  const fs::path base = dir.path() / "sub";
  std::vector<ConfigError> errors;
  const PipelineConfig config = load_pipeline_config(path, {}, errors, cwd.path().string());
  ASSERT_TRUE(errors.empty()) << joined(errors);
  EXPECT_EQ(property(config, "src", "location"), (base / "in.mp4").string());
  EXPECT_EQ(property(config, "sink", "location"), (base / "out/f-%04d.png").string());

  // --set values resolve against the current directory, for variables and properties alike;
  // absolute paths and URIs stay as they are.
  const PipelineConfig set =
      load_pipeline_config(path, {{"out", "o/%d.png"}, {"src.location", "clip.mp4"}}, errors, cwd.path().string());
  ASSERT_TRUE(errors.empty()) << joined(errors);
  EXPECT_EQ(property(set, "sink", "location"), (cwd.path() / "o/%d.png").string());
  EXPECT_EQ(property(set, "src", "location"), (cwd.path() / "clip.mp4").string());
  const PipelineConfig absolute = load_pipeline_config(
      path, {{"out", "file:///x/%d.png"}, {"src.location", "/abs/clip.mp4"}}, errors, cwd.path().string());
  ASSERT_TRUE(errors.empty()) << joined(errors);
  EXPECT_EQ(property(absolute, "sink", "location"), "file:///x/%d.png");
  EXPECT_EQ(property(absolute, "src", "location"), "/abs/clip.mp4");
}

TEST(PipelineConfig, PathTagAndBuiltinVariables) {
  TempDir dir;
  std::vector<ConfigError> errors;
  const PipelineConfig config = load_text(dir, "t.yaml", R"(variables:
  weights: !path nets/w.bin
elements:
  src: {element: videotestsrc, properties: {num-buffers: 1}}
  sink: {element: multifilesink, properties: {location: "${cwd}/out.png", next-file: buffer}}
  f: {element: filesink, properties: {location: "${weights}"}}
  uri: {element: fakesink}
links: [[src, sink], [src, f], [src, uri]]
)",
                                          errors, {});
  ASSERT_TRUE(errors.empty()) << joined(errors);
  EXPECT_EQ(property(config, "sink", "location"), (dir.path() / "out.png").string());
  EXPECT_EQ(property(config, "f", "location"), (dir.path() / "nets/w.bin").string());
}

// ---- bad configs -------------------------------------------------------------------------------

TEST(PipelineConfigErrors, UnknownKeysSuggestTheRightOne) {
  TempDir dir;
  std::vector<ConfigError> errors;
  load_text(dir, "k.yaml", R"(descripton: x
elements:
  src: {element: videotestsrc, propertes: {}}
  sink: {element: fakesink}
lnks: [[src, sink]]
)",
            errors);
  const std::string f = (dir.path() / "k.yaml").string();
  expect_error(errors, f, 1, 1, "unknown key 'descripton'; did you mean 'description'?");
  expect_error(errors, f, 3, 32, "unknown key 'propertes' in element 'src'; did you mean 'properties'?");
  expect_error(errors, f, 5, 1, "unknown key 'lnks'; did you mean 'links'?");
  expect_error(errors, f, 1, 1, "missing 'links:'");
}

TEST(PipelineConfigErrors, UnknownFactoryAndProperties) {
  TempDir dir;
  std::vector<ConfigError> errors;
  load_text(dir, "p.yaml", R"(elements:
  src: {element: videotestsrcc}
  s2: {element: videotestsrc, properties: {num-bufers: 5, name: x}}
  id: {element: identity, properties: {last-message: x}}
  sink: {element: fakesink}
  x: {element: nosuchelementatall}
links: [[src, s2, id, sink, x]]
)",
            errors);
  const std::string f = (dir.path() / "p.yaml").string();
  expect_error(errors, f, 2, 18, "unknown element 'videotestsrcc'; did you mean 'videotestsrc'?");
  expect_error(errors, f, 3, 44,
               "element 's2' (videotestsrc) has no property 'num-bufers'; did you mean 'num-buffers'?");
  expect_error(errors, f, 3, 59, "property 'name' cannot be set");
  expect_error(errors, f, 4, 40, "property 'last-message' of 'id' (identity) is read-only");
  expect_error(errors, f, 6, 16, "unknown element 'nosuchelementatall' (no such factory");
  EXPECT_EQ(errors.size(), 5u) << joined(errors);
}

// Without the Prism plugin a prism* element is refused with a message that says so. This process
// has the plugin (init_gstreamer() scans the build's plugin folder), so the check runs in a child:
// this binary again, only this test, with GST_PLUGIN_PATH at an empty folder, a copy of the registry
// (the plugin drops out of it) and GStreamer started without init_gstreamer().
TEST(PipelineConfigErrors, MissingPrismElementSaysThePluginIsMissing) {
  TempDir dir;
  if (!std::getenv("PRISM_TEST_WITHOUT_PLUGIN")) {
    const std::string empty = dir.file("no-plugins"), registry = dir.file("registry.bin");
    fs::create_directories(empty);
    if (const char* r = std::getenv("GST_REGISTRY_1_0"); r && fs::exists(r)) fs::copy_file(r, registry);
    const ::testing::TestInfo* t = ::testing::UnitTest::GetInstance()->current_test_info();
    const std::string command = "PRISM_TEST_WITHOUT_PLUGIN=1 PRISM_PLUGIN_DIR= GST_PLUGIN_PATH=" + shell_quote(empty) +
                                " GST_PLUGIN_PATH_1_0=" + shell_quote(empty) +
                                " GST_REGISTRY_1_0=" + shell_quote(registry) + " " +
                                shell_quote(fs::read_symlink("/proc/self/exe").string()) +
                                " --gtest_filter=" + t->test_suite_name() + "." + t->name();
    std::string output;
    EXPECT_EQ(test::run_command(command, output), 0) << command << "\n" << output;
    EXPECT_NE(output.find("[  PASSED  ] 1 test."), std::string::npos) << output;
    EXPECT_EQ(output.find("SKIPPED"), std::string::npos) << output;
    return;
  }
  gst_init(nullptr, nullptr);
  ASSERT_FALSE(prism_plugin_available()) << "GST_PLUGIN_PATH=" << g_getenv("GST_PLUGIN_PATH");
  std::vector<ConfigError> errors;
  load_pipeline_config(dir.write("m.yaml",
                                 "elements:\n  c: {element: prismconvert}\n  s: {element: fakesink}\n"
                                 "links: [[c, s]]\n"),
                       {}, errors, dir.path().string());
  expect_error(errors, (dir.path() / "m.yaml").string(), 2, 16,
               "unknown element 'prismconvert': the Prism plugin (libgstprism.so) was not found "
               "(looked in ");
  // Every element of ours, not only those named prism*.
  errors.clear();
  load_pipeline_config(dir.write("e.yaml",
                                 "elements:\n  t: {element: emdtracker}\n  s: {element: fakesink}\n"
                                 "links: [[t, s]]\n"),
                       {}, errors, dir.path().string());
  expect_error(errors, (dir.path() / "e.yaml").string(), 2, 16,
               "unknown element 'emdtracker': the Prism plugin (libgstprism.so) was not found (looked in ");
}

// The elements of another plugin a Prism pipeline uses: the plugin and its Debian package are named
// (nvcodec's elements exist only where a GPU is found: on such a machine there is nothing to say).
TEST(PipelineConfigErrors, AMissingElementNamesItsPluginAndPackage) {
  gst_init(nullptr, nullptr);
  TempDir dir;
  std::vector<ConfigError> errors;
  if (GstElementFactory* f = gst_element_factory_find("nvh264dec")) {
    gst_object_unref(f);
  } else {
    load_pipeline_config(dir.write("n.yaml",
                                   "elements:\n  d: {element: nvh264dec}\n  s: {element: fakesink}\n"
                                   "links: [[d, s]]\n"),
                         {}, errors, dir.path().string());
    expect_error(errors, (dir.path() / "n.yaml").string(), 2, 16,
                 "unknown element 'nvh264dec': its plugin 'nvcodec' is not installed or not loadable (Debian: "
                 "gstreamer1.0-plugins-bad); nvcodec registers its elements only where the NVIDIA driver and a "
                 "GPU are found");
  }
  EXPECT_EQ(missing_element_hint("avdec_h264"),
            "its plugin 'libav' is not installed or not loadable (Debian: gstreamer1.0-libav)");
  EXPECT_EQ(missing_element_hint("nosuchelement"), "");
  // The list pipelines/ keeps of our elements is the plugin's own.
  if (prism_plugin_available()) {
    EXPECT_EQ(prism_element_names(), plugin_element_names("prism"));
  } else {
    ADD_FAILURE() << "the Prism plugin is not on GST_PLUGIN_PATH: the list of its elements is not checked";
  }
}

TEST(PipelineConfigErrors, ValuesOfTheWrongType) {
  TempDir dir;
  std::vector<ConfigError> errors;
  load_text(dir, "v.yaml", R"(elements:
  src:
    element: videotestsrc
    properties:
      num-buffers: lots
      pattern: bal
      is-live: maybe
      horizontal-speed: 99999999999
      timestamp-offset: -5
  cf: {element: capsfilter, properties: {caps: "video/x-raw,,="}}
  q: {element: queue, properties: {leaky: sideways, max-size-buffers: -1}}
  sink: {element: fakesink, properties: {sync: [1, 2]}}
links: [[src, cf, q, sink]]
)",
            errors);
  const std::string f = (dir.path() / "v.yaml").string();
  expect_error(errors, f, 5, 20,
               "invalid value 'lots' for property 'num-buffers' of 'src' (videotestsrc): expected an integer in the "
               "range -1..2147483647");
  expect_error(errors, f, 6, 16, "expected one of: smpte, snow,");
  expect_error(errors, f, 6, 16, "did you mean 'ball'?");
  expect_error(
      errors, f, 7, 16,
      "invalid value 'maybe' for property 'is-live' of 'src' (videotestsrc): expected a boolean (true or false)");
  expect_error(errors, f, 8, 25, "expected an integer in the range -2147483648..2147483647");
  expect_error(errors, f, 9, 25, "invalid value '-5' for property 'timestamp-offset'");
  expect_error(errors, f, 10, 48,
               "invalid value 'video/x-raw,,=' for property 'caps' of 'cf' (capsfilter): expected caps");
  expect_error(errors, f, 11, 43, "invalid value 'sideways' for property 'leaky'");
  expect_error(errors, f, 11, 71,
               "invalid value '-1' for property 'max-size-buffers' of 'q' (queue): expected an unsigned integer");
  expect_error(errors, f, 12, 48, "property 'sync' of 'sink' needs a scalar value, not a list");
  EXPECT_EQ(errors.size(), 9u) << joined(errors);
}

TEST(PipelineConfigErrors, VariablesAndOverrides) {
  TempDir dir;
  std::vector<ConfigError> errors;
  load_text(dir, "o.yaml", R"(variables:
  frames: 10
  loop: "${loop}"
  cwd: 1
elements:
  src: {element: videotestsrc, properties: {num-buffers: "${frame}", pattern: "${loop}"}}
  sink: {element: fakesink, properties: {sync: "${unterminated"}}
links: [[src, sink]]
)",
            errors, {{"frame", "3"}, {"sink.sync", "maybe"}, {"snik.sync", "true"}, {"frames", "x"}});
  const std::string f = (dir.path() / "o.yaml").string();
  expect_error(errors, f, 4, 3, "'cwd' is a built-in variable");
  expect_error(errors, f, 6, 58, "undefined variable 'frame'; did you mean 'frames'?");
  expect_error(errors, f, 3, 9, "variable 'loop' refers to itself");
  bool saw_frame = false, saw_snik = false, saw_sync = false;
  for (const auto& e : errors) {
    if (e.to_string() ==
        "--set frame=3: error: no variable named 'frame'; did you mean 'frames'? "
        "(use NAME=VALUE for a variable or ELEMENT.PROPERTY=VALUE)")
      saw_frame = true;
    if (e.to_string().find("--set snik.sync=true: error: no variable 'snik.sync' and no element "
                           "'snik'; did you mean 'sink.sync'?") == 0)
      saw_snik = true;
    if (e.to_string().find("--set sink.sync=maybe: error: invalid value 'maybe' for property "
                           "'sync'") == 0)
      saw_sync = true;
  }
  EXPECT_TRUE(saw_frame && saw_snik && saw_sync) << joined(errors);
}

TEST(PipelineConfigErrors, LinksAndNames) {
  TempDir dir;
  std::vector<ConfigError> errors;
  load_text(dir, "l.yaml", R"(elements:
  src: {element: videotestsrc}
  src: {element: fakesrc}
  lonely: {element: fakesink}
  d: {element: qtdemux}
  bad.name: {element: queue}
  sink: {element: fakesink}
links:
  - [src, {caps: "not caps ,, {"}, sinkk]
  - [src, {caps: video/x-raw}, {caps: video/x-raw}, sink]
  - [d.vidoe_0, sink]
  - [d.sink, sink]
  - [src, d.video_0, sink]
  - [{caps: video/x-raw}, sink]
  - [src, {cap: x}, sink]
  - [sink]
)",
            errors);
  const std::string f = (dir.path() / "l.yaml").string();
  expect_error(errors, f, 3, 3, "duplicate element name 'src' (first defined at " + f + ":2:3)");
  expect_error(errors, f, 6, 3, "invalid element name 'bad.name'");
  expect_error(errors, f, 9, 18, "invalid caps 'not caps ,, {'");
  expect_error(errors, f, 9, 36, "link to undefined element 'sinkk'; did you mean 'sink'?");
  expect_error(errors, f, 10, 39, "two caps in a row");
  expect_error(errors, f, 11, 6, "element 'd' (qtdemux) has no source pad 'vidoe_0'");
  expect_error(errors, f, 12, 6, "pad 'sink' of 'd' is not a source pad");
  expect_error(errors, f, 13, 11, "may only be named at the start or the end of a chain");
  expect_error(errors, f, 14, 13, "a chain must start and end with an element, not caps");
  expect_error(errors, f, 15, 12, "a link item map must be exactly {caps: \"...\"}; did you mean 'caps'?");
  expect_error(errors, f, 16, 5, "a chain needs at least two elements");
  expect_error(errors, f, 4, 3, "element 'lonely' is not linked");
  EXPECT_EQ(errors.size(), 12u) << joined(errors);
}

// A caps item must be a media type: a bare word would become an element on the launch line, and
// ANY or EMPTY filter nothing or everything.
// Links that loop validated and ran for ever; [a, a] failed only when the pipeline was
// built, without file:line.
TEST(PipelineConfigErrors, LinksThatLoopAreRefusedAtTheLinkThatClosesThem) {
  TempDir dir;
  std::vector<ConfigError> errors;
  load_text(dir, "loop.yaml", R"(elements:
  src: {element: videotestsrc}
  mix: {element: compositor}
  tee: {element: tee}
  q: {element: queue}
  sink: {element: fakesink}
links:
  - [src, mix, tee, sink]
  - [tee, q, mix]
)",
            errors);
  const std::string f = (dir.path() / "loop.yaml").string();
  expect_error(errors, f, 9, 14, "the links form a loop, mix -> tee -> q -> mix: data must flow one way");
  errors.clear();
  load_text(dir, "self.yaml", R"(elements:
  a: {element: identity}
  src: {element: videotestsrc}
  sink: {element: fakesink}
links:
  - [src, a, a, sink]
  - [src, a, {caps: video/x-raw}, a]
)",
            errors);
  const std::string g = (dir.path() / "self.yaml").string();
  expect_error(errors, g, 6, 14, "'a' is linked to itself");
  expect_error(errors, g, 7, 35, "'a' is linked to itself");
}

TEST(PipelineConfigErrors, CapsMustBeMediaTypes) {
  TempDir dir;
  std::vector<ConfigError> errors;
  load_text(dir, "c.yaml", R"(elements:
  src: {element: videotestsrc}
  sink: {element: fakesink}
links:
  - [src, {caps: identity}, sink]
  - [src, {caps: ANY}, sink]
  - [src, {caps: EMPTY}, sink]
  - [src, {caps: "video/x-raw; identity"}, sink]
  - [src, {caps: "video/x-raw(memory:SystemMemory), format=RGB; image/jpeg"}, sink]
)",
            errors);
  const std::string f = (dir.path() / "c.yaml").string();
  expect_error(errors, f, 5, 18, "invalid caps 'identity': 'identity' is not a media type");
  expect_error(errors, f, 6, 18, "invalid caps 'ANY': ANY caps are meaningless as a filter");
  expect_error(errors, f, 7, 18, "invalid caps 'EMPTY': EMPTY caps");
  expect_error(errors, f, 8, 18, "invalid caps 'video/x-raw; identity': 'identity' is not a media type");
  EXPECT_EQ(errors.size(), 4u) << joined(errors);
}

// yaml-cpp reads the first document only; a second one must not be dropped without a word.
TEST(PipelineConfigErrors, OneYamlDocumentPerFile) {
  TempDir dir;
  std::vector<ConfigError> errors;
  const std::string good = R"(elements:
  src: {element: videotestsrc}
  sink: {element: fakesink}
links: [[src, sink]]
)";
  load_text(dir, "marked.yaml", "---\n" + good + "...\n", errors);
  EXPECT_TRUE(errors.empty()) << joined(errors);

  load_text(dir, "two.yaml", good + "---\nelements: {}\n", errors);
  const std::string two = (dir.path() / "two.yaml").string();
  expect_error(errors, two, 5, 1, "a config file holds one YAML document");
  EXPECT_EQ(errors.size(), 1u) << joined(errors);

  errors.clear();
  load_text(dir, "broken.yaml", good + "--- [\n", errors);
  expect_error(errors, (dir.path() / "broken.yaml").string(), 5, 1, "a config file holds one YAML document");
  EXPECT_EQ(errors.size(), 1u) << joined(errors);
}

struct MalformedCase {
  const char* file;
  int line;
  int column;
  const char* fragment;
};

class MalformedConfig : public testing::TestWithParam<MalformedCase> {};

TEST_P(MalformedConfig, ReportsTheLocationAndDoesNotCrash) {
  test::init_gst_once();
  const MalformedCase& c = GetParam();
  const std::string path = std::string(PRISM_TEST_CONFIGS) + "/" + c.file;
  std::vector<ConfigError> errors;
  load_pipeline_config(path, {}, errors);
  ASSERT_FALSE(errors.empty());
  expect_error(errors, path, c.line, c.column, c.fragment);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, MalformedConfig,
    testing::Values(MalformedCase{"empty.yaml", 1, 1, "the config is empty"},
                    MalformedCase{"comment-only.yaml", 1, 1, "the config is empty"},
                    MalformedCase{"tab-indent.yaml", 3, 2, "line 3 contains a tab"},
                    MalformedCase{"root-is-list.yaml", 1, 1, "the config must be a map"},
                    MalformedCase{"elements-as-list.yaml", 2, 3, "'elements' must be a map"},
                    MalformedCase{"scalar-for-map.yaml", 2, 8, "element 'src' must be a map"},
                    MalformedCase{"scalar-for-map.yaml", 3, 41, "'properties' of 'sink' must be a map"},
                    MalformedCase{"unclosed-flow-map.yaml", 2, 1, "invalid YAML: end of map flow not found"},
                    MalformedCase{"links-malformed.yaml", 6, 18, "'caps' needs a caps string"},
                    MalformedCase{"links-malformed.yaml", 8, 5, "each link must be a chain"},
                    MalformedCase{"odd-keys.yaml", 2, 5, "keys must be non-empty names, not a list"}),
    [](const testing::TestParamInfo<MalformedCase>& info) {
      std::string name = info.param.file;
      name = name.substr(0, name.find('.')) + "_" + std::to_string(info.index);
      for (char& c : name) {
        if (!isalnum(static_cast<unsigned char>(c))) c = '_';
      }
      return name;
    });

// PAD::PROPERTY keys set properties of (request) pads, as gst-launch does through GstChildProxy.
TEST(PipelineConfig, PadPropertiesOfRequestPads) {
  TempDir dir;
  std::vector<ConfigError> errors;
  const PipelineConfig config = load_text(dir, "pads.yaml", R"(elements:
  a: {element: videotestsrc}
  c: {element: compositor, properties: {"sink_0::xpos": 12, "sink_0::alpha": 0.5}}
  s: {element: fakesink}
links: [[a, c.sink_0], [c, s]]
)",
                                          errors, {{"c.sink_1::ypos", "7"}});
  ASSERT_TRUE(errors.empty()) << joined(errors);
  EXPECT_EQ(property(config, "c", "sink_0::xpos"), "12");
  EXPECT_EQ(property(config, "c", "sink_0::alpha"), "0.5");
  EXPECT_EQ(property(config, "c", "sink_1::ypos"), "7");

  errors.clear();
  load_text(dir, "badpads.yaml", R"(elements:
  a: {element: videotestsrc, properties: {"src::x": 1}}
  c: {element: compositor, properties: {"sink_0::xpoz": 1, "video_0::xpos": 2, "sink_0::xpos": nine}}
  s: {element: fakesink}
links: [[a, c, s]]
)",
            errors);
  const std::string f = (dir.path() / "badpads.yaml").string();
  expect_error(errors, f, 2, 43, "element 'a' (videotestsrc) does not give access to its pads' properties");
  expect_error(errors, f, 3, 41,
               "pad 'sink_0' of element 'c' (compositor) has no property 'xpoz'; did you mean 'sink_0::xpos'?");
  expect_error(errors, f, 3, 60, "element 'c' (compositor) has no pad 'video_0'");
  expect_error(errors, f, 3, 96, "invalid value 'nine' for property 'xpos'");
  EXPECT_EQ(errors.size(), 4u) << joined(errors);
}

// A long chain of variables (v0: ${v1}, v1: ${v2}, ...) once overflowed the stack: nesting stops at
// 64 levels with an error naming the variable.
TEST(PipelineConfigErrors, DeeplyNestedVariablesAreRefused) {
  std::string yaml = "variables:\n";
  for (int i = 0; i < 20000; ++i) yaml += "  v" + std::to_string(i) + ": \"${v" + std::to_string(i + 1) + "}\"\n";
  yaml += "  v20000: 1\n";
  yaml += "elements:\n  src: {element: videotestsrc, properties: {num-buffers: \"${v0}\"}}\n";
  yaml += "  sink: {element: fakesink}\nlinks: [[src, sink]]\n";
  TempDir dir;
  std::vector<ConfigError> errors;
  load_text(dir, "deep.yaml", yaml, errors);
  const std::string f = (dir.path() / "deep.yaml").string();
  // v63 is expanded at the 64th level; the ${v64} in its value (line 65) is one too many.
  expect_error(errors, f, 65, 8, "variable 'v64' is nested more than 64 levels deep (v0 -> v1 -> ");
  EXPECT_EQ(errors.size(), 1u) << joined(errors);

  // 64 levels are fine.
  errors.clear();
  std::string ok = "variables:\n";
  for (int i = 0; i < 63; ++i) ok += "  v" + std::to_string(i) + ": \"${v" + std::to_string(i + 1) + "}\"\n";
  ok += "  v63: 7\nelements:\n  src: {element: videotestsrc, properties: {num-buffers: \"${v0}\"}}\n";
  ok += "  sink: {element: fakesink}\nlinks: [[src, sink]]\n";
  const PipelineConfig config = load_text(dir, "ok.yaml", ok, errors);
  ASSERT_TRUE(errors.empty()) << joined(errors);
  EXPECT_EQ(property(config, "src", "num-buffers"), "7");
}

// 35 lines of dN: ${dN-1}${dN-1} once allocated gigabytes: a value stops at 1 MiB after substitution.
TEST(PipelineConfigErrors, HugeExpansionsAreRefused) {
  std::string yaml = "variables:\n  d0: ab\n";
  for (int i = 1; i <= 35; ++i) {
    yaml += "  d" + std::to_string(i) + ": \"${d" + std::to_string(i - 1) + "}${d" + std::to_string(i - 1) + "}\"\n";
  }
  yaml += "elements:\n  src: {element: videotestsrc}\n";
  yaml += "  sink: {element: filesink, properties: {location: \"${d35}\"}}\nlinks: [[src, sink]]\n";
  TempDir dir;
  std::vector<ConfigError> errors;
  load_text(dir, "big.yaml", yaml, errors);
  const std::string f = (dir.path() / "big.yaml").string();
  // d20 = 2^20 copies of "ab" = 2 MiB: the first over the limit.
  expect_error(errors, f, 22, 8, "variable 'd20' is longer than 1 MiB after substitution");
  EXPECT_EQ(errors.size(), 1u) << joined(errors);
}

// Aliases of maps under 'variables:' (lN: &lN {a: *lN-1, b: *lN-1}) once made loading exponential.
TEST(PipelineConfigErrors, AliasedVariableMapsAreRefused) {
  std::string yaml = "variables:\n  l0: &l0 {a: x, b: y}\n";
  for (int i = 1; i <= 30; ++i) {
    yaml += "  l" + std::to_string(i) + ": &l" + std::to_string(i) + " {a: *l" + std::to_string(i - 1) + ", b: *l" +
            std::to_string(i - 1) + "}\n";
  }
  yaml += "  s: &s text\n  t: *s\n";  // aliases of scalars stay allowed
  yaml += "elements:\n  src: {element: videotestsrc, properties: {pattern: \"${t}\"}}\n";
  yaml += "  sink: {element: fakesink}\nlinks: [[src, sink]]\n";
  TempDir dir;
  std::vector<ConfigError> errors;
  load_text(dir, "alias.yaml", yaml, errors);
  const std::string f = (dir.path() / "alias.yaml").string();
  expect_error(errors, f, 3, 12, "variable 'l1.a' is an alias of a map; aliases of maps are not allowed");
  expect_error(errors, f, 3, 20, "variable 'l1.b' is an alias of a map");
  expect_error(errors, f, 32, 14, "variable 'l30.a' is an alias of a map");
  EXPECT_EQ(errors.size(), 61u) << joined(errors);  // 2 per level, and 'text' is no pattern
  expect_error(errors, f, 36, 54, "invalid value 'text' for property 'pattern'");
}

// poissonblend with its overlay linked but not its background ('sink', an always pad) validated and
// then waited forever for the background: an unlinked always sink pad is an error.
TEST(PipelineConfigErrors, UnlinkedAlwaysSinkPads) {
  TempDir dir;
  std::vector<ConfigError> errors;
  load_text(dir, "pads.yaml", R"(elements:
  ov: {element: videotestsrc}
  mix: {element: compositor}
  sel: {element: input-selector}
  conv: {element: videoconvert}
  sink: {element: fakesink}
  sink2: {element: fakesink}
links:
  - [ov, mix.sink_0]
  - [mix, sink]
  - [conv, sink2]
)",
            errors);
  // compositor has request pads only: fine. videoconvert's 'sink' has no input at all.
  const std::string f = (dir.path() / "pads.yaml").string();
  expect_error(errors, f, 5, 3, "element 'conv' (videoconvert) has no input: its sink pad 'sink' is not linked");
  expect_error(errors, f, 4, 3, "element 'sel' is not linked");
  EXPECT_EQ(errors.size(), 2u) << joined(errors);

  // subtitleoverlay's optional subtitle_sink (an always pad too) may stay unlinked beside its video_sink.
  errors.clear();
  load_text(dir, "text.yaml", R"(elements:
  src: {element: videotestsrc}
  text: {element: subtitleoverlay}
  sink: {element: fakesink}
links: [[src, text, sink]]
)",
            errors);
  EXPECT_TRUE(errors.empty()) << joined(errors);
}

TEST(PipelineConfigErrors, UnlinkedPoissonblendBackground) {
  test::init_gst_once();
  GstElementFactory* factory = gst_element_factory_find("poissonblend");
  if (!factory) GTEST_SKIP() << "poissonblend is not available (Prism plugin not built)";
  gst_object_unref(factory);
  TempDir dir;
  std::vector<ConfigError> errors;
  load_text(dir, "blend.yaml", R"(elements:
  ov: {element: videotestsrc}
  blend: {element: poissonblend}
  sink: {element: fakesink}
links:
  - [ov, blend.overlay_0]
  - [blend, sink]
)",
            errors);
  const std::string f = (dir.path() / "blend.yaml").string();
  expect_error(errors, f, 3, 3,
               "sink pad 'sink' of element 'blend' (poissonblend) is not linked while its pad 'overlay_0' is");
  EXPECT_EQ(errors.size(), 1u) << joined(errors);

  // Linked by name or without a pad name (the first link fills the always pad), both are fine.
  for (const char* links :
       {"[[bg, blend.sink], [ov, blend.overlay_0], [blend, sink]]", "[[bg, blend], [ov, blend], [blend, sink]]"}) {
    errors.clear();
    load_text(dir, "ok.yaml",
              std::string("elements:\n  bg: {element: videotestsrc}\n  ov: {element: videotestsrc}\n"
                          "  blend: {element: poissonblend}\n  sink: {element: fakesink}\nlinks: ") +
                  links + "\n",
              errors);
    EXPECT_TRUE(errors.empty()) << links << "\n" << joined(errors);
  }
}

// ---- the repository's configs/ -------------------------------------------------------------------

std::string factory_of(const PipelineConfig& config, const std::string& element) {
  const ElementSpec* spec = config.find_element(element);
  return spec ? spec->factory : "<no element '" + element + "'>";
}

// Loads configs/NAME from the repository; an element this machine lacks (a GStreamer plugin that is
// not installed) skips loudly rather than failing, any other error fails.
PipelineConfig load_repo_config(const std::string& name, const std::vector<Override>& overrides, bool& skipped) {
  test::init_gst_once();
  std::vector<ConfigError> errors;
  TempDir cwd;
  PipelineConfig config =
      load_pipeline_config(std::string(PRISM_REPO_CONFIGS) + "/" + name, overrides, errors, cwd.path().string());
  skipped = !errors.empty() && std::all_of(errors.begin(), errors.end(), [](const ConfigError& e) {
    return e.to_string().find("unknown element") != std::string::npos;
  });
  if (skipped) {
    std::cerr << "*** SKIPPING " << name << ": " << joined(errors) << " ***\n";
  } else {
    EXPECT_TRUE(errors.empty()) << name << ":\n" << joined(errors);
  }
  return config;
}

// Every config of configs/ validates against this machine's registry (elements, properties, values,
// links), as `prism run` does before it starts anything: no camera, stream or data file is needed.
TEST(RepositoryConfigs, EveryConfigValidates) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(PRISM_REPO_CONFIGS))
    if (e.path().extension() == ".yaml") names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  for (const char* wanted : {"live-camera.yaml", "live-rtsp.yaml", "demo.yaml"})
    EXPECT_NE(std::find(names.begin(), names.end(), wanted), names.end()) << wanted;
  for (const std::string& name : names) {
    bool skipped = false;
    load_repo_config(name, {}, skipped);
  }
}

// The live configs (README "Live sources") carry the advice a live source needs: a live source
// (v4l2src; rtspsrc through uridecodebin for rtsp://), a leaky queue one frame deep right before
// the analysis, the analysis in async mode, a sink that does not wait for the clock by default, and
// a latency budget (render-delay) for sync=true; each of those may be changed with --set.
TEST(RepositoryConfigs, LiveConfigsQueueLeakilyBeforeAnAsyncAnalysis) {
  for (const char* name : {"live-camera.yaml", "live-rtsp.yaml"}) {
    SCOPED_TRACE(name);
    bool skipped = false;
    const PipelineConfig config = load_repo_config(name, {}, skipped);
    if (skipped || HasFailure()) continue;
    const bool camera = std::string(name) == "live-camera.yaml";
    EXPECT_EQ(factory_of(config, "src"), camera ? "v4l2src" : "uridecodebin");
    if (!camera) {
      EXPECT_EQ(property(config, "src", "uri").rfind("rtsp://", 0), 0u) << property(config, "src", "uri");
    }
    EXPECT_EQ(factory_of(config, "q"), "queue");
    EXPECT_EQ(property(config, "q", "leaky"), "downstream");
    EXPECT_EQ(property(config, "q", "max-size-buffers"), "1");
    EXPECT_EQ(property(config, "q", "max-size-bytes"), "0");
    EXPECT_EQ(property(config, "q", "max-size-time"), "0");
    EXPECT_EQ(factory_of(config, "id"), "textureid");
    EXPECT_EQ(property(config, "id", "async"), "true");
    EXPECT_EQ(property(config, "sink", "sync"), "false");
    EXPECT_EQ(property(config, "sink", "render-delay"), "0");
    // The queue comes right before the analysis, in the one chain from the source to the sink.
    ASSERT_EQ(config.chains.size(), 1u);
    std::vector<std::string> order;
    for (const LinkItem& item : config.chains[0])
      if (item.kind != LinkItem::Kind::Caps) order.push_back(item.element);
    const auto q = std::find(order.begin(), order.end(), "q");
    ASSERT_NE(q, order.end());
    ASSERT_NE(q + 1, order.end());
    EXPECT_EQ(*(q + 1), "id");
    EXPECT_EQ(order.front(), "src");
    EXPECT_EQ(order.back(), "sink");
    const std::string line = to_launch_line(config);
    EXPECT_NE(line.find("queue name=q leaky=downstream max-size-buffers=1"), std::string::npos) << line;
    // A latency budget instead of sync=false, and the synchronous mode, are one --set away.
    const PipelineConfig budget = load_repo_config(
        name, {{"sync", "true"}, {"render_delay", "100000000"}, {"async", "false"}, {"interval", "0"}}, skipped);
    if (skipped) continue;
    EXPECT_EQ(property(budget, "sink", "sync"), "true");
    EXPECT_EQ(property(budget, "sink", "render-delay"), "100000000");
    EXPECT_EQ(property(budget, "id", "async"), "false");
  }
  // A wrong value in the advice is refused naming the config's line, as any.
  test::init_gst_once();
  std::vector<ConfigError> errors;
  load_pipeline_config(std::string(PRISM_REPO_CONFIGS) + "/live-rtsp.yaml", {{"async", "sometimes"}}, errors);
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(joined(errors).find("live-rtsp.yaml:"), std::string::npos) << joined(errors);
  EXPECT_NE(joined(errors).find("'async'"), std::string::npos) << joined(errors);
}

// ---- cameras: and per-camera: (README, "Many cameras") ---------------------------------------------

constexpr char kPerCamera[] = R"(per-camera:
  elements:
    conv: {element: videoconvert}
    sink: {element: fakesink, properties: {sync: false}}
  links:
    - [source, conv, sink]
)";

TEST(PipelineConfig, CamerasAreStampedOutPerCamera) {
  TempDir dir;
  std::vector<ConfigError> errors;
  const PipelineConfig config = load_text(dir, "c.yaml", R"(variables:
  out: "${camera.id}.txt"
cameras:
  - {id: door, uri: "rtsp://user:secret@10.0.0.1/s"}
  - rtsp://10.0.0.2/s
per-camera:
  elements:
    conv: {element: videoconvert}
    sink: {element: filesink, properties: {location: "${out}"}}
  links:
    - [source, conv, sink]
)",
                                          errors);
  ASSERT_TRUE(errors.empty()) << joined(errors);
  ASSERT_EQ(config.cameras.size(), 2u);
  EXPECT_EQ(config.cameras[0].id, "door");
  EXPECT_EQ(config.cameras[0].shown_uri, "rtsp://user:***@10.0.0.1/s");
  EXPECT_EQ(config.cameras[1].id, "cam1");
  EXPECT_EQ(config.cameras[1].elements, (std::vector<std::string>{"cam1-source", "cam1-conv", "cam1-sink"}));
  const PropertySetting* location = find_property(config, "cam1-sink", "location");
  ASSERT_NE(location, nullptr);
  EXPECT_EQ(fs::path(location->value).filename(), "cam1.txt");

  // A camera added while running (prism run --control): stamped from the same text, alone.
  const PipelineConfig added = stamp_camera(config, {"yard", "rtsp://u:p@10.0.0.3/s", -1}, errors);
  ASSERT_TRUE(errors.empty()) << joined(errors);
  ASSERT_EQ(added.cameras.size(), 1u);
  EXPECT_EQ(added.cameras[0].id, "yard");
  EXPECT_EQ(added.cameras[0].shown_uri, "rtsp://u:***@10.0.0.3/s");
  EXPECT_TRUE(added.cameras[0].reconnect);
  EXPECT_EQ(added.cameras[0].elements, (std::vector<std::string>{"yard-source", "yard-conv", "yard-sink"}));
  EXPECT_EQ(added.elements.size(), 3u);
  ASSERT_EQ(added.chains.size(), 1u);
  EXPECT_EQ(fs::path(find_property(added, "yard-sink", "location")->value).filename(), "yard.txt");
  EXPECT_EQ(stamp_camera(config, {"file", "/tmp/a.avi", -1}, errors).cameras.at(0).reconnect, false);
  EXPECT_EQ(stamp_camera(config, {"file", "/tmp/a.avi", 1}, errors).cameras.at(0).uri, "file:///tmp/a.avi");
  EXPECT_TRUE(errors.empty()) << joined(errors);
}

// The request's own fields are named as the error's file (line 0); the HTTP API answers 400 naming
// them.
TEST(PipelineConfigErrors, CamerasAddedWhileRunning) {
  TempDir dir;
  std::vector<ConfigError> errors;
  const PipelineConfig config =
      load_text(dir, "c.yaml", std::string("cameras: [rtsp://10.0.0.2/s]\n") + kPerCamera, errors);
  ASSERT_TRUE(errors.empty()) << joined(errors);
  const struct {
    CameraRequest request;
    const char* field;
    const char* fragment;
  } cases[] = {
      {{"", "rtsp://h/s", -1}, "id", "invalid camera id ''"},
      {{"9lives", "rtsp://h/s", -1}, "id", "invalid camera id '9lives'"},
      {{"a b", "rtsp://h/s", -1}, "id", "invalid camera id 'a b'"},
      {{"x", "", -1}, "uri", "needs a 'uri'"},
      {{"x", "relative.avi", -1}, "uri", "nor an absolute file path"},
      {{"x", "nosuch://u:secret@h/s", -1}, "uri", "no GStreamer source reads 'nosuch://'"},
      {{"x", "://u:secret@h/s", -1}, "uri", "not a valid URI"},
  };
  for (const auto& c : cases) {
    errors.clear();
    stamp_camera(config, c.request, errors);
    ASSERT_EQ(errors.size(), 1u) << c.request.id << " " << c.request.uri << ": " << joined(errors);
    EXPECT_EQ(errors[0].where.file, c.field) << joined(errors);
    EXPECT_EQ(errors[0].where.line, 0);
    EXPECT_NE(errors[0].message.find(c.fragment), std::string::npos) << joined(errors);
    EXPECT_EQ(errors[0].message.find("secret"), std::string::npos) << "the password is shown: " << joined(errors);
  }
  // a config without cameras has nothing to stamp out
  errors.clear();
  const PipelineConfig plain = load_text(dir, "p.yaml", kTeeConfig, errors);
  ASSERT_TRUE(errors.empty()) << joined(errors);
  stamp_camera(plain, {"x", "rtsp://h/s", -1}, errors);
  ASSERT_EQ(errors.size(), 1u) << joined(errors);
  EXPECT_EQ(errors[0].where.file, plain.path);
  EXPECT_NE(errors[0].message.find("no 'cameras:' and 'per-camera:'"), std::string::npos) << joined(errors);
}

struct CameraCase {
  const char* name;
  std::string yaml;
  int line;
  int column;
  const char* fragment;
};

class CameraConfigError : public testing::TestWithParam<CameraCase> {};

TEST_P(CameraConfigError, NamesTheFileLineAndKey) {
  TempDir dir;
  std::vector<ConfigError> errors;
  load_text(dir, "c.yaml", GetParam().yaml, errors);
  expect_error(errors, (dir.path() / "c.yaml").string(), GetParam().line, GetParam().column, GetParam().fragment);
}

const std::string kCam = "cameras:\n  - {id: door, uri: \"rtsp://10.0.0.1/s\"}\n";

INSTANTIATE_TEST_SUITE_P(
    Cameras, CameraConfigError,
    testing::Values(
        CameraCase{"cameras_scalar", std::string("cameras: rtsp://h/s\n") + kPerCamera, 1, 10,
                   "'cameras' must be a non-empty list"},
        CameraCase{"cameras_empty", std::string("cameras: []\n") + kPerCamera, 1, 10, "not an empty list"},
        CameraCase{"camera_unknown_key", std::string("cameras:\n  - {id: door, url: rtsp://h/s}\n") + kPerCamera, 2, 16,
                   "unknown key 'url' in a camera; did you mean 'uri'?"},
        CameraCase{"camera_bad_id", std::string("cameras:\n  - {id: \"door 1\", uri: rtsp://h/s}\n") + kPerCamera, 2,
                   10, "invalid camera id 'door 1'"},
        CameraCase{
            "camera_duplicate_id",
            std::string("cameras:\n  - {id: door, uri: rtsp://h/s}\n  - {id: door, uri: rtsp://h/t}\n") + kPerCamera, 3,
            5, "duplicate camera id 'door'"},
        CameraCase{"camera_without_uri", std::string("cameras:\n  - {id: door}\n") + kPerCamera, 2, 5,
                   "camera 'door' needs a 'uri'"},
        CameraCase{"camera_unknown_scheme",
                   std::string("cameras:\n  - {id: door, uri: \"nosuch://h/s\"}\n") + kPerCamera, 2, 21,
                   "no GStreamer source reads 'nosuch://'"},
        CameraCase{"camera_reconnect_not_bool",
                   std::string("cameras:\n  - {id: door, uri: rtsp://h/s, reconnect: often}\n") + kPerCamera, 2, 44,
                   "'reconnect' of camera 'door' must be true or false"},
        CameraCase{"camera_a_list", std::string("cameras:\n  - [door, rtsp://h/s]\n") + kPerCamera, 2, 5,
                   "a camera must be a URI or a map"},
        CameraCase{"per_camera_without_cameras", std::string(kPerCamera), 1, 1, "'per-camera:' needs 'cameras:'"},
        CameraCase{"cameras_without_per_camera", kCam, 1, 1, "'cameras:' needs 'per-camera:'"},
        CameraCase{"per_camera_a_list", kCam + "per-camera: [source, sink]\n", 3, 13,
                   "'per-camera' must be a map with 'elements:' and 'links:'"},
        CameraCase{"per_camera_unknown_key", kCam + "per-camera:\n  element: {}\n  links: [[source, s]]\n", 4, 3,
                   "unknown key 'element' in 'per-camera'; did you mean 'elements'?"},
        CameraCase{"per_camera_without_links", kCam + "per-camera:\n  elements:\n    sink: {element: fakesink}\n", 3, 1,
                   "'per-camera' has no 'links:'"},
        CameraCase{"per_camera_element_named_source",
                   kCam + "per-camera:\n  elements:\n    source: {element: fakesink}\n  links: [[source, x]]\n", 5, 5,
                   "'source' is the camera's own source"},
        CameraCase{"per_camera_undefined_link",
                   kCam + "per-camera:\n  elements:\n    sink: {element: fakesink}\n  links: [[source, snk]]\n", 6, 20,
                   "link to undefined element 'snk' in 'per-camera'; did you mean 'sink'?"},
        CameraCase{"per_camera_source_not_first",
                   kCam + "per-camera:\n  elements:\n    conv: {element: videoconvert}\n    sink: {element: fakesink}\n"
                          "  links: [[source, conv, sink], [conv, source]]\n",
                   7, 40, "'source' (the camera's source) has no sink pad"},
        CameraCase{"per_camera_no_chain_from_source",
                   kCam + "per-camera:\n  elements:\n    src: {element: videotestsrc}\n    sink: {element: fakesink}\n"
                          "  links: [[src, sink]]\n",
                   7, 3, "no chain of 'per-camera' starts with 'source'"},
        CameraCase{"camera_variable_outside_per_camera",
                   "elements:\n  src: {element: videotestsrc}\n  sink: {element: filesink, properties: {location: "
                   "\"${camera.id}.txt\"}}\nlinks: [[src, sink]]\n",
                   3, 52, "'${camera.id}' is only defined inside 'per-camera:'"},
        CameraCase{"camera_element_name_taken",
                   kCam +
                       "elements:\n  door-sink: {element: fakesink}\n  src: {element: videotestsrc}\n"
                       "links: [[src, door-sink]]\n" +
                       kPerCamera,
                   10, 5, "camera 'door': its element 'door-sink' has the name of another element"}),
    [](const testing::TestParamInfo<CameraCase>& info) { return std::string(info.param.name); });

TEST(PipelineConfigErrors, MissingFile) {
  std::vector<ConfigError> errors;
  load_pipeline_config("/nonexistent/prism.yaml", {}, errors);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].to_string(), "/nonexistent/prism.yaml: error: cannot read the config file");
}

}  // namespace
}  // namespace prism
