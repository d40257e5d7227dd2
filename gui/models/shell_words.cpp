#include "shell_words.hpp"

#include "preflight/planner/limits.hpp"

namespace preflight::gui {

namespace {

bool isBlank(QChar c) { return c == u' ' || c == u'\t' || c == u'\n'; }

// Inside double quotes a backslash escapes only these (bash manual, "Double Quotes").
bool escapableInDoubleQuotes(QChar c) { return c == u'$' || c == u'`' || c == u'"' || c == u'\\' || c == u'\n'; }

}  // namespace

bool splitShellWords(const QString& line, QStringList& words, QString& error) {
    auto fail = [&error](const QString& why) {
        error = why;
        return false;
    };
    QStringList out;
    QString word;
    bool inWord = false;  // a word has begun (a quote begins one even when it ends empty)
    for (qsizetype i = 0; i < line.size(); ++i) {
        const QChar c = line[i];
        if (isBlank(c)) {
            if (inWord) out << word, word.clear(), inWord = false;
            continue;
        }
        inWord = true;
        if (c == u'\\') {
            if (++i >= line.size()) return fail(QStringLiteral("a backslash ends the line: nothing follows it to escape"));
            if (line[i] != u'\n') word += line[i];  // backslash-newline joins the lines
        } else if (c == u'\'') {
            const qsizetype end = line.indexOf(u'\'', i + 1);
            if (end < 0) return fail(QStringLiteral("a single quote is not closed"));
            word += line.mid(i + 1, end - i - 1);
            i = end;
        } else if (c == u'"') {
            for (++i;; ++i) {
                if (i >= line.size()) return fail(QStringLiteral("a double quote is not closed"));
                if (line[i] == u'"') break;
                if (line[i] == u'\\' && i + 1 < line.size() && escapableInDoubleQuotes(line[i + 1])) {
                    if (line[++i] != u'\n') word += line[i];
                } else {
                    word += line[i];
                }
            }
        } else {
            word += c;
        }
    }
    if (inWord) out << word;
    if (static_cast<std::size_t>(out.size()) > limits::kMaxScriptArgs)
        return fail(QStringLiteral("%1 words: at most %2 (limits::kMaxScriptArgs)").arg(out.size()).arg(limits::kMaxScriptArgs));
    words = out;
    return true;
}

}  // namespace preflight::gui
