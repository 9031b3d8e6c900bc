// prism: command-line front end of the Prism tools. Each subcommand lives in its own source file
// and is listed in kCommands below; adding one (e.g. `prism bench`) means one new file, one
// declaration and one table row.
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <string>

#include <gst/gst.h>

namespace prism::cli {
// Subcommands receive argv with argv[0] = "prism SUBCOMMAND" and return the process exit code.
int run_command(int argc, char** argv);
int inspect_command(int argc, char** argv);
int texture_command(int argc, char** argv);
int bow_command(int argc, char** argv);
}  // namespace prism::cli

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*main)(int argc, char** argv);
};

constexpr Command kCommands[] = {
    {"run", "validate and run a YAML pipeline config", prism::cli::run_command},
    {"inspect", "list the elements of the Prism GStreamer plugin", prism::cli::inspect_command},
    {"texture", "texture identification: enrol, search, verify, serve", prism::cli::texture_command},
    {"bow", "bag-of-visual-words scene classification: train, evaluate, classify", prism::cli::bow_command},
};

void print_usage(FILE* out) {
  std::fprintf(out,
               "usage: prism COMMAND [ARGS...]\n"
               "       prism --help | --version\n\ncommands:\n");
  for (const auto& c : kCommands) std::fprintf(out, "  %-9s %s\n", c.name, c.summary);
  std::fprintf(out, "\n'prism COMMAND --help' describes a command.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const std::string first = argv[1];
  if (first == "--help" || first == "-h" || first == "help") {
    print_usage(stdout);
    return 0;
  }
  if (first == "--version") {
    gchar* gst = gst_version_string();
    std::printf("prism %s (%s)\n", PRISM_VERSION, gst);
    g_free(gst);
    return 0;
  }
  for (const auto& c : kCommands) {
    if (first == c.name) {
      std::string name = std::string("prism ") + c.name;
      argv[1] = name.data();
      // The boundary: whatever a command did not handle becomes a message and exit status 1,
      // never std::terminate's abort.
      try {
        return c.main(argc - 1, argv + 1);
      } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "%s: error: out of memory\n", name.c_str());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "%s: error: %s\n", name.c_str(), e.what());
      }
      return 1;
    }
  }
  std::fprintf(stderr, "prism: error: unknown command '%s'\n\n", first.c_str());
  print_usage(stderr);
  return 2;
}
