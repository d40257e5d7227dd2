// The words a user types after a launch script's name, as bash would hand them to it: the
// explorer's "Import launch script with its arguments…" (the CLI's --from-arg, one word each).
#pragma once

#include <QString>
#include <QStringList>

namespace preflight::gui {

// The words of `line` split as bash splits a simple command's arguments, without expansions:
// blanks separate words; '...' keeps everything literally; "..." keeps everything but a
// backslash before $, `, ", \ or a newline, which it removes; outside quotes a backslash keeps the
// next character (and joins lines). "" and '' make an empty word. Returns false with `error`
// set for an unterminated quote or a backslash at the end, and for more than
// limits::kMaxScriptArgs words; `words` is then unchanged.
bool splitShellWords(const QString& line, QStringList& words, QString& error);

}  // namespace preflight::gui
