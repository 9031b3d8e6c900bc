#include "history_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <set>

namespace prism::test::history {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

bool is_write(const Op& op) { return op.what == "enrol" || op.what == "update" || op.what == "delete"; }

std::string version(int v) { return v == kAbsent ? "absent" : "v" + std::to_string(v); }

std::string seconds(double t) {
  if (std::isinf(t)) return t > 0 ? "never" : "-inf";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f s", t);
  return buf;
}

// A write as the checker sees it: an unknown (or documented-losable) one never completes.
struct Write {
  const Op* op = nullptr;  // nullptr: the empty register at the start
  int value = kAbsent;
  double invoke = -kInf, complete = -kInf;
  bool acknowledged = true;
};

}  // namespace

std::string describe(const Op& op) {
  std::string s = "client " + std::to_string(op.client) + " " + op.what + " " + op.key;
  if (is_write(op))
    s += " = " + version(op.value);
  else if (op.what == "verify" || op.what == "search")
    s += " with " + version(op.value) + "'s image";
  s += " [" + seconds(op.invoke) + ", " + seconds(op.complete) + "] ";
  s += op.outcome == Outcome::kOk ? "ok" : op.outcome == Outcome::kFail ? "refused" : "unknown";
  if (op.may_be_lost) s += " (may be lost: answered without a Redis replica before a failover)";
  if (op.observed) s += std::string(": saw ") + (op.equals ? "" : "not ") + version(op.seen);
  if (!op.note.empty()) s += " (" + op.note.substr(0, 200) + ")";
  return s;
}

Result check(const std::vector<Op>& history, int shards, const std::function<int(const std::string&)>& shard_of) {
  Result res;
  res.ops = history.size();
  std::map<std::string, std::vector<Write>> writes;  // per product, the empty start first
  std::map<int, std::string> written;                // version -> product (versions are written once)
  for (const Op& op : history) {
    if (!is_write(op)) continue;
    ++res.writes;
    std::vector<Write>& w = writes[op.key];
    if (w.empty()) w.push_back(Write{});
    if (op.value != kAbsent) {
      const auto [at, fresh] = written.emplace(op.value, op.key);
      if (!fresh)
        res.violations.push_back("the history writes " + version(op.value) + " twice (" + at->second + ", " + op.key +
                                 "): the checker needs each version written once");
    }
    if (op.outcome == Outcome::kFail) {
      ++res.refused;
      continue;  // not applied: never visible
    }
    const bool known = op.outcome == Outcome::kOk && !op.may_be_lost;
    if (op.outcome == Outcome::kOk) ++res.acknowledged;
    if (op.outcome == Outcome::kUnknown) ++res.unknown;
    if (op.may_be_lost && op.outcome == Outcome::kOk) ++res.may_be_lost;
    w.push_back(Write{&op, op.value, op.invoke, known ? op.complete : kInf, known});
  }

  // Each observation: the read, the product, and what it saw.
  auto observe = [&](const Op& r, bool equals, int seen) {
    ++res.observations;
    std::vector<Write> none{Write{}};
    const auto found = writes.find(r.key);
    const std::vector<Write>& ws = found == writes.end() ? none : found->second;
    std::vector<const Write*> possible;
    for (const Write& w : ws) {
      if (w.invoke >= r.complete) continue;  // invoked after the read ended
      bool superseded = false;
      for (const Write& w2 : ws)
        if (w2.acknowledged && w2.op && w.complete < w2.invoke && w2.complete < r.invoke) superseded = true;
      if (!superseded) possible.push_back(&w);
    }
    for (const Write* w : possible)
      if ((w->value == seen) == equals) return;
    std::string v = "read saw " + std::string(equals ? "" : "not ") + version(seen) + " of " + r.key +
                    ", which no write leaves visible then (possible: ";
    for (size_t i = 0; i < possible.size(); ++i) v += (i ? ", " : "") + version(possible[i]->value);
    v += ")\n  read:  " + describe(r);
    for (const Write& w : ws)
      if (w.op) v += "\n  write: " + describe(*w.op);
    res.violations.push_back(v);
  };

  for (const Op& op : history) {
    if (is_write(op)) {
      if (op.observed) observe(op, op.equals, op.seen);  // a 404 or 409: the state it found
      continue;
    }
    if (op.outcome != Outcome::kOk) continue;  // a read that failed saw nothing
    ++res.reads;
    if (op.what != "search") {
      if (op.observed) observe(op, op.equals, op.seen);
      continue;
    }
    // A search: its coverage, then what it says of its product.
    std::string bad;
    const std::set<int> missing(op.missing_shards.begin(), op.missing_shards.end());
    if (op.shards != shards) bad += " reports " + std::to_string(op.shards) + " shards, not " + std::to_string(shards);
    if (missing.size() != op.missing_shards.size()) bad += "; names a missing shard twice";
    for (const int m : missing)
      if (m < 0 || m >= shards) bad += "; names a missing shard " + std::to_string(m) + " that does not exist";
    if (op.shards_answered + int(missing.size()) != op.shards)
      bad += "; shards_answered " + std::to_string(op.shards_answered) + " + " + std::to_string(missing.size()) +
             " missing != " + std::to_string(op.shards);
    if (op.shards > 0 && std::fabs(op.searched_share - double(op.shards_answered) / op.shards) > 1e-9)
      bad += "; searched_share " + std::to_string(op.searched_share) + " is not shards_answered / shards";
    if (!missing.empty() && !op.allow_partial) bad += "; misses shards without allow_partial";
    for (const std::string& c : op.candidates)
      if (missing.count(shard_of(c))) bad += "; a candidate " + c + " of a missing shard";
    if (!missing.empty()) ++res.partial_searches;
    if (!bad.empty()) res.violations.push_back("search coverage:" + bad + "\n  read:  " + describe(op));
    const bool seen = std::find(op.accepted.begin(), op.accepted.end(), op.key) != op.accepted.end();
    if (seen)
      observe(op, true, op.value);
    else if (!missing.count(shard_of(op.key)))
      observe(op, false, op.value);
  }
  return res;
}

}  // namespace prism::test::history
