// Opening a texture gallery (docs/benchmarks/gallery-open.md): the pack (one log read) against the
// entry files read one by one, cold and warm, next to the disk's sequential read rate. CPU only; it
// measures the disk of the machine it runs on.
//
//   bench_gallery_open [ENTRIES=10000] [REPS=3]
//
// The gallery is made in a fresh folder under TMPDIR (removed at the end) and needs about 2 x 117 KB
// per entry there (the entry files and the pack). Fixture: each entry is 768 SIFT rows (RootSIFT in
// 8 bits, with their keypoints) drawn at random from a pool of real SIFT of 16 random textures
// (tests/support/texture_cases.h), as bench_texture_index does; ids p0000000.. in order. The entry
// files are written directly (Gallery::encode, no fsync: a million acknowledged adds would take
// hours of fsyncs) and the pack is then built by the gallery itself: pack.log removed, one read
// rebuilds it from the entry files (the path a format-1 gallery takes), timed and reported.
//
// Cold: sync(), then posix_fadvise(DONTNEED) on every file of the gallery before each run; the
// kernel keeps the directory's metadata (dentries, inodes) cached, so a cold per-file read here is
// a lower bound of one on a freshly booted machine.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "bench_util.h"
#include "match/match.h"
#include "test_env.h"
#include "texture/features.h"
#include "texture/gallery.h"
#include "gallery_cases.h"

using namespace prism;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double s_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

std::string id_of(size_t i) {
  char b[32];
  std::snprintf(b, sizeof b, "p%07zu", i);
  return b;
}

// Drops every file of `dir` from the page cache (written data synced first: DONTNEED keeps dirty pages).
void drop_cache(const fs::path& dir) {
  ::sync();
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

// Sequential read of one file in 8 MiB reads; returns the bytes read.
uint64_t read_sequentially(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::perror(file.c_str());
    std::exit(1);
  }
  std::vector<char> buf(size_t(8) << 20);
  uint64_t total = 0;
  for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) total += uint64_t(n);
  ::close(fd);
  return total;
}

// What a reader saw: entries and a checksum of their descriptors (every path must agree).
struct Seen {
  size_t entries = 0;
  uint64_t sum = 0;
  void add(const texture::GalleryEntry& e) {
    ++entries;
    // A sample of the descriptors (the gallery's CRC-32 checks them all): the first and last rows.
    const auto& d = e.features.descriptors;
    sum += e.id.size() + d.size();
    for (size_t i = 0; i < std::min<size_t>(d.size(), match::kDim); ++i) sum += d[i] * (i + 1) + d[d.size() - 1 - i];
  }
};

struct Timing {
  double cold = 0, warm = 0;  // medians, seconds
};

// Median cold and warm seconds of `run` (each also checked against `want` when it is set).
Timing measure(const fs::path& dir, int reps, const std::function<Seen()>& run, const Seen* want, const char* what) {
  std::vector<double> cold, warm;
  for (int cache = 0; cache < 2; ++cache) {
    if (cache == 1) run();  // warm-up
    for (int i = 0; i < reps; ++i) {
      if (cache == 0) drop_cache(dir);
      const auto t0 = Clock::now();
      const Seen s = run();
      (cache == 0 ? cold : warm).push_back(s_since(t0));
      if (want && (s.entries != want->entries || s.sum != want->sum)) {
        std::fprintf(stderr, "bench_gallery_open: %s saw %zu entries (checksum %llu), expected %zu (%llu)\n", what,
                     s.entries, (unsigned long long)s.sum, want->entries, (unsigned long long)want->sum);
        std::exit(1);
      }
    }
  }
  return {bench::median(cold), bench::median(warm)};
}

}  // namespace

int main(int argc, char** argv) {
  const size_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 10000;
  const int reps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 3;
  if (n == 0) {
    std::fprintf(stderr, "usage: bench_gallery_open [ENTRIES=10000] [REPS=3]\n");
    return 2;
  }
  std::mt19937 rng(20);
  const test::SiftPool pool = test::sift_pool(16, rng);

  test::TempDir tmp;
  const fs::path dir = tmp.path() / "gallery";
  texture::Gallery::open(dir, /*create=*/true);
  Seen written;
  auto t0 = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    texture::GalleryEntry e = test::pooled_gallery_entry(pool, rng, id_of(i));
    e.source = "generated/" + e.id + ".png";
    e.enrolled_unix = 1800000000;
    const std::vector<uint8_t> bytes = texture::Gallery::encode(e);
    std::ofstream out(dir / "entries" / (e.id + ".tex"), std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    if (!out) {
      std::fprintf(stderr, "bench_gallery_open: cannot write entry %zu under %s\n", i, dir.c_str());
      return 1;
    }
    written.add(e);
  }
  ::sync();
  const double write_s = s_since(t0);
  fs::remove(dir / "pack.log");
  drop_cache(dir);
  t0 = Clock::now();
  Seen rebuilt;
  const texture::Gallery::ReadSummary rs =
      texture::Gallery::for_each_entry(dir, [&](texture::GalleryEntry&& e) { rebuilt.add(e); });
  const double rebuild_s = s_since(t0);
  if (rebuilt.entries != n || rebuilt.sum != written.sum || rs.note.find("rebuilt") == std::string::npos) {
    std::fprintf(stderr, "bench_gallery_open: the pack was not rebuilt as expected (%zu entries; note '%s')\n",
                 rebuilt.entries, rs.note.c_str());
    return 1;
  }
  const uint64_t pack_bytes = fs::file_size(dir / "pack.log");
  uint64_t entry_bytes = 0;
  for (const auto& e : fs::directory_iterator(dir / "entries")) entry_bytes += e.file_size();

  std::printf("bench_gallery_open: %zu entries of %d features (%.1f KB each), pack.log %.2f GB, entry files %.2f GB\n",
              n, match::kSlot, entry_bytes / 1e3 / n, pack_bytes / 1e9, entry_bytes / 1e9);
  std::printf("fixture: entry files written (no fsync) in %.1f s; pack rebuilt from them (cold) in %.1f s\n\n", write_s,
              rebuild_s);
  std::fflush(stdout);

  const Timing seq = measure(
      dir, reps,
      [&] {
        Seen s;
        s.entries = read_sequentially(dir / "pack.log");
        return s;
      },
      nullptr, "sequential read");
  // Up to the first entry: the pack's header walk (and the listing of entries/), no payloads.
  const Timing scan = measure(
      dir, reps,
      [&] {
        struct Stop {};
        try {
          texture::Gallery::for_each_entry(dir, [](texture::GalleryEntry&&) { throw Stop{}; });
        } catch (const Stop&) {
        }
        return Seen{};
      },
      nullptr, "pack scan");
  const Timing stream = measure(
      dir, reps,
      [&] {
        Seen s;
        const auto r = texture::Gallery::for_each_entry(dir, [&](texture::GalleryEntry&& e) { s.add(e); });
        if (!r.from_pack || !r.note.empty()) {
          std::fprintf(stderr, "bench_gallery_open: for_each_entry did not read the pack as it was: '%s'\n",
                       r.note.c_str());
          std::exit(1);
        }
        return s;
      },
      &written, "for_each_entry");
  const Timing open = measure(
      dir, reps,
      [&] {
        Seen s;
        const texture::Gallery g = texture::Gallery::open(dir);
        for (const auto& e : g.entries()) s.add(e);
        return s;
      },
      &written, "Gallery::open");
  // The per-file path (what a gallery without a usable pack costs): the listing, then every entry
  // file read and validated; in slices of 1,000 so that memory stays bounded.
  const Timing files = measure(
      dir, reps,
      [&] {
        Seen s;
        std::vector<fs::path> list = texture::Gallery::list_entry_files(dir);
        std::sort(list.begin(), list.end());
        for (size_t i = 0; i < list.size(); i += 1000) {
          const std::vector<fs::path> slice(list.begin() + i, list.begin() + std::min(list.size(), i + 1000));
          for (const auto& e : texture::Gallery::read_entries(slice)) s.add(e);
        }
        return s;
      },
      &written, "entry files");

  auto row = [&](const char* what, double s, double bytes) {
    std::printf("| %s | %.2f s | %.0f | %.0f MB/s |\n", what, s, n / s, bytes / 1e6 / s);
  };
  std::printf("| open path (%zu entries, median of %d) | time | entries/s | MB/s |\n|---|---:|---:|---:|\n", n, reps);
  row("disk: sequential read of pack.log, 8 MiB reads (cold)", seq.cold, double(pack_bytes));
  row("pack: header walk only, up to the first entry (cold)", scan.cold, double(pack_bytes));
  row("pack: Gallery::for_each_entry (cold)", stream.cold, double(pack_bytes));
  row("pack: Gallery::open (cold)", open.cold, double(pack_bytes));
  row("entry files one by one (cold)", files.cold, double(entry_bytes));
  row("disk: sequential read of pack.log (warm)", seq.warm, double(pack_bytes));
  row("pack: header walk only (warm)", scan.warm, double(pack_bytes));
  row("pack: Gallery::for_each_entry (warm)", stream.warm, double(pack_bytes));
  row("pack: Gallery::open (warm)", open.warm, double(pack_bytes));
  row("entry files one by one (warm)", files.warm, double(entry_bytes));
  const double per_entry = double(pack_bytes) / n;
  std::printf(
      "\n1,000,000 entries = %.0f GB of pack: at this disk's sequential rate %.0f s; pack cold %.0f s; "
      "entry files cold %.0f s (extrapolated linearly from %zu)\n",
      per_entry * 1e6 / 1e9, per_entry * 1e6 / (pack_bytes / seq.cold), stream.cold * 1e6 / n, files.cold * 1e6 / n, n);
  return 0;
}
