// The gallery's pack (internal to kernels/texture/gallery*, not for users): DIR/pack.log, an
// append-only log of the entry files' writes that a reader streams instead of opening every entry
// file, and DIR/pack.dirty, "ID OFFSET INODE": the one write in flight. Its record format is in
// pack_log.cpp; the why and the figures are docs/TEXTUREID.md, "The pack".
//
// How a write is made crash-safe (Gallery::commit_locked, under the writer lock, after prepare_pack):
//   1. pack.dirty written (temporary file, fsync, rename) and the directory fsynced, before the
//      entry file changes: the id, where its record will begin in pack.log, and which pack.log;
//   2. the entry file: entries/.tmp-ID-PID written, fsynced and renamed over ID.tex (or ID.tex
//      unlinked), then entries/ fsynced;
//   3. the record appended at OFFSET and fdatasynced (append_record);
//   4. pack.dirty removed (not fsynced); only then does the write return.
// So an acknowledged write is in the entry files and in the pack, and while pack.dirty exists the
// two differ at most in its id. A crash anywhere in 1-4 leaves pack.dirty behind; the next writer,
// or a reader that can take the lock, finishes that write in O(1) (prepare_pack): pack.log cut back
// to OFFSET (a torn record dropped; at the end instead when INODE says pack.log was replaced since)
// and the id's record appended from its entry file as it is now, old or new (the write was never
// acknowledged), then pack.dirty removed. A crash after 4 at worst brings pack.dirty back: one more
// O(1) recovery. When the record cannot be appended (a full disk), the entry file is put back as it
// was and pack.dirty stays. Readers take no lock: a bad record at the end is a torn tail only where
// pack.dirty says a write began at or before it, and pack.dirty's id is read from its entry file.
// A pack that cannot be trusted (missing, damaged, pack.dirty unreadable) is rebuilt from the entry
// files; a compaction never runs while pack.dirty exists (its OFFSET would point into the old file).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "texture/gallery.h"

namespace prism::texture::store {

// One record: `payload` is an entry file's bytes (a put) or null (a delete).
std::vector<uint8_t> make_record(const std::string& id, const std::vector<uint8_t>* payload);
uint64_t record_size(const std::string& id, uint64_t payload);

// Rewrites DIR/pack.log from `records` (id -> record bytes, written in id order) through a
// temporary file, fsync and rename; the lock is held.
void write_pack(const std::filesystem::path& dir,
                const std::function<void(const std::function<void(const std::vector<uint8_t>&)>&)>& each);

// The pack built anew from the entry files, as they are (bytes copied, not decoded: a damaged entry
// is still the reader's to refuse, and a writer can still repair it); the lock is held. Files that
// are not entries or cannot be read are left out: readers find them by the listing and refuse them.
// Then the marker says format 2 and nothing is in flight.
void rebuild_pack(const std::filesystem::path& dir);

// Appends `record` at `at` (the end of the log) and fdatasyncs it.
void append_record(const std::filesystem::path& dir, uint64_t at, const std::vector<uint8_t>& record);

// The record that makes the pack agree with entries/ID.tex as it is now.
std::vector<uint8_t> record_from_file(const std::filesystem::path& dir, const std::string& id);

// Before a write, with the lock held: a pack the gallery can append to. A gallery without one (an
// older build's, or pack.log lost) gets one built; a write that died in flight (pack.dirty left)
// is finished in O(1): the log is cut back to where that write began appending and the record of
// its id is appended from its entry file as it is (old or new: the write was never acknowledged).
// Returns the log's size and inode.
std::pair<uint64_t, uint64_t> prepare_pack(const std::filesystem::path& dir);

// With the lock held and nothing in flight: rewrites pack.log with only its live records, sorted by
// id, when more than half of it is dead. Returns whether it did.
bool compact_pack(const std::filesystem::path& dir);

using EntrySink = std::function<void(GalleryEntry&&)>;

struct PackRead {
  Gallery::ReadSummary summary;
  uint64_t live = 0, total = 0;
  bool stale_dirty = false;          // pack.dirty was left by a writer that is gone
  std::vector<std::string> damaged;  // ids whose pack record was damaged (read from their entry file)
};

// Reads the gallery through its pack, or returns nullopt (before passing on any entry) when the
// pack cannot be trusted: absent, a bad file header, a bad record that is not a write's torn tail,
// an unreadable pack.dirty. `why` says which.
std::optional<PackRead> read_pack(const std::filesystem::path& dir, const EntrySink& sink, std::string& why);

// The payload of `id`'s latest record in DIR/pack.log (its entry file's bytes), or nullopt: no
// pack, a delete, a write of that id in flight, or a record that cannot be read.
std::optional<std::vector<uint8_t>> pack_copy(const std::filesystem::path& dir, const std::string& id);

}  // namespace prism::texture::store
