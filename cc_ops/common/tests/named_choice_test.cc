#include "cc_ops/common/named_choice.h"

#include "cc_ops/common/tests/harness.h"

namespace {

enum class Color { kRed, kDarkBlue, kGreen };

constexpr het::NamedChoice<Color> kColors[] = {
    {"red", Color::kRed}, {"dark_blue", Color::kDarkBlue}, {"green", Color::kGreen}};

HET_TEST(ANameIsReadWhateverItsCaseAndDashes) {
  Color c = Color::kRed;
  EXPECT_OK(het::ParseNamedChoice("color", "Dark-Blue", kColors, &c));
  EXPECT_TRUE(c == Color::kDarkBlue);
  EXPECT_OK(het::ParseNamedChoice("color", "GREEN", kColors, &c));
  EXPECT_TRUE(c == Color::kGreen);
}

HET_TEST(AnUnknownNameIsRefusedListingEveryChoiceAndChangesNothing) {
  Color c = Color::kGreen;
  EXPECT_INVALID(het::ParseNamedChoice("color", "mauve", kColors, &c),
                 "unknown color 'mauve'; expected red, dark_blue or green");
  EXPECT_TRUE(c == Color::kGreen);
  EXPECT_INVALID(het::ParseNamedChoice("color", "", kColors, &c), "unknown color ''");
}

}  // namespace
