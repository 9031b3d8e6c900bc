// Small string helpers shared by the config loader and the CLI.
#pragma once

#include <string>
#include <vector>

namespace prism {

// Edit distance counting insertions, deletions, substitutions and swaps of two adjacent
// characters (optimal string alignment), case-sensitive.
size_t edit_distance(const std::string& a, const std::string& b);

// The candidate closest to `word` when it is close enough to be a plausible typo, else "".
std::string closest_match(const std::string& word, const std::vector<std::string>& candidates);

// "; did you mean 'X'?" for closest_match(word, candidates), or "" when nothing is close.
std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates);

// "a, b, c" (at most `limit` items, then ", ...").
std::string join_list(const std::vector<std::string>& items, size_t limit = 30);

}  // namespace prism
