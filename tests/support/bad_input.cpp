#include "bad_input.h"

#include <sys/stat.h>

#include <filesystem>
#include <stdexcept>

#include "pipeline_run.h"
#include "test_env.h"

namespace prism::test {

CaseFile text_file(const std::string& name, const std::string& bytes) {
  return {name, [bytes](const std::string& path) { std::ofstream(path, std::ios::binary) << bytes; }};
}

CaseFile folder(const std::string& name) {
  return {name, [](const std::string& path) { std::filesystem::create_directories(path); }};
}

CaseFile fifo(const std::string& name) {
  return {name, [](const std::string& path) {
            if (::mkfifo(path.c_str(), 0644) != 0) throw std::runtime_error(path + ": mkfifo failed");
          }};
}

CaseFile symlink_to(const std::string& name, const std::string& target) {
  return {name, [target](const std::string& path) { std::filesystem::create_symlink(target, path); }};
}

CaseFile png_declaring(const std::string& name, uint32_t width, uint32_t height, uint8_t colour_type) {
  return {name, [=](const std::string& path) { write_png_declaring(path, width, height, colour_type); }};
}

void make_case_files(const TempDir& dir, const std::vector<CaseFile>& files) {
  for (const CaseFile& f : files) {
    const std::filesystem::path p = dir.path() / f.name;
    std::filesystem::create_directories(p.parent_path());
    f.make(p.string());
  }
}

std::string in_case_dir(std::string text, const TempDir& dir) {
  const std::string key = "@DIR@", path = dir.path().string();
  for (size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + path.size()))
    text.replace(at, key.size(), path);
  return text;
}

std::string check_launch_case(const LaunchCase& c, int seconds) {
  TempDir dir;
  make_case_files(dir, c.files);
  const std::string launch = in_case_dir(c.launch, dir);
  RunOptions options;
  options.appsink = "";
  options.idle_timeout = (GstClockTime)seconds * GST_SECOND;
  options.before_play = [&](GstElement* pipeline) {
    for (const StringProperty& p : c.strings) {
      const size_t dot = p.object.find('.');
      GstElement* e = gst_bin_get_by_name(GST_BIN(pipeline), p.object.substr(0, dot).c_str());
      if (!e) throw std::runtime_error(c.name + ": no element " + p.object);
      GstObject* target = dot == std::string::npos
                              ? GST_OBJECT(gst_object_ref(e))
                              : GST_OBJECT(gst_element_get_static_pad(e, p.object.c_str() + dot + 1));
      if (!target) throw std::runtime_error(c.name + ": no pad " + p.object);
      g_object_set(target, p.property.c_str(), in_case_dir(p.value, dir).c_str(), nullptr);
      gst_object_unref(target);
      gst_object_unref(e);
    }
  };
  RunResult r;
  std::string log;
  within_seconds(2 * seconds, c.name + ": " + launch, [&] {
    GlibLogRecorder recorder;
    r = run_launch(launch, options);
    log = recorder.joined();
  });
  std::string wrong;
  if (r.timed_out) wrong += "no EOS and no error within " + std::to_string(seconds) + " s; ";
  if (c.error.empty()) {
    if (!r.error.empty()) wrong += "error '" + r.error + "' (" + r.error_debug + "); ";
    if (!r.eos && !r.timed_out) wrong += "no EOS; ";
  } else if (r.error.empty() || (r.error + "\n" + r.error_debug).find(c.error) == std::string::npos) {
    wrong += r.error.empty() ? "no error, expected one with '" + c.error + "'; "
                             : "error '" + r.error + "' lacks '" + c.error + "'; ";
  }
  if (!log.empty()) wrong += "logged:\n" + log;
  return wrong.empty() ? "" : c.name + ": " + launch + "\n  " + wrong;
}

}  // namespace prism::test
