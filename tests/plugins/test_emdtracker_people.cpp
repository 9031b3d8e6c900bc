// emdtracker against hand-checked people (objects, not fragments): vtest.mp4 with the
// README's target, on the CPU path, scored against data/vtest_people.txt (8 frames, 55 people).
// Only the frames needed reach the element: 0-30 (the target is learned at 30; before it no map is
// computed, so they cost little), the runs 40-50, 120-130 and 200-210 (track ids) and frames 80
// and 160. A frame's detections depend only on the frame and the target, so they are the README
// pipeline's; the ids are kept across each run's consecutive frames. docs/benchmarks/emd.md has the figures.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "emdtracker_util.h"
#include "prism_test.h"

namespace prism {
namespace {

using namespace test::emdt;

struct Person {
  int frame, id;
  Rect box;
};

std::vector<Person> read_people(const std::string& path) {
  std::ifstream in(path);
  std::vector<Person> people;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream s(line);
    Person p{};
    if (!(s >> p.frame >> p.id >> p.box.x >> p.box.y >> p.box.w >> p.box.h)) ADD_FAILURE() << path << ": " << line;
    people.push_back(p);
  }
  return people;
}

// Share of the detection's box inside the person's.
double inside(const Rect& det, const Rect& person) {
  const int x0 = std::max(det.x, person.x), y0 = std::max(det.y, person.y);
  const int x1 = std::min(det.x + det.w, person.x + person.w), y1 = std::min(det.y + det.h, person.y + person.h);
  if (x1 <= x0 || y1 <= y0) return 0;
  return double(x1 - x0) * (y1 - y0) / (double(det.w) * det.h);
}

constexpr double kMatchIou = 0.3;

TEST(EmdTrackerPeople, ObjectsArePeopleAndKeepTheirIds) {
  gst_init(nullptr, nullptr);
  const std::string video = test::data_dir() + "/video/vtest.mp4";
  PRISM_NEED_FILE(video);
  const std::vector<Person> people = read_people(PRISM_PEOPLE_FILE);
  ASSERT_EQ(people.size(), 55u);
  std::set<int> pass;
  for (int f = 0; f <= 30; ++f) pass.insert(f);
  for (const int start : {40, 120, 200})
    for (int f = start; f <= start + 10; ++f) pass.insert(f);
  pass.insert(80);
  pass.insert(160);
  const int last = *pass.rbegin();

  // The README's CPU pipeline; a probe before the element lets only `pass` through.
  std::vector<int> passed;  // the decoded frame of each message, in order
  int decoded = 0;
  auto gate = [](GstPad*, GstPadProbeInfo*, gpointer data) -> GstPadProbeReturn {
    auto* g = static_cast<std::pair<int*, std::pair<std::set<int>*, std::vector<int>*>>*>(data);
    const int f = (*g->first)++;
    if (!g->second.first->count(f)) return GST_PAD_PROBE_DROP;
    g->second.second->push_back(f);
    return GST_PAD_PROBE_OK;
  };
  std::pair<int*, std::pair<std::set<int>*, std::vector<int>*>> state{&decoded, {&pass, &passed}};
  test::RunOptions options;
  options.appsink = "";
  options.message_name = "prism-emdtracker";
  options.before_play = [&](GstElement* p) {
    GstElement* g = gst_bin_get_by_name(GST_BIN(p), "gate");
    GstPad* pad = gst_element_get_static_pad(g, "src");
    gst_pad_add_probe(pad, GST_PAD_PROBE_TYPE_BUFFER, gate, &state, nullptr);
    gst_object_unref(pad);
    gst_object_unref(g);
  };
  const test::RunResult run = test::run_launch(
      "filesrc location=\"" + video +
          "\" ! qtdemux ! h264parse ! openh264dec ! identity name=gate eos-after=" + std::to_string(last + 1) +
          " ! emdtracker device=cpu target-rect=634,262,28,50 target-frame=30 threshold=1.0 ! fakesink",
      options);
  ASSERT_EQ(run.error, "");
  ASSERT_EQ(run.messages.size(), pass.size());
  ASSERT_EQ(passed.size(), pass.size());

  // Detections of the labelled frames.
  std::map<int, std::vector<Detection>> dets;
  for (size_t k = 0; k < run.messages.size(); ++k) {
    const GValue* list = gst_structure_get_value(run.messages[k], "detections");
    ASSERT_NE(list, nullptr);
    std::vector<Detection>& v = dets[passed[k]];
    for (guint i = 0; i < gst_value_list_get_size(list); ++i) {
      const GstStructure* s = gst_value_get_structure(gst_value_list_get_value(list, i));
      Detection d{};
      gint64 track = -1;
      gst_structure_get(s, "x", G_TYPE_INT, &d.box.x, "y", G_TYPE_INT, &d.box.y, "width", G_TYPE_INT, &d.box.w,
                        "height", G_TYPE_INT, &d.box.h, "track-id", G_TYPE_INT64, &track, nullptr);
      d.track = track;
      v.push_back(d);
    }
  }

  // Per person: the detections with IoU >= 0.3 (a match) and those at least half inside its box
  // (a fragment of it counts too).
  int once = 0, several = 0, boxes = 0, fragments = 0;
  std::set<int> frames;
  std::map<std::pair<int, int>, int64_t> track_of;  // (frame, person) -> track of its one match
  for (const Person& p : people) {
    frames.insert(p.frame);
    int matches = 0;
    int64_t track = -1;
    for (const Detection& d : dets[p.frame]) {
      if (iou(d.box, p.box) >= kMatchIou) {
        ++matches;
        track = d.track;
      }
      fragments += inside(d.box, p.box) >= 0.5;
    }
    once += matches == 1;
    several += matches >= 2;
    if (matches == 1) track_of[{p.frame, p.id}] = track;
  }
  for (const int f : frames) boxes += static_cast<int>(dets[f].size());
  // A run's id switches: people matched once at both of its ends under different track ids.
  int kept = 0, switches = 0;
  for (const int start : {40, 120, 200})
    for (const auto& [key, track] : track_of) {
      if (key.first != start) continue;
      const auto end = track_of.find({start + 10, key.second});
      if (end == track_of.end()) continue;
      (end->second == track ? kept : switches)++;
      if (end->second != track)
        std::printf("frames %d-%d, person %d: track %lld, then %lld\n", start, start + 10, key.second,
                    static_cast<long long>(track), static_cast<long long>(end->second));
    }
  const double rate = double(once) / people.size();
  std::printf(
      "%zu frames, %zu people: %.1f boxes per frame, %.2f boxes per person (at least half inside it), "
      "matched by exactly one box (IoU >= %.1f): %d (%.0f%%), by two or more: %d; ids over 10 frames: "
      "%d kept, %d switched\n",
      frames.size(), people.size(), double(boxes) / frames.size(), double(fragments) / people.size(), kMatchIou, once,
      100 * rate, several, kept, switches);
  // Measured (docs/benchmarks/emd.md): 60% matched once, none by several, 5 ids kept and 2 switched of 7;
  // the 8x8-cell groups before gave 2%. Bounds with margin:
  EXPECT_GE(rate, 0.5);
  EXPECT_LE(several, 2);
  EXPECT_GE(kept, 4);
  EXPECT_LE(switches, 3);
}

}  // namespace
}  // namespace prism
