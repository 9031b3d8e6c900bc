#include "reshard.h"

#include <system_error>
#include <thread>
#include <vector>

#include "common/durable_file.h"
#include "texture/gallery.h"

namespace prism::service::reshard {

namespace {

using namespace std::chrono_literals;

// KEYS: prism:shards, prism:split, prism:split:marks; ARGV: N. The writes stream of each parent
// gets its `split` marker; errors: NOSHARDS, SPLITTING <2N>, COUNT <N there>.
constexpr const char* kBeginScript = R"lua(
local n = redis.call('GET', KEYS[1])
if not n then return redis.error_reply('NOSHARDS') end
local s = redis.call('GET', KEYS[2])
if s then return redis.error_reply('SPLITTING ' .. s) end
if n ~= ARGV[1] then return redis.error_reply('COUNT ' .. n) end
local to = tostring(2 * tonumber(n))
redis.call('SET', KEYS[2], to)
redis.call('DEL', KEYS[3])
for k = 0, tonumber(n) - 1 do
  local id = redis.call('XADD', 'prism:shard:' .. k .. ':writes', '*', 'op', 'split', 'reply', '',
                        'deadline_ms', '0', 'entry', '', 'params', '{"shards":' .. to .. '}')
  redis.call('HSET', KEYS[3], tostring(k), id)
end
return to
)lua";

// KEYS as above; ARGV: 2N. Errors: NOSPLIT, OTHER <2N there>.
constexpr const char* kCommitScript = R"lua(
local n = redis.call('GET', KEYS[1])
local s = redis.call('GET', KEYS[2])
if not n or not s then return redis.error_reply('NOSPLIT') end
if s ~= ARGV[1] then return redis.error_reply('OTHER ' .. s) end
redis.call('SET', KEYS[1], s)
redis.call('DEL', KEYS[2])
redis.call('DEL', KEYS[3])
for k = 0, tonumber(n) - 1 do
  redis.call('XADD', 'prism:shard:' .. k .. ':writes', '*', 'op', 'split-commit', 'reply', '',
             'deadline_ms', '0', 'entry', '', 'params', '{"shards":' .. s .. '}')
end
return s
)lua";

std::string refused(const Reply& r) { return r.str.substr(r.str.find(' ') + 1); }

// Why new shard K cannot take reads yet ("" when it can): no replica, or one not live or lagging.
std::string not_ready(Redis& redis, int k) {
  const std::vector<ReplicaStats> replicas = shard::replica_groups(redis, k);
  if (replicas.empty())
    return "shard " + std::to_string(k) + " has no worker yet (no consumer group on " + shard::writes_key(k) + ")";
  for (const ReplicaStats& r : replicas) {
    if (redis.command({"EXISTS", shard::worker_key(k, r.replica)}).integer != 1)
      return "shard " + std::to_string(k) + " replica " + r.replica + " is not live (no " +
             shard::worker_key(k, r.replica) + ")";
    int64_t lag = r.lag;
    if (lag < 0) {  // Redis cannot tell (entries deleted): the last delivered against the stream's last
      const std::vector<shard::StreamEntry> tail =
          shard::stream_entries(redis.command({"XREVRANGE", shard::writes_key(k), "+", "-", "COUNT", "1"}));
      lag = tail.empty() || tail[0].id == r.delivered ? 0 : 1;
    }
    if (lag != 0 || r.pending != 0)
      return "shard " + std::to_string(k) + " replica " + r.replica + " has not applied its stream yet (lag " +
             std::to_string(lag) + ", pending " + std::to_string(r.pending) + ")";
  }
  return {};
}

// A master with Redis replicas (through Sentinel, a failover could lose what replication had not
// sent yet): waits up to 2 s for one to hold the step's writes; std::runtime_error when none did,
// so that the operator checks `status` before going on.
void replicated(Redis& redis, const std::string& step) {
  const Reply role = redis.command({"ROLE"});
  if (role.type != Reply::Type::kArray || role.elements.size() < 3 || role.elements[0].str != "master" ||
      role.elements[2].elements.empty())
    return;  // no replica: nothing to wait for
  const Reply n = redis.command({"WAIT", "1", "2000"}, std::chrono::milliseconds(2000));
  if (n.type != Reply::Type::kInteger || n.integer < 1)
    throw std::runtime_error("the " + step + " is done at " + redis.url() +
                             ", but no Redis replica confirmed it within 2 s: a failover now could lose it; "
                             "check `prism texture reshard status` before the next step");
}

}  // namespace

shard::Layout begin(Redis& redis, int shards) {
  if (shards < 1) throw std::runtime_error("the shard count to split must be 1 or more, not " + std::to_string(shards));
  if (2 * shards > 4096)
    throw std::runtime_error("a split of " + std::to_string(shards) + " shards would make more than 4096");
  const shard::Layout now = shard::read_layout(redis);  // ShardCountUnset, malformed keys: named
  (void)now;
  const Reply r = redis.command(
      {"EVAL", kBeginScript, "3", shard::kShardsKey, shard::kSplitKey, shard::kSplitMarksKey, std::to_string(shards)});
  if (r.error()) {
    const std::string code = r.error_code();
    if (code == "SPLITTING")
      throw std::runtime_error("a split to " + refused(r) + " shards is already in progress at " + redis.url() + " (" +
                               shard::kSplitKey + "): commit it (prism texture reshard commit) before another");
    if (code == "COUNT")
      throw std::runtime_error("the deployment at " + redis.url() + " has " + refused(r) + " shards (" +
                               shard::kShardsKey + "), not " + std::to_string(shards));
    if (code == "NOSHARDS") throw std::runtime_error(shard::kShardsKey + " is not set at " + redis.url());
    throw RedisError("Redis at " + redis.url() + " refused the split's script: " + r.str);
  }
  replicated(redis, "begin");
  return {shards, 2 * shards};
}

CopyResult copy(Redis& redis, int k, const std::filesystem::path& from, const std::filesystem::path& to,
                std::chrono::seconds wait, const std::function<void(const std::string&)>& log) {
  const shard::Layout l = shard::read_layout(redis);
  if (!l.split)
    throw std::runtime_error("no split is in progress at " + redis.url() + " (" + shard::kSplitKey +
                             " is not set): begin one first (prism texture reshard begin)");
  if (k < l.shards || k >= l.split)
    throw std::runtime_error("shard " + std::to_string(k) + " is not a new shard of the split from " +
                             std::to_string(l.shards) + " to " + std::to_string(l.split) + " shards (" +
                             std::to_string(l.shards) + ".." + std::to_string(l.split - 1) + ")");
  const int parent = k - l.shards;
  const Reply mark = redis.command({"HGET", shard::kSplitMarksKey, std::to_string(parent)});
  if (mark.type != Reply::Type::kString)
    throw std::runtime_error(shard::kSplitMarksKey + " at " + redis.url() + " has no marker for shard " +
                             std::to_string(parent) + (mark.error() ? ": " + mark.str : std::string()));
  const shard::StreamId marker = shard::StreamId::parse(mark.str);
  if (!texture::Gallery::exists(from))
    throw std::runtime_error(from.string() + " is not a gallery (the parent shard " + std::to_string(parent) + "'s)");
  std::error_code ec;
  if (std::filesystem::exists(to, ec) && !std::filesystem::is_empty(to, ec))
    throw std::runtime_error(to.string() + " exists and is not empty: the new shard's gallery is made there");
  // The parent's gallery must hold every write before its marker: those went to it alone.
  const std::filesystem::path applied = from / "stream-applied";
  const Clock::time_point give_up = Clock::now() + wait;
  bool said = false;
  for (;;) {
    shard::StreamId at;
    if (std::filesystem::exists(applied, ec)) {
      const std::vector<uint8_t> text = read_file(applied);
      at = shard::StreamId::parse(std::string(text.begin(), text.end()));
    }
    if (marker <= at) break;
    if (Clock::now() >= give_up)
      throw std::runtime_error(
          "the gallery " + from.string() + " has applied its writes up to " + at.str() + ", not yet shard " +
          std::to_string(parent) + "'s split marker " + marker.str() + ", after " + std::to_string(wait.count()) +
          " s: is its worker running (and is this the gallery of shard " + std::to_string(parent) + ")?");
    if (!said && log) log("waiting for " + from.string() + " to apply the split marker " + marker.str());
    said = true;
    std::this_thread::sleep_for(100ms);
  }
  std::filesystem::path tmp = to;
  tmp += ".copying";
  std::filesystem::remove_all(tmp);
  CopyResult out;
  out.marker = marker.str();
  {
    texture::Gallery made = texture::Gallery::open(tmp, /*create=*/true, texture::Gallery::Load::kNoEntries,
                                                   texture::Gallery::read_normalisation(from));
    texture::Gallery::for_each_entry(from, [&](texture::GalleryEntry&& e) {
      ++out.parent_products;
      if (shard::shard_of(e.id, l.split) != k) return;
      made.add(std::move(e));
      ++out.copied;
    });
  }
  if (std::filesystem::exists(to, ec)) std::filesystem::remove(to);  // empty (checked above)
  std::filesystem::rename(tmp, to);
  return out;
}

shard::Layout commit(Redis& redis, std::chrono::seconds wait, const std::function<void(const std::string&)>& log) {
  const shard::Layout l = shard::read_layout(redis);
  if (!l.split)
    throw std::runtime_error("no split is in progress at " + redis.url() + " (" + shard::kSplitKey +
                             " is not set): nothing to commit");
  const Clock::time_point give_up = Clock::now() + wait;
  std::string last;
  for (;;) {
    std::string why;
    for (int k = l.shards; k < l.split && why.empty(); ++k) why = not_ready(redis, k);
    if (why.empty()) break;
    if (Clock::now() >= give_up)
      throw std::runtime_error("not committed: " + why + " (after " + std::to_string(wait.count()) +
                               " s); start the new shards' workers on their copies first");
    if (why != last && log) log("waiting: " + why);
    last = why;
    std::this_thread::sleep_for(100ms);
  }
  const Reply r = redis.command({"EVAL", kCommitScript, "3", shard::kShardsKey, shard::kSplitKey, shard::kSplitMarksKey,
                                 std::to_string(l.split)});
  if (r.error()) {
    if (r.error_code() == "NOSPLIT")
      throw std::runtime_error("no split is in progress at " + redis.url() + " any more (committed meanwhile?)");
    if (r.error_code() == "OTHER")
      throw std::runtime_error("the split in progress at " + redis.url() + " is now to " + refused(r) +
                               " shards, not " + std::to_string(l.split));
    throw RedisError("Redis at " + redis.url() + " refused the commit's script: " + r.str);
  }
  replicated(redis, "commit");
  return {l.split, 0};
}

std::string status(Redis& redis) {
  const shard::Layout l = shard::read_layout(redis);
  if (!l.split) return std::to_string(l.shards) + " shards, no split in progress";
  std::string s = "splitting " + std::to_string(l.shards) + " -> " + std::to_string(l.split) +
                  " shards (reads and answers from the " + std::to_string(l.shards) + " parents)";
  for (int k = l.shards; k < l.split; ++k) {
    const std::string why = not_ready(redis, k);
    s += "\n  shard " + std::to_string(k) + ": " + (why.empty() ? "ready" : why);
  }
  return s;
}

}  // namespace prism::service::reshard
