// The evaluation's ratio-test decisions (evaluation/texture/ratio_decisions.h): the 8-bit and FP16
// matchers' decisions against the FP32 reference on a case solved by hand, and how differences count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <vector>

#include "match/match.h"
#include "ratio_decisions.h"

namespace prism {
namespace {

// Unit vectors spread evenly over 16 components (0.25 each: no 8-bit saturation) of the groups given.
std::vector<float> spread(std::initializer_list<int> groups) {
  std::vector<float> v(match::kDim, 0.f);
  const float x = 0.25f / std::sqrt(float(groups.size()));
  for (int g : groups)
    for (int k = 0; k < 16; ++k) v[g * 16 + k] = x;
  return v;
}

TEST(RatioDecisions, MatchersDecideAsTheReferenceOnAHandSolvedCase) {
  // Gallery: a (group 0), b (group 1), (a + b)/sqrt 2. Squared distances of unit vectors 2 - 2 dot.
  const std::vector<std::vector<float>> gallery = {spread({0}), spread({1}), spread({0, 1})};
  // Queries: a itself (0 vs 0.586: passes, nearest 0); c, orthogonal to all (2 vs 2: fails);
  // (a + b)/sqrt 2 itself (passes, nearest 2); (a + c)/sqrt 2 (0.586 vs 1.0 < 0.64: passes, nearest 0).
  const std::vector<std::vector<float>> query = {spread({0}), spread({2}), spread({0, 1}), spread({0, 2})};
  auto flat = [](const std::vector<std::vector<float>>& rows) {
    std::vector<float> f;
    for (const auto& r : rows) f.insert(f.end(), r.begin(), r.end());
    return f;
  };
  const std::vector<float> qf = flat(query), gf = flat(gallery);
  std::vector<uint8_t> q8(qf.size()), g8(gf.size());
  std::vector<uint16_t> q16(qf.size()), g16(gf.size());
  for (size_t i = 0; i < qf.size(); ++i) q8[i] = match::quantize_u8(qf[i]), q16[i] = match::float_to_half(qf[i]);
  for (size_t i = 0; i < gf.size(); ++i) g8[i] = match::quantize_u8(gf[i]), g16[i] = match::float_to_half(gf[i]);
  const auto ref = eval::reference_decisions(qf.data(), 4, gf.data(), 3, 0.8f);
  const auto u8 = eval::u8_decisions(q8.data(), 4, g8.data(), 3, 0.8f);
  const auto h = eval::fp16_decisions(q16.data(), 4, g16.data(), 3, 0.8f);
  for (const auto* d : {&ref, &u8, &h}) {
    ASSERT_EQ(d->size(), 4u);
    const char* which = d == &ref ? "fp32" : d == &u8 ? "u8" : "fp16";
    EXPECT_TRUE((*d)[0].pass) << which;
    EXPECT_EQ((*d)[0].nearest, 0) << which;
    EXPECT_FALSE((*d)[1].pass) << which;
    EXPECT_TRUE((*d)[2].pass) << which;
    EXPECT_EQ((*d)[2].nearest, 2) << which;
    EXPECT_TRUE((*d)[3].pass) << which;
    EXPECT_EQ((*d)[3].nearest, 0) << which;
    EXPECT_EQ(eval::compare_decisions(ref, *d).differ(), 0) << which;
  }
  // At ratio 0.7 (0.49 < 0.586) the fourth query fails everywhere; with one gallery descriptor nothing passes.
  EXPECT_FALSE(eval::reference_decisions(qf.data(), 4, gf.data(), 3, 0.7f)[3].pass);
  EXPECT_FALSE(eval::u8_decisions(q8.data(), 4, g8.data(), 3, 0.7f)[3].pass);
  EXPECT_FALSE(eval::fp16_decisions(q16.data(), 4, g16.data(), 3, 0.7f)[3].pass);
  for (const auto& d : eval::u8_decisions(q8.data(), 4, g8.data(), 1, 0.8f)) EXPECT_FALSE(d.pass);
  for (const auto& d : eval::fp16_decisions(q16.data(), 4, g16.data(), 1, 0.8f)) EXPECT_FALSE(d.pass);
  for (const auto& d : eval::reference_decisions(qf.data(), 4, gf.data(), 1, 0.8f)) EXPECT_FALSE(d.pass);
  EXPECT_THROW(eval::u8_decisions(q8.data(), 4, g8.data(), match::kSlot + 1, 0.8f), std::invalid_argument);
}

TEST(RatioDecisions, DifferencesAreFlipsOrAnotherNearestWhenBothPass) {
  using D = eval::RatioDecision;
  const std::vector<D> ref = {{true, 0}, {false, 0}, {true, 2}, {true, 0}, {false, 1}};
  const std::vector<D> other = {{false, 0}, {true, 0}, {true, 1}, {true, 0}, {false, 2}};
  const eval::DecisionDiff d = eval::compare_decisions(ref, other);
  EXPECT_EQ(d.rows, 5);
  EXPECT_EQ(d.flips, 2);
  EXPECT_EQ(d.other_nearest, 1);  // row 4 fails both ways: its nearest makes no match
  EXPECT_EQ(d.differ(), 3);
  EXPECT_EQ(eval::compare_decisions(ref, ref).differ(), 0);
  EXPECT_THROW(eval::compare_decisions(ref, {{true, 0}}), std::invalid_argument);
}

}  // namespace
}  // namespace prism
