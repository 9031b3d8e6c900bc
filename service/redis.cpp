#include "redis.h"

#include <hiredis/hiredis.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <csignal>
#include <mutex>

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

}  // namespace

RedisUrl parse_redis_url(const std::string& url) {
  const std::string scheme = "redis://";
  // What messages show: the password (between the user's ':' and the last '@') as ***.
  std::string shown = url;
  const size_t at = url.rfind('@'), start = url.find("://");
  if (at != std::string::npos && start != std::string::npos && start < at) {
    const size_t colon = url.find(':', start + 3);
    if (colon < at) shown = url.substr(0, colon + 1) + "***" + url.substr(at);
  }
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("Redis URL '" + shown + "': " + why +
                                 " (expected redis://[[USER]:PASSWORD@]HOST[:PORT][/DB])");
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
  if (const size_t slash = rest.find('/'); slash != std::string::npos) {
    const std::string db = rest.substr(slash + 1);
    rest.resize(slash);
    if (db.empty() || db.size() > 5 || db.find_first_not_of("0123456789") != std::string::npos)
      throw bad("database '" + db + "' is not a number");
    u.db = std::stoi(db);
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

std::string Reply::error_code() const {
  if (type != Type::kError) return {};
  return str.substr(0, str.find(' '));
}

Redis::Redis(const std::string& url, ms timeout) : url_(parse_redis_url(url)), timeout_(timeout) {
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

void Redis::connect() {
  ignore_sigpipe();
  redisContext* c = redisConnectWithTimeout(url_.host.c_str(), url_.port, to_timeval(timeout_));
  if (!c) throw RedisError("Redis unreachable at " + url_.text + ": out of memory");
  if (c->err) {
    const std::string why = c->errstr;
    redisFree(c);
    throw RedisError("Redis unreachable at " + url_.text + ": " + why);
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
      throw RedisError("Redis at " + url_.text + " refused " + what + ": " + why);
    }
  };
  if (!url_.password.empty()) {
    if (url_.user.empty())
      setup({"AUTH", url_.password}, "AUTH");
    else
      setup({"AUTH", url_.user, url_.password}, "AUTH as '" + url_.user + "'");
  }
  if (url_.db != 0) setup({"SELECT", std::to_string(url_.db)}, "SELECT " + std::to_string(url_.db));
  ctx_ = c;
}

Reply Redis::command(const std::vector<std::string>& argv, ms block) {
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
      return out;
    }
    const int err = ctx_->err, sys = errno;
    const std::string why = ctx_->errstr[0] ? ctx_->errstr : "connection lost";
    disconnect();
    const bool closed = err == REDIS_ERR_EOF || (err == REDIS_ERR_IO && (sys == ECONNRESET || sys == EPIPE));
    if (!(reused && closed && attempt == 0))
      throw RedisError("Redis unreachable at " + url_.text + ": " + why + " (" + argv.at(0) + ")");
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
