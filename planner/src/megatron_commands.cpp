// The launch-script reader's simple commands (megatron_interpreter.hpp): assignments and arrays,
// the launch line, calls of the script's own functions and eval, as bash runs them (GNU Bash
// manual, "Simple Commands", "Shell Functions", "Bourne Shell Builtins"). Our own code (no shell is run).
#include <algorithm>
#include <set>

#include "megatron_interpreter.hpp"
#include "preflight/planner/error.hpp"

namespace preflight::megatron_script::interp {

std::optional<Assignment> assignment(std::string_view word) {
    if (word.empty() || !name_start(word[0])) return std::nullopt;
    std::size_t j = 0;
    while (j < word.size() && name_char(word[j])) ++j;
    const bool append = word.substr(j, 2) == "+=";
    if (!append && (j >= word.size() || word[j] != '=')) return std::nullopt;
    return Assignment{std::string(word.substr(0, j)), append, word.substr(j + (append ? 2 : 1))};
}

bool prefix_word(const std::string& w) {
    static const std::set<std::string> words{"export", "local", "readonly", "declare", "typeset", "time", "exec", "nohup",
                                             "env", "eval"};
    return words.count(w) > 0 || (w.size() > 1 && w[0] == '-' && w[1] != '-');
}

namespace {

// Commands that never launch training (their words may still name a .py file).
bool inert_command(const std::string& w) {
    static const std::set<std::string> words{"echo", "printf", "mkdir", "cd", "exit", "set", "source", ".", "cp", "rm",
                                             "ls", "cat", "return", "shift", "trap", "wait", "sleep", "unset", "read",
                                             "break", "continue"};
    return words.count(w) > 0;
}

}  // namespace

// A simple command: its status is a test's, yes for assignments and the commands that set up a
// launch (cd, mkdir, echo: taken to succeed, so `cd DIR && torchrun ...` is read plainly), and
// not decided for any other command (its exit status is not known here). After `eval` the
// words are read again as commands; a name the script defined as a function is called.
Status Interpreter::execute(Ctx c, const std::vector<Item>& items) {
    std::size_t k = 0;
    bool evaluated = false;
    for (; k < items.size() && !items[k].array && prefix_word(items[k].word->text); ++k) {
        const std::string& w = items[k].word->text;
        evaluated = evaluated || w == "eval";
        if (!frames_.empty() && (w == "local" || w == "declare" || w == "typeset")) make_local(items, k + 1);
    }
    if (k == items.size()) return {};
    const int line = items[k].word->line;
    if (!evaluated) {
        const std::string& head = items[k].word->text;
        if (head == "[" || head == "test") return single_bracket(items, k, c.branch);
        if (head == "false") return {Truth::no, 0};
        if (head == "return" && !frames_.empty() && c.branch == frames_.back().branch) frames_.back().returned = true;
        if (inert_command(head) || head == "true" || head == ":") return expand_only(items, k + 1, c.branch), Status{};
        for (std::optional<Assignment> a; k < items.size() && (a = assignment(items[k].word->text)); ++k) {
            if (items[k].array) assign_array(*a, items[k], c.branch);
            else assign(*items[k].word, *a, c.branch);
        }
    }
    std::vector<Value> values;
    for (std::size_t i = k; i < items.size(); ++i)
        for (Value& v : expander(items[i].word->line, true, c.branch).run(items[i].word->text)) values.push_back(std::move(v));
    if (values.empty()) return {};
    if (evaluated) return eval(c, values, line);
    const Word name = values[0].word();
    if (const auto f = functions_.find(name.text); f != functions_.end() && name.unresolved.empty()) {
        named_.insert(name.text);  // called, if through eval or a variable
        return call(f->second, std::vector<Value>(values.begin() + 1, values.end()), c, line);
    }
    std::vector<Word> all;
    for (const Value& v : values) {
        all.push_back(v.word());
        all.back().branch = first(all.back().branch, c.branch);
    }
    if (all[0].text.rfind("--", 0) == 0) {
        plain_.insert(plain_.end(), all.begin(), all.end());
        return {};
    }
    for (std::size_t p = 0; p < all.size(); ++p) {
        const std::string& t = all[p].text;
        if (t.size() > 3 && t.compare(t.size() - 3, 3, ".py") == 0 && t[0] != '-' &&
            t.find_first_of(" \t") == std::string::npos) {
            launch(all, p, line);
            break;
        }
    }
    return {Truth::unknown, 0};
}

// The words of a command that runs nothing the reader follows (:, true, echo ...): expanded only
// for the ${NAME:=word} they may hold (`: ${TP:=2}`, bash's idiom for a default; "Shell
// Parameter Expansion").
void Interpreter::expand_only(const std::vector<Item>& items, std::size_t from, int branch) {
    for (std::size_t i = from; i < items.size(); ++i) {
        const std::string& t = items[i].word->text;
        if (t.find("${") != std::string::npos && t.find('=') != std::string::npos)
            expander(items[i].word->line, true, branch).run(t);
    }
}

// `local NAME[=value]` (declare, typeset) in a function: NAME is the call's own until it returns
// (bash "Shell Functions"); `local NAME` alone leaves it unset there.
void Interpreter::make_local(const std::vector<Item>& items, std::size_t from) {
    for (std::size_t i = from; i < items.size(); ++i) {
        const std::string& w = items[i].word->text;
        if (w.size() > 1 && w[0] == '-' && w.find('g') != std::string::npos) return;  // declare -g: global
        const auto a = assignment(w);
        const std::string name = a ? a->name : w;
        if (name.empty() || !name_start(name[0]) || !std::all_of(name.begin(), name.end(), name_char)) continue;
        const auto it = vars_.find(name);
        const bool added = frames_.back().saved.emplace(name, it == vars_.end() ? std::nullopt : std::optional<Var>(it->second)).second;
        if (added && !a && it != vars_.end()) vars_.erase(it);
    }
}

namespace {

// Pieces without a branch of their own take the one they were assigned under.
void mark(Value& v, int branch) {
    for (Piece& p : v.pieces) p.branch = first(p.branch, branch);
}

// NAME="$NAME rest" (or "${NAME}rest") on a scalar NAME is NAME+="rest": the rest, extended in
// place (bash copies the value; reading it so keeps a value built line by line linear).
std::optional<std::string> self_append_rest(const Assignment& a, const Vars& vars) {
    const auto it = vars.find(a.name);
    if (a.append || it == vars.end() || it->second.array || it->second.values.size() != 1) return std::nullopt;
    const std::string_view raw = a.value;
    for (const std::string& ref : {"\"$" + a.name, "\"${" + a.name + "}"}) {
        if (raw.substr(0, ref.size()) != ref) continue;
        const std::size_t end = ref.size();
        if (ref.back() != '}' && end < raw.size() && name_char(raw[end])) continue;  // "$NAMEX": another name
        return "\"" + std::string(raw.substr(end));
    }
    return std::nullopt;
}

}  // namespace

void Interpreter::assign(const Raw& w, const Assignment& a_in, int branch) {
    const std::optional<std::string> rest = self_append_rest(a_in, vars_);  // a.value views it
    Assignment a = a_in;
    if (rest) a.value = *rest, a.append = true;
    Value value = expander(w.line, false, branch).joined(a.value);
    mark(value, branch);
    Var& v = vars_[a.name];
    if (a.append && v.array) {
        if (v.values.size() >= shell::kMaxArrayElements)
            throw InputError(std::to_string(w.line), "array " + a.name + " grows past " +
                                                         std::to_string(shell::kMaxArrayElements) +
                                                         " elements (kMaxArrayElements)");
        v.values.push_back(std::move(value));
        return;
    }
    if (a.append && !v.values.empty()) {  // extended in place: no copy of what it holds
        Value& whole = v.values[0];
        for (Piece& p : value.pieces) add_piece(whole, std::move(p), w.line, &budget_);
        v.values.resize(1);
        v.array = false;
        return;
    }
    v = Var{{std::move(value)}, false};
}

void Interpreter::assign_array(const Assignment& a, const Item& item, int branch) {
    // Bash expands the elements before it assigns: NAME=("${NAME[@]}" more) keeps NAME's own.
    std::vector<Value> values;
    for (const Raw* e : item.elements)
        for (Value& v : expander(e->line, true, branch).run(e->text)) {
            mark(v, branch);
            values.push_back(std::move(v));
        }
    Var& v = vars_[a.name];
    if (!a.append) v = Var{{}, true};
    v.array = true;  // NAME+=( ... ) on a scalar: its value is element 0
    std::size_t chars = 0;
    for (const Value& x : v.values) chars += x.chars;
    for (Value& x : values) {
        chars += x.chars;
        if (v.values.size() >= shell::kMaxArrayElements || chars > shell::kMaxValueChars)
            throw InputError(std::to_string(item.word ? item.word->line : 0), "array " + a.name + " grows past " +
                                                           std::to_string(shell::kMaxArrayElements) + " elements or " +
                                                           std::to_string(shell::kMaxValueChars) +
                                                           " characters (kMaxArrayElements, kMaxValueChars)");
        v.values.push_back(std::move(x));
    }
}

void Interpreter::launch(const std::vector<Word>& all, std::size_t script_at, int line) {
    if (script_.launches++ > 0) return;
    std::string name = all[0].text.substr(all[0].text.find_last_of('/') + 1);
    // The words between the launcher and the script (none when the line starts with the script:
    // "pretrain_gpt.py --num-layers ..."; fuzz finding: that range was reversed).
    script_.launcher.clear();
    if (script_at > 0) script_.launcher.assign(all.begin() + 1, all.begin() + static_cast<std::ptrdiff_t>(script_at));
    for (const Word& w : script_.launcher)
        if (w.text == "torch.distributed.run" || w.text == "torch.distributed.launch") name = "torchrun";
    script_.launcher_name = script_at == 0 ? "python" : name;
    script_.launch_line = line;
    script_.arguments.assign(all.begin() + static_cast<std::ptrdiff_t>(script_at) + 1, all.end());
}

// A call of a function the script defined: its body read here, with the variables as they are
// now and the call's words as $1 ... and "$@" (bash "Shell Functions", "Positional Parameters").
// Its status is not decided (`return N` is not read).
Status Interpreter::call(const Function& f, const std::vector<Value>& args, Ctx c, int line) {
    if (calls_ >= kMaxCallNesting) return {Truth::unknown, 0};
    Frame frame;
    frame.branch = first(c.branch, f.branch);
    bind_positional(frame, args, line);
    frames_.push_back(std::move(frame));
    read_tokens(f.source, f.start, {true, frames_.back().branch}, true, line);
    restore(frames_.back());
    frames_.pop_back();
    return {Truth::unknown, 0};
}

// The call's words as $1, $2 ... and "$@"; the caller's are kept in `frame` until it returns.
void Interpreter::bind_positional(Frame& frame, const std::vector<Value>& args, int line) {
    for (auto it = vars_.begin(); it != vars_.end();) {
        if (name_start(it->first[0])) {
            ++it;
            continue;
        }
        frame.saved.emplace(it->first, std::move(it->second));
        it = vars_.erase(it);
    }
    Var all{{}, true};
    for (std::size_t i = 0; i < args.size(); ++i) {
        Value v;
        v.line = args[i].line;
        for (const Piece& p : args[i].pieces) add_piece(v, p, line, &budget_);  // copies count (kMaxScriptChars)
        vars_[std::to_string(i + 1)] = Var{{v}, false};
        all.values.push_back(std::move(v));
    }
    vars_["@"] = std::move(all);
}

// What the call hid (the caller's positional parameters, the names made local) as it was.
void Interpreter::restore(Frame& frame) {
    for (auto it = vars_.begin(); it != vars_.end();) it = name_start(it->first[0]) ? std::next(it) : vars_.erase(it);
    for (auto& [name, var] : frame.saved) {
        if (var) vars_[name] = std::move(*var);
        else vars_.erase(name);
    }
}

// eval WORDS: the words, expanded and joined by spaces, read again as commands (bash "Bourne
// Shell Builtins": eval), so CMD="torchrun ... pretrain_gpt.py $ARGS"; eval "$CMD" launches. Each
// line of the text keeps the script line its first word was written on; what is read carries
// the first undecided branch the text came through.
Status Interpreter::eval(Ctx c, const std::vector<Value>& args, int line) {
    if (calls_ >= kMaxCallNesting) return {Truth::unknown, 0};
    std::string text;
    std::vector<int> lines{line};  // the script line of each line of `text`
    bool line_start = true;
    int branch = 0;
    for (const Value& v : args) {
        if (!text.empty()) text += ' ';
        for (const Piece& p : v.pieces) {
            branch = first(branch, p.branch);
            int at = p.line;
            for (const char ch : p.text) {
                text += ch;
                if (ch == '\n') {
                    lines.push_back(line);
                    line_start = true;
                    ++at;
                } else if (line_start && ch != ' ' && ch != '\t') {
                    lines.back() = at != 0 ? at : line;
                    line_start = false;
                }
            }
        }
    }
    std::vector<Raw> toks = lex(text);
    spend(toks.size(), line);
    for (Raw& t : toks) t.line = lines[std::min(static_cast<std::size_t>(std::max(t.line, 1)) - 1, lines.size() - 1)];
    sources_.push_back(std::move(toks));
    return read_tokens(&sources_.back(), 0, {c.run, first(c.branch, branch)}, false, line);
}

// Reads `source` from `start`: one command (a function's body) or to its end (an eval's text),
// then goes back to where the reader was.
Status Interpreter::read_tokens(const std::vector<Raw>* source, std::size_t start, Ctx c, bool one_command, int line) {
    const std::vector<Raw>* was = toks_;
    const std::size_t at = at_;
    toks_ = source;
    at_ = start;
    ++calls_;
    Status st;
    if (one_command) st = command(c);
    else while (peek()) st = list(c, {});
    const std::size_t read = at_ - start;
    --calls_;
    toks_ = was;
    at_ = at;
    if (one_command) spend(read, line);  // an eval's were counted before
    return st;
}

void Interpreter::spend(std::size_t tokens, int line) {
    if ((call_tokens_ += tokens) > kMaxCallTokens)
        throw InputError(std::to_string(line), "the script's function calls and evals read more than " +
                                                   std::to_string(kMaxCallTokens) +
                                                   " words (kMaxCallTokens): they call themselves without end");
}

// A function the script defines and never names as a command does not run in bash. When the
// script launches nothing else, the bodies of those are read at the end, in the order defined,
// with the variables as the script leaves them, and every value read through one names its line
// (a launch line in a function some other script calls is read, said, not lost).
void Interpreter::call_uncalled() {
    std::vector<std::pair<const std::string*, const Function*>> uncalled;
    for (const auto& [name, f] : functions_)
        if (named_.count(name) == 0) uncalled.emplace_back(&name, &f);
    std::sort(uncalled.begin(), uncalled.end(), [](const auto& a, const auto& b) { return a.second->order < b.second->order; });
    for (const auto& [name, f] : uncalled) {
        if (script_.launches > 0) return;
        const int line = note(f->line, "function " + *name + " is defined but never called: its body is read at the end");
        call(*f, {}, {true, line}, f->line);
    }
}

}  // namespace preflight::megatron_script::interp
