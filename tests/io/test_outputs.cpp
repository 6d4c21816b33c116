// A program's outputs against its inputs (one file under two names, by device and inode) and what
// a failed program puts back (src/io/outputs.hpp); text made safe for markup (src/io/text.hpp).
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "messages.hpp"
#include "tapegrad/io/atomic_file.hpp"
#include "tapegrad/io/outputs.hpp"
#include "tapegrad/io/text.hpp"
#include "temp_dir.hpp"

namespace io = tapegrad::io;
namespace fs = std::filesystem;
using tapegrad::testing::message_of;
using tapegrad::testing::TempDir;

TEST_CASE("same_file compares devices and inodes, not the paths' text") {
  TempDir dir;
  io::write_file_atomic(dir.file("d.txt"), "data");
  io::write_file_atomic(dir.file("e.txt"), "data");
  fs::create_directory(dir.file("sub"));
  fs::create_hard_link(dir.file("d.txt"), dir.file("hard.txt"));
  fs::create_symlink("../d.txt", dir.file("sub/soft.txt"));
  CHECK(io::same_file(dir.file("d.txt"), dir.file("d.txt")));
  CHECK(io::same_file(dir.file("d.txt"), dir.file("sub/../d.txt")));
  CHECK(io::same_file(dir.file("d.txt"), dir.file("hard.txt")));
  CHECK(io::same_file(dir.file("sub/soft.txt"), dir.file("d.txt")));
  CHECK_FALSE(io::same_file(dir.file("d.txt"), dir.file("e.txt")));  // the same bytes, two files
  // files that do not exist yet: one folder and one name
  CHECK(io::same_file(dir.file("new.csv"), dir.file("sub/../new.csv")));
  CHECK_FALSE(io::same_file(dir.file("new.csv"), dir.file("sub/new.csv")));
  fs::create_symlink("../later.csv", dir.file("sub/dangling.csv"));  // a link to a file not made yet
  CHECK(io::same_file(dir.file("sub/dangling.csv"), dir.file("later.csv")));
  CHECK_FALSE(io::same_file(dir.file("none/a"), dir.file("none/a")));  // no folder: nothing to compare
}

TEST_CASE("check_distinct names the first output that is an input or another output") {
  TempDir dir;
  io::write_file_atomic(dir.file("d.txt"), "data");
  fs::create_directory(dir.file("sub"));
  CHECK_NOTHROW(io::check_distinct({{"--log", dir.file("log.csv")}, {"--trace", ""}, {"--dump-tape", ""}},
                                   {{"--data", dir.file("d.txt")}, {"--config", dir.file("sub/../d.txt")}}));
  CHECK(message_of([&] {
          io::check_distinct({{"--log", dir.file("sub/../d.txt")}}, {{"--data", dir.file("d.txt")}});
        }) == "--data " + dir.file("d.txt") + " and --log " + dir.file("sub/../d.txt") + " are one file; give each its own");
  CHECK(message_of([&] {
          io::check_distinct({{"--checkpoint", dir.file("c")}, {"--log", dir.file("./c")}}, {{"--data", dir.file("d.txt")}});
        }) == "--checkpoint " + dir.file("c") + " and --log " + dir.file("./c") + " are one file; give each its own");
}

TEST_CASE("a KeptFile puts back the bytes a write replaced, or removes what was not there") {
  TempDir dir;
  const std::string log = dir.file("a.csv"), plot = dir.file("a.svg"), same = dir.file("same.txt");
  io::write_file_atomic(log, "old log\n");
  io::write_file_atomic(same, "untouched");
  const io::KeptFile kept_log(log), kept_plot(plot), kept_same(same);
  CHECK_FALSE(kept_log.changed());
  CHECK_FALSE(kept_plot.changed());
  io::write_file_atomic(log, "new log\n");
  io::write_file_atomic(plot, "<svg/>");
  CHECK(kept_log.changed());
  CHECK(kept_plot.changed());
  CHECK_FALSE(kept_same.changed());
  kept_log.put_back();
  kept_plot.put_back();
  kept_same.put_back();  // unchanged: nothing to do
  CHECK(io::read_file(log) == "old log\n");
  CHECK_FALSE(io::file_exists(plot));
  CHECK(io::read_file(same) == "untouched");
  CHECK(dir.entries() == std::set<std::string>{"a.csv", "same.txt"});

  // through a symbolic link: the link stays, its target gets its old bytes back
  fs::create_symlink("a.csv", dir.file("link.csv"));
  const io::KeptFile kept_link(dir.file("link.csv"));
  io::write_file_atomic(dir.file("link.csv"), "through the link\n");
  kept_link.put_back();
  CHECK(fs::is_symlink(dir.file("link.csv")));
  CHECK(io::read_file(log) == "old log\n");
}

TEST_CASE("valid_utf8 replaces each invalid byte with U+FFFD and keeps valid text") {
  CHECK(io::valid_utf8("plain ascii") == "plain ascii");
  CHECK(io::valid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80") == "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  CHECK(io::valid_utf8("a\xff" "b") == "a\xef\xbf\xbd" "b");
  CHECK(io::valid_utf8("\xc0\xaf") == "\xef\xbf\xbd\xef\xbf\xbd");            // an overlong '/'
  CHECK(io::valid_utf8("\xed\xa0\x80") == "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");  // a surrogate
  CHECK(io::valid_utf8("cut \xe2\x82") == "cut \xef\xbf\xbd\xef\xbf\xbd");        // truncated at the end
  CHECK(io::valid_utf8(std::string("nul\0byte", 8)) == std::string("nul\0byte", 8));
}

TEST_CASE("xml_text writes markup's characters as entities and forbidden controls as U+FFFD") {
  CHECK(io::xml_text("gpt tiny: notes & <script>alert('x')</script> \"q\"") ==
        "gpt tiny: notes &amp; &lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &quot;q&quot;");
  CHECK(io::xml_text("tab\tline\n") == "tab\tline\n");
  CHECK(io::xml_text("bell\x07 \xff") == "bell\xef\xbf\xbd \xef\xbf\xbd");
}
