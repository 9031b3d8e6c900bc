#include "redis.h"

#include <hiredis/hiredis.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>

#include "log_line.h"

namespace prism::service {

namespace {

timeval to_timeval(Redis::ms d) {
  timeval tv;
  tv.tv_sec = long(d.count() / 1000);
  tv.tv_usec = long(d.count() % 1000) * 1000;
  return tv;
}

Reply convert(const redisReply* r) {
  Reply out;
  switch (r->type) {
    case REDIS_REPLY_INTEGER:
      out.type = Reply::Type::kInteger;
      out.integer = r->integer;
      break;
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS:
      out.type = Reply::Type::kString;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ERROR:
      out.type = Reply::Type::kError;
      out.str.assign(r->str, r->len);
      break;
    case REDIS_REPLY_ARRAY:
      out.type = Reply::Type::kArray;
      out.elements.reserve(r->elements);
      for (size_t i = 0; i < r->elements; ++i) out.elements.push_back(convert(r->element[i]));
      break;
    default: out.type = Reply::Type::kNil;
  }
  return out;
}

// hiredis writes with write(2): a connection that Redis closed raises SIGPIPE, which would end the
// process. A server ignores it (hiredis's own advice); done once, and only when nobody set a handler.
void ignore_sigpipe() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (sigaction(SIGPIPE, nullptr, &old) == 0 && old.sa_handler == SIG_DFL) std::signal(SIGPIPE, SIG_IGN);
  });
}

// A demoted master's refusal (through sentinels): the command did not run.
bool readonly(const Reply& r) { return r.error() && r.error_code() == "READONLY"; }

// Whether a command's effect is its reply: XREADGROUP delivers entries to its consumer (they enter
// its pending list, and the group's last-delivered ID passes them), XAUTOCLAIM and XCLAIM hand them
// over. Once Redis ran it, a reply lost with the connection is a delivery lost: sent again, it
// delivers what comes after (">": the next entries), and what the first delivered waits in the
// pending list where no consumer reading new entries sees it (a shard worker would apply later
// writes without it). Likewise the commands that pop or move what they answer (BLPOP, BLMOVE, ...):
// sent again, the second finds the list without what the first took, and waits for it in vain (a
// front would wait for its answer until the deadline). Such a command is not retried on a fresh
// connection: its caller gets the RedisError and, reconnecting, reads its pending entries again, or
// where its answer was moved.
bool delivers(const std::vector<std::string>& argv) {
  if (argv.empty()) return false;
  std::string name = argv[0];
  for (char& c : name) c = char(std::toupper(static_cast<unsigned char>(c)));
  static const std::set<std::string> consuming = {
      "XREADGROUP", "XAUTOCLAIM", "XCLAIM",     "BLPOP",     "BRPOP",  "LPOP",  "RPOP",
      "BLMOVE",     "LMOVE",      "BRPOPLPUSH", "RPOPLPUSH", "BLMPOP", "LMPOP", "BZPOPMIN",
      "BZPOPMAX",   "ZPOPMIN",    "ZPOPMAX",    "BZMPOP",    "ZMPOP",  "SPOP",  "GETDEL"};
  return consuming.count(name) > 0;
}

}  // namespace

std::pair<std::string, int> parse_host_port(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos) throw std::invalid_argument("'" + text + "' is not HOST:PORT (no port)");
  const std::string host = text.substr(0, colon), port = text.substr(colon + 1);
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
      std::stoi(port) < 1 || std::stoi(port) > 65535)
    throw std::invalid_argument("'" + text + "': port '" + port + "' is not in 1..65535");
  if (host.empty()) throw std::invalid_argument("'" + text + "' has no host");
  if (host.find_first_of(" \t\r\n[]/@,") != std::string::npos)
    throw std::invalid_argument("'" + text + "': invalid host '" + host + "'");
  return {host, std::stoi(port)};
}

RedisUrl parse_redis_url(const std::string& url) {
  const bool sentinel = url.compare(0, 11, "sentinel://") == 0;
  const std::string scheme = sentinel ? "sentinel://" : "redis://";
  // What messages show: the password (between the user's ':' and the last '@') as ***.
  std::string shown = url;
  const size_t at = url.rfind('@'), start = url.find("://");
  if (at != std::string::npos && start != std::string::npos && start < at) {
    const size_t colon = url.find(':', start + 3);
    if (colon < at) shown = url.substr(0, colon + 1) + "***" + url.substr(at);
  }
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("Redis URL '" + shown + "': " + why +
                                 (sentinel
                                      ? " (expected sentinel://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...]/MASTER[/DB])"
                                      : " (expected redis://[[USER]:PASSWORD@]HOST[:PORT][/DB])"));
  };
  if (url.compare(0, 9, "rediss://") == 0)
    throw bad(
        "TLS (rediss://) is not supported: Debian 12's hiredis 0.14 has none; keep Redis on a private "
        "network or behind a tunnel");
  if (url.compare(0, scheme.size(), scheme) != 0) throw bad("not a redis:// URL");
  RedisUrl u;
  u.text = shown;
  std::string rest = url.substr(scheme.size());
  if (const size_t a = rest.rfind('@'); a != std::string::npos) {
    const std::string info = rest.substr(0, a);
    rest = rest.substr(a + 1);
    auto decode = [&](const std::string& s, const char* what) {
      std::string out;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] != '%') {
          out += s[i];
          continue;
        }
        const auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
        if (i + 2 >= s.size() || !hex(s[i + 1]) || !hex(s[i + 2]))
          throw bad(std::string("bad percent-encoding in the ") + what);
        out += char(std::stoi(s.substr(i + 1, 2), nullptr, 16));
        i += 2;
      }
      return out;
    };
    const size_t colon = info.find(':');
    u.user = decode(info.substr(0, colon), "user name");
    if (colon != std::string::npos) {
      u.password = decode(info.substr(colon + 1), "password");
      if (u.password.empty()) throw bad("empty password");
    } else if (u.user.empty()) {
      throw bad("'@' without a user or password");
    }
    if (u.user.find_first_of(" \t\r\n") != std::string::npos || u.password.find_first_of("\r\n") != std::string::npos)
      throw bad("white space in the user name or a line break in the password");
  }
  if (sentinel) {  // HOST:PORT,.../MASTER[/DB]
    const size_t slash = rest.find('/');
    if (slash == std::string::npos) throw bad("no /MASTER name");
    std::string name = rest.substr(slash + 1);
    rest.resize(slash);
    if (const size_t db_slash = name.find('/'); db_slash != std::string::npos) {
      rest += name.substr(db_slash);  // the /DB, parsed below
      name.resize(db_slash);
    }
    if (name.empty() || name.find_first_of(" \t\r\n") != std::string::npos)
      throw bad("invalid master name '" + name + "'");
    u.master = name;
  }
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest.resize(slash);
    if (db.empty() || db.size() > 5 || db.find_first_not_of("0123456789") != std::string::npos)
      throw bad("database '" + db + "' is not a number");
    u.db = std::stoi(db);
  }
  if (sentinel) {
    for (size_t from = 0; from <= rest.size();) {
      const size_t comma = std::min(rest.find(',', from), rest.size());
      try {
        u.sentinels.push_back(parse_host_port(rest.substr(from, comma - from)));
      } catch (const std::invalid_argument& e) {
        throw bad(std::string("sentinel ") + e.what());
      }
      from = comma + 1;
    }
    u.host = u.sentinels.front().first;  // until the master is known
    u.port = u.sentinels.front().second;
    return u;
  }
  if (const size_t colon = rest.rfind(':'); colon != std::string::npos) {
    const std::string port = rest.substr(colon + 1);
    rest.resize(colon);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos ||
        std::stoi(port) < 1 || std::stoi(port) > 65535)
      throw bad("port '" + port + "' is not in 1..65535");
    u.port = std::stoi(port);
  }
  if (rest.empty()) throw bad("no host");
  if (rest.find_first_of(" \t\r\n[]") != std::string::npos) throw bad("invalid host '" + rest + "'");
  u.host = rest;
  return u;
}

// One per sentinel:// master and process: the address last found and the failovers followed.
struct Redis::SentinelShared {
  RedisUrl url;  // the sentinels and the master's name (the watcher asks them)
  std::mutex mutex;
  std::string address;  // under mutex
  std::atomic<uint64_t> failovers{0};
  std::once_flag watching;
};

namespace {

std::mutex g_sentinel_mutex;
// Under g_sentinel_mutex; never destroyed, as the watchers (below) may log while the process exits.
std::function<void(const std::string&)>& sentinel_log() {
  static auto* log = new std::function<void(const std::string&)>();
  return *log;
}

// The registry key of a sentinel:// URL: its sentinels and master (not the login: one master).
std::string sentinel_key(const RedisUrl& u) {
  std::string key;
  for (const auto& [host, port] : u.sentinels) key += host + ":" + std::to_string(port) + ",";
  return key + "/" + u.master;
}

std::shared_ptr<Redis::SentinelShared> shared_of(const RedisUrl& u, bool make) {
  // A few, kept for good (never destroyed: a scrape of /metrics may ask while the process exits).
  static auto* all = new std::map<std::string, std::shared_ptr<Redis::SentinelShared>>();
  std::lock_guard lock(g_sentinel_mutex);
  const std::string key = sentinel_key(u);
  auto it = all->find(key);
  if (it == all->end()) {
    if (!make) return nullptr;
    it = all->emplace(key, std::make_shared<Redis::SentinelShared>()).first;
    it->second->url = u;
  }
  return it->second;
}

void sentinel_say(const std::string& line) {
  std::function<void(const std::string&)> log;
  {
    std::lock_guard lock(g_sentinel_mutex);
    log = sentinel_log();
  }
  if (log)
    log(line);
  else
    log_line("prism: " + line);
}

}  // namespace

std::optional<SentinelStatus> sentinel_status(const std::string& url) {
  RedisUrl u;
  try {
    u = parse_redis_url(url);
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
  if (u.sentinels.empty()) return std::nullopt;
  SentinelStatus s;
  s.master = u.master;
  if (const std::shared_ptr<Redis::SentinelShared> shared = shared_of(u, /*make=*/false)) {
    std::lock_guard lock(shared->mutex);
    s.address = shared->address;
    s.failovers = shared->failovers;
  }
  return s;
}

void set_sentinel_log(std::function<void(const std::string&)> log) {
  std::lock_guard lock(g_sentinel_mutex);
  sentinel_log() = std::move(log);
}

std::string Reply::error_code() const {
  if (type != Type::kError) return {};
  return str.substr(0, str.find(' '));
}

Redis::Redis(const std::string& url, ms timeout) : url_(parse_redis_url(url)), timeout_(timeout) {
  if (!url_.sentinels.empty()) sentinel_ = shared_of(url_, /*make=*/true);
  if (url_.password.empty())
    if (const char* env = std::getenv("PRISM_REDIS_PASSWORD"); env && *env) url_.password = env;
  if (!url_.user.empty() && url_.password.empty())
    throw std::invalid_argument("Redis URL '" + url_.text + "': user '" + url_.user +
                                "' without a password (write USER:PASSWORD@ or set PRISM_REDIS_PASSWORD)");
}

Redis::~Redis() { disconnect(); }

void Redis::disconnect() {
  if (ctx_) redisFree(ctx_);
  ctx_ = nullptr;
}

std::string Redis::url() const {
  if (!sentinel_ || address_.empty()) return url_.text;
  return url_.text + " (master at " + address_ + ")";
}

uint64_t Redis::failovers() const { return sentinel_ ? sentinel_->failovers.load() : 0; }

bool Redis::stale() const { return sentinel_ && ctx_ && sentinel_->failovers.load() != connected_failovers_; }

namespace {

// The master's address as the first sentinel of `u` to answer names it; RedisError naming each
// sentinel and why when none does. Each is given `timeout` to connect and answer.
std::pair<std::string, int> ask_sentinels(const RedisUrl& u, Redis::ms timeout, std::string& via) {
  std::string why;
  for (const auto& [host, port] : u.sentinels) {
    const std::string at = host + ":" + std::to_string(port);
    redisContext* c = redisConnectWithTimeout(host.c_str(), port, to_timeval(timeout));
    if (!c || c->err) {
      why += "; " + at + ": " + (c ? std::string(c->errstr) : std::string("out of memory"));
      if (c) redisFree(c);
      continue;
    }
    redisSetTimeout(c, to_timeval(timeout));
    const char* argv[] = {"SENTINEL", "get-master-addr-by-name", u.master.c_str()};
    const size_t lens[] = {8, 23, u.master.size()};
    auto* r = static_cast<redisReply*>(redisCommandArgv(c, 3, argv, lens));
    std::string got_host, error;
    int got_port = 0;
    if (!r) {
      error = c->errstr[0] ? c->errstr : "connection lost";
    } else if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && r->element[0]->type == REDIS_REPLY_STRING &&
               r->element[1]->type == REDIS_REPLY_STRING) {
      got_host.assign(r->element[0]->str, r->element[0]->len);
      got_port = std::atoi(r->element[1]->str);
      if (got_host.empty() || got_port < 1 || got_port > 65535) error = "an invalid address";
    } else if (r->type == REDIS_REPLY_NIL) {
      error = "knows no master named '" + u.master + "'";
    } else if (r->type == REDIS_REPLY_ERROR) {
      error = std::string(r->str, r->len);
    } else {
      error = "an unexpected answer";
    }
    if (r) freeReplyObject(r);
    redisFree(c);
    if (error.empty()) {
      via = at;
      return {got_host, got_port};
    }
    why += "; " + at + ": " + error;
  }
  throw RedisError("Redis master '" + u.master + "' not found: no sentinel named it (" + why.substr(2) + ")");
}

// The master's address `address` as the sentinel `via` named it: a change from the one last known
// is a failover, logged once and counted (every connection of the process then reconnects).
// Returns the failovers count after it.
uint64_t note_master(Redis::SentinelShared& shared, const std::string& address, const std::string& via) {
  std::string line;
  uint64_t failovers = 0;
  {
    std::lock_guard lock(shared.mutex);
    if (shared.address.empty()) {
      line = "Redis master '" + shared.url.master + "' is at " + address + " (sentinel " + via + ")";
    } else if (shared.address != address) {
      line = "Redis master '" + shared.url.master + "' failed over: " + shared.address + " -> " + address +
             " (sentinel " + via + ")";
      ++shared.failovers;
    }
    shared.address = address;
    failovers = shared.failovers;
  }
  if (!line.empty()) sentinel_say(line);
  return failovers;
}

// Asks the sentinels every second which master they name, so that a process follows a failover
// whose old master is still up (a switchover, a partition: Sentinel demotes it only seconds later,
// and until then its connections would keep working) at once, as it follows one whose master died.
// One per master and process, from its first connection; detached: it ends with the process.
void watch(const std::shared_ptr<Redis::SentinelShared>& shared) {
  std::thread([shared] {
    for (;;) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      try {
        std::string via;
        const auto [host, port] = ask_sentinels(shared->url, Redis::ms(1000), via);
        note_master(*shared, host + ":" + std::to_string(port), via);
      } catch (const RedisError&) {
        // No sentinel answers: the connections find out for themselves (lost, READONLY).
      }
    }
  }).detach();
}

}  // namespace

std::pair<std::string, int> Redis::resolve_master(std::string& via) { return ask_sentinels(url_, timeout_, via); }

void Redis::connect() {
  ignore_sigpipe();
  std::string host = url_.host, via;
  int port = url_.port;
  if (sentinel_) {
    std::tie(host, port) = resolve_master(via);
    address_ = host + ":" + std::to_string(port);
  }
  redisContext* c = redisConnectWithTimeout(host.c_str(), port, to_timeval(timeout_));
  if (!c) throw RedisError("Redis unreachable at " + url() + ": out of memory");
  if (c->err) {
    const std::string why = c->errstr;
    redisFree(c);
    throw RedisError("Redis unreachable at " + url() + ": " + why);
  }
  // AUTH and SELECT directly, not through command(): its retry on a closed connection reconnects,
  // which would send them again, without end against a server that keeps closing.
  auto setup = [&](const std::vector<std::string>& argv, const std::string& what) {
    std::vector<const char*> args;
    std::vector<size_t> lens;
    for (const std::string& a : argv) {
      args.push_back(a.data());
      lens.push_back(a.size());
    }
    redisSetTimeout(c, to_timeval(timeout_));
    auto* r = static_cast<redisReply*>(redisCommandArgv(c, int(args.size()), args.data(), lens.data()));
    const std::string why = !r                             ? std::string(c->errstr[0] ? c->errstr : "connection lost")
                            : r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len)
                                                           : std::string();
    if (r) freeReplyObject(r);
    if (!why.empty()) {
      redisFree(c);
      throw RedisError("Redis at " + url() + " refused " + what + ": " + why);
    }
  };
  if (!url_.password.empty()) {
    if (url_.user.empty())
      setup({"AUTH", url_.password}, "AUTH");
    else
      setup({"AUTH", url_.user, url_.password}, "AUTH as '" + url_.user + "'");
  }
  if (url_.db != 0) setup({"SELECT", std::to_string(url_.db)}, "SELECT " + std::to_string(url_.db));
  if (sentinel_) {
    // The sentinels may name a master that is a replica by now (a failover they have not finished
    // telling, an old master restarted): ROLE says (a user without ROLE takes the sentinels' word).
    redisSetTimeout(c, to_timeval(timeout_));
    auto* r = static_cast<redisReply*>(redisCommand(c, "ROLE"));
    std::string role;
    if (r && r->type == REDIS_REPLY_ARRAY && r->elements > 0 && r->element[0]->type == REDIS_REPLY_STRING)
      role.assign(r->element[0]->str, r->element[0]->len);
    const bool lost = !r;
    if (r) freeReplyObject(r);
    if (lost || (!role.empty() && role != "master")) {
      redisFree(c);
      throw RedisError("Redis at " + url() +
                       (lost ? " closed the connection (ROLE)" : " is a " + role + ", not the master") + " (sentinel " +
                       via + " named it: a failover in progress?)");
    }
    connected_failovers_ = note_master(*sentinel_, address_, via);
    std::call_once(sentinel_->watching, [this] { watch(sentinel_); });
  }
  ctx_ = c;
}

void Redis::follow_demotion(bool retry, const std::string& what) {
  // What the demoted master refused did not run: once more on the master the sentinels name (every
  // command this deployment sends may run twice), or a RedisError.
  disconnect();
  if (!retry)
    throw RedisError("Redis at " + url() + " is a replica now (" + what +
                     "): waiting for the sentinels to name the new master");
}

Reply Redis::command(const std::vector<std::string>& argv, ms block) {
  if (stale()) disconnect();  // another connection of this process followed a failover
  for (int attempt = 0;; ++attempt) {
    const bool reused = ctx_ != nullptr;
    if (!ctx_) connect();
    redisSetTimeout(ctx_, to_timeval(timeout_ + std::max(block, ms(0))));  // a late caller's block is < 0
    std::vector<const char*> args;
    std::vector<size_t> lens;
    for (const std::string& a : argv) {
      args.push_back(a.data());
      lens.push_back(a.size());
    }
    errno = 0;
    auto* r = static_cast<redisReply*>(redisCommandArgv(ctx_, int(args.size()), args.data(), lens.data()));
    if (r) {
      Reply out = convert(r);
      freeReplyObject(r);
      if (!sentinel_ || !readonly(out)) return out;
      follow_demotion(attempt == 0, out.str + ", " + argv.at(0));
      continue;
    }
    const int err = ctx_->err, sys = errno;
    const std::string why = ctx_->errstr[0] ? ctx_->errstr : "connection lost";
    disconnect();
    const bool closed = err == REDIS_ERR_EOF || (err == REDIS_ERR_IO && (sys == ECONNRESET || sys == EPIPE));
    if (!(reused && closed && attempt == 0) || delivers(argv))
      throw RedisError("Redis unreachable at " + url() + ": " + why + " (" + argv.at(0) + ")");
  }
}

std::vector<Reply> Redis::pipeline(const std::vector<std::vector<std::string>>& commands, bool same_connection) {
  if (stale()) disconnect();
  if (same_connection && !ctx_)
    throw RedisError("Redis unreachable at " + url() + ": the connection was lost (" + commands.at(0).at(0) +
                     ", pipelined)");
  for (int attempt = 0;; ++attempt) {
    const bool reused = ctx_ != nullptr;
    if (!ctx_) connect();
    redisSetTimeout(ctx_, to_timeval(timeout_));
    for (const std::vector<std::string>& argv : commands) {
      std::vector<const char*> args;
      std::vector<size_t> lens;
      for (const std::string& a : argv) {
        args.push_back(a.data());
        lens.push_back(a.size());
      }
      if (redisAppendCommandArgv(ctx_, int(args.size()), args.data(), lens.data()) != REDIS_OK) {
        disconnect();            // the commands queued so far must not go out ahead of the next caller's
        throw std::bad_alloc();  // hiredis's only failure here: its buffer could not grow
      }
    }
    std::vector<Reply> out;
    errno = 0;
    while (out.size() < commands.size()) {
      void* raw = nullptr;
      if (redisGetReply(ctx_, &raw) != REDIS_OK || !raw) break;
      out.push_back(convert(static_cast<redisReply*>(raw)));
      freeReplyObject(raw);
    }
    if (out.size() == commands.size()) {
      if (!sentinel_ || std::none_of(out.begin(), out.end(), readonly)) return out;
      follow_demotion(attempt == 0 && !same_connection, "READONLY, " + commands.at(0).at(0) + ", pipelined");
      continue;
    }
    const int err = ctx_->err, sys = errno;
    const std::string why = ctx_->errstr[0] ? ctx_->errstr : "connection lost";
    disconnect();
    const bool closed = err == REDIS_ERR_EOF || (err == REDIS_ERR_IO && (sys == ECONNRESET || sys == EPIPE));
    if (!(reused && closed && attempt == 0 && out.empty()) || same_connection ||
        std::any_of(commands.begin(), commands.end(), delivers))
      throw RedisError("Redis unreachable at " + url() + ": " + why + " (" + commands.at(0).at(0) + ", pipelined)");
  }
}

RedisPool::RedisPool(const std::string& url, size_t idle, Redis::ms timeout)
    : url_(url), shown_(Redis(url).url()), idle_(idle), timeout_(timeout) {}  // Redis(url) checks, connects not

RedisPool::Lease RedisPool::acquire() {
  {
    std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      std::unique_ptr<Redis> r = std::move(free_.back());
      free_.pop_back();
      return Lease(this, std::move(r));
    }
  }
  return Lease(this, std::make_unique<Redis>(url_, timeout_));
}

RedisPool::Lease::~Lease() {
  if (!redis_ || !pool_) return;
  std::lock_guard lock(pool_->mutex_);
  if (pool_->free_.size() < pool_->idle_) pool_->free_.push_back(std::move(redis_));
}

}  // namespace prism::service
