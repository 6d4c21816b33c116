// The page's files, embedded at build time by embed_assets.cpp from apps/tape/page/.
#pragma once

#include <string_view>

namespace tape::assets {

extern const std::string_view page_html;  // the skeleton, with {{title}}, {{style}}, {{script}}, {{tapes}}
extern const std::string_view page_css;
extern const std::string_view page_js;

}  // namespace tape::assets
