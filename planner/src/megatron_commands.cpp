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
    static const std::set<std::string> words{"echo", "printf", "mkdir", "cd", "exit", "set", "cp", "rm",
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
    bool evaluated = false, local = false;
    for (; k < items.size() && !items[k].array && prefix_word(items[k].word->text); ++k) {
        const std::string& w = items[k].word->text;
        evaluated = evaluated || w == "eval";
        if (!frames_.empty() && (w == "local" || w == "declare" || w == "typeset")) local = make_local(items, k + 1);
    }
    // `eval -- WORDS`, `exec -- ...`: -- ends the options (bash "Shell Builtin Commands").
    if (k > 0 && k < items.size() && !items[k].array && items[k].word->text == "--") ++k;
    if (k == items.size()) return {};
    const int line = items[k].word->line;
    if (!evaluated) {
        const std::string& head = items[k].word->text;
        if (head == "[" || head == "test") return single_bracket(items, k, c.branch);
        if (head == "false") return {Truth::no, 0};
        if (head == "return" && !frames_.empty() && c.branch == frames_.back().branch) frames_.back().returned = true;
        if (head == "shift" || head == "set") return positional(items, k, c.branch);
        if (head == "break" || head == "continue") return loop_control(items, k, c.branch);
        if (head == "let" || head.rfind("((", 0) == 0) return arithmetic_assign(items, k, c.branch);
        if (head == "read") return {Truth::unknown, 0};  // a line or end of input: not known (`while read`)
        if (head == "source" || head == ".") return source(c, items, k, line);
        if (head == "cd") change_directory(items, k, c.branch, line);
        if (inert_command(head) || head == "true" || head == ":") return expand_only(items, k + 1, c.branch), Status{};
        for (std::optional<Assignment> a; k < items.size() && (a = assignment(items[k].word->text)); ++k) {
            if (items[k].array) assign_array(*a, items[k], c.branch, local);
            else assign(*items[k].word, *a, c.branch, local);
        }
    }
    std::vector<Value> values;
    for (std::size_t i = k; i < items.size(); ++i)
        for (Value& v : expander(items[i].word->line, true, c.branch).run(items[i].word->text)) values.push_back(std::move(v));
    if (values.empty()) return {};
    if (evaluated) return eval(c, std::move(values), line);
    const Word name = values[0].word();
    if (const auto f = functions_.find(name.text); f != functions_.end() && name.unresolved.empty()) {
        named_.insert(name.text);  // called, if through eval or a variable
        values.erase(values.begin());
        return call(f->second, std::move(values), c, line);
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
            if (helper_python(all, p)) {
                cut(line, "runs " + shell::basename_of(t, "") +
                              " with none of Megatron-LM's model, batch or parallel flags (--num-layers, "
                              "--micro-batch-size, --tensor-model-parallel-size ...): not read as the launch");
                break;
            }
            launch(all, p, line);
            break;
        }
    }
    return {Truth::unknown, 0};
}

// A Python line that is no training launch (a data preprocessor, a checkpoint converter, a
// checker): its script's name says neither train nor finetune, and none of its words is one of
// the flags every Megatron-LM training launch is given (its model shape, batch or parallel
// layout; arguments.py). A word the script leaves open where arguments go (not as a flag's value)
// could hold them, so such a line stays a launch.
bool Interpreter::helper_python(const std::vector<Word>& all, std::size_t script_at) {
    const std::string name = shell::basename_of(all[script_at].text, "");
    if (name.find("train") != std::string::npos || name.find("finetune") != std::string::npos) return false;
    static constexpr std::string_view kTrainingFlags[] = {
        "--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length", "--micro-batch-size",
        "--global-batch-size", "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--train-iters",
        "--train-samples", "--yaml-cfg"};
    for (std::size_t i = script_at + 1; i < all.size(); ++i) {
        const std::string& w = all[i].text;
        const bool value_slot = all[i - 1].text.rfind("--", 0) == 0 && all[i - 1].text.find('=') == std::string::npos &&
                                w.find("[@]") == std::string::npos && w.find("[*]") == std::string::npos;
        if ((!all[i].unresolved.empty() && !value_slot) || w.rfind('@', 0) == 0) return false;  // open, or an argument file
        const std::string_view flag = std::string_view(w).substr(0, w.find('='));
        for (std::string_view f : kTrainingFlags)
            if (flag == f) return false;
    }
    return true;
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
// (bash "Shell Functions"); `local NAME` alone leaves it unset there, and NAME=value is saved
// where it is assigned (after its value is expanded: `local TP=$TP` reads the caller's). False
// for `declare -g` (global).
bool Interpreter::make_local(const std::vector<Item>& items, std::size_t from) {
    for (std::size_t i = from; i < items.size(); ++i) {
        const std::string& w = items[i].word->text;
        if (w.size() > 1 && w[0] == '-' && w.find('g') != std::string::npos) return false;
        if (assignment(w) || !valid_name(w)) continue;
        save_local(w);
    }
    return true;
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

void Interpreter::assign(const Raw& w, const Assignment& a_in, int branch, bool local) {
    const std::optional<std::string> rest = local ? std::nullopt : self_append_rest(a_in, vars_);  // a.value views it
    Assignment a = a_in;
    if (rest) a.value = *rest, a.append = true;
    Value value = expander(w.line, false, branch).joined(a.value);
    mark(value, branch);
    if (local) save_local(a.name), a.append = false;
    const auto was = vars_.find(a.name);
    const bool extend = a.append && was != vars_.end() && (was->second.array || !was->second.values.empty());
    Var& v = var_for_write(a.name, extend);
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

void Interpreter::assign_array(const Assignment& a_in, const Item& item, int branch, bool local) {
    Assignment a = a_in;
    // Bash expands the elements before it assigns: NAME=("${NAME[@]}" more) keeps NAME's own.
    std::vector<Value> values;
    for (const Raw* e : item.elements)
        for (Value& v : expander(e->line, true, branch).run(e->text)) {
            mark(v, branch);
            values.push_back(std::move(v));
        }
    if (local) save_local(a.name), a.append = false;
    Var& v = var_for_write(a.name, a.append && vars_.count(a.name) > 0);
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
// Its status is not decided (`return N` is not read). The words are moved into the call's
// frame: a call costs what its words hold, not what the script's variables do.
Status Interpreter::call(const Function& f, std::vector<Value> args, Ctx c, int line, bool given) {
    if (calls_ >= kMaxCallNesting) {
        cut(line, "function " + f.name + " is called past " + std::to_string(kMaxCallNesting) +
                      " nested calls and evals: its body is not read there (what it sets or launches is not known)");
        return {Truth::unknown, 0};
    }
    Frame frame;
    frame.branch = first(c.branch, f.branch);
    frame.args.sure = args.size();
    for (std::size_t i = 0; i < args.size() && frame.args.sure == args.size(); ++i)
        if (!args[i].word().unresolved.empty()) frame.args.sure = i;  // it may split into any number of words
    frame.args.values = std::move(args);
    frame.args.script = !given;
    frames_.push_back(std::move(frame));
    read_tokens(f.source, f.start, {true, frames_.back().branch}, true, line);
    restore(frames_.back());
    frames_.pop_back();
    return {Truth::unknown, 0};
}

// What the call hid (the names made local) as it was.
void Interpreter::restore(Frame& frame) {
    for (auto& [name, var] : frame.saved) {
        if (var) vars_[name] = std::move(*var);
        else vars_.erase(name);
    }
}

// What the reader does not read (a call or eval the nesting bound cut, a Python line that is no
// launch): said at its line, whatever is read later (a cut call's effects are not known), and
// named if the script is then found to launch nothing.
void Interpreter::cut(int line, std::string what) {
    if (cut_lines_.insert(line).second) script_.not_read.push_back({line, std::move(what)});
}

// eval WORDS: the words, expanded and joined by spaces, read again as commands (bash "Bourne
// Shell Builtins": eval), so CMD="torchrun ... pretrain_gpt.py $ARGS"; eval "$CMD" launches. Each
// line of the text keeps the script line its first word was written on; what is read carries
// the first undecided branch the text came through.
Status Interpreter::eval(Ctx c, std::vector<Value> args, int line) {
    if (calls_ >= kMaxCallNesting) {
        cut(line, "eval past " + std::to_string(kMaxCallNesting) +
                      " nested calls and evals: its text is not read there (what it sets or launches is not known)");
        return {Truth::unknown, 0};
    }
    if (!args.empty() && args[0].text() == "--") args.erase(args.begin());  // eval -- WORDS
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

// `source FILE` / `. FILE`: bash reads FILE's commands in the current shell (bash "Bash Builtins":
// source), so what it assigns and defines stays. The file comes from read_sourced_, a relative
// FILE from $PWD (the script's folder, as when the script runs from there, unless a `cd` moved
// it); its commands take the `source` line as theirs, so a value read from it names that line,
// and ${BASH_SOURCE[0]} is FILE while they are read. Words after FILE are its positional
// parameters while it is read, the caller's again after it; without them it sees the caller's.
// A file the reader cannot name or read is said (Script::not_read) and the script read on
// without it.
Status Interpreter::source(Ctx c, const std::vector<Item>& items, std::size_t k, int line) {
    std::vector<Value> words;
    for (std::size_t i = k + 1; i < items.size(); ++i)
        for (Value& v : expander(items[i].word->line, true, c.branch).run(items[i].word->text)) words.push_back(std::move(v));
    if (words.empty()) return {};
    const Word file = words[0].word();
    const std::string shown = items[k].word->text + " " + items[k + 1].word->text;
    const auto said = [&](const std::string& why) {
        cut(line, shown + ": " + why + ": what it sets is not read");
        return Status{Truth::unknown, 0};
    };
    if (!file.unresolved.empty()) return said("its file is not known (" + open_reference(file.unresolved) + ")");
    if (!read_sourced_) return said(kNoFolder);
    if (calls_ >= kMaxCallNesting)
        return said("past " + std::to_string(kMaxCallNesting) + " nested calls, evals and sourced files");
    std::string path = file.text;
    if (const std::optional<Word> folder = shell::var_word(vars_, "PWD"); folder && !path.empty() && path[0] != '/') {
        if (!folder->unresolved.empty()) return said("its folder is not known (" + open_reference(folder->unresolved) + ")");
        path = folder->text + "/" + path;  // joined, not normalized: the kernel resolves its ".." (through links)
    }
    std::string text;
    try {
        text = read_sourced_(path);
    } catch (const InputError& e) {
        return said(e.what());
    }
    std::vector<Raw> toks = lex(text);
    spend(toks.size(), line);
    for (Raw& t : toks) t.line = line;
    sources_.push_back(std::move(toks));
    // ${BASH_SOURCE[0]} is the file being read; the script's own again after it.
    const auto was = vars_.find("BASH_SOURCE");
    const std::optional<Var> outer = was == vars_.end() ? std::nullopt : std::optional<Var>(was->second);
    Var inner = outer.value_or(Var{{}, true});
    inner.values.insert(inner.values.begin(), words[0]);
    inner.array = true;
    vars_["BASH_SOURCE"] = std::move(inner);
    Args given;  // swapped in for the read, swapped back after (args() is the same frame again then)
    const bool with_args = words.size() > 1;
    if (with_args) {
        given.values.assign(std::make_move_iterator(words.begin() + 1), std::make_move_iterator(words.end()));
        given.sure = given.values.size();
        for (std::size_t i = 0; i < given.values.size() && given.sure == given.values.size(); ++i)
            if (!given.values[i].word().unresolved.empty()) given.sure = i;  // it may split into any number of words
        std::swap(args(), given);
    }
    const Status st = read_tokens(&sources_.back(), 0, c, false, line);
    if (with_args) std::swap(args(), given);
    if (outer) vars_["BASH_SOURCE"] = *outer;
    else vars_.erase("BASH_SOURCE");
    return st;
}

// `cd DIR`: $PWD becomes DIR from it (by name, as bash's logical cd), where DIR and the folder are
// known and the cd is not under an undecided test; else $PWD is not known, and what needs it (a
// relative `source`, $(pwd)) says so. `cd` alone (to $HOME) and `cd -` are not known either.
void Interpreter::change_directory(const std::vector<Item>& items, std::size_t k, int branch, int line) {
    std::vector<std::string> words{"cd"};
    std::string open;
    for (std::size_t i = k + 1; i < items.size() && open.empty(); ++i)
        for (const Value& v : expander(items[i].word->line, true, branch).run(items[i].word->text)) {
            const Word w = v.word();
            if (!w.unresolved.empty()) open = open_reference(w.unresolved);
            words.push_back(w.text);
        }
    std::optional<std::string> pwd;
    if (const std::optional<Word> w = shell::var_word(vars_, "PWD")) {
        if (w->unresolved.empty()) pwd = w->text;
        else if (open.empty()) open = open_reference(w->unresolved);
    }
    const std::optional<std::string> to = open.empty() ? shell::path_command_output({words, {"pwd"}}, pwd) : std::nullopt;
    std::string why = "after the cd at line " + std::to_string(line);
    if (to && branch == 0) {
        set_var("PWD", Var{{Value{{shell::Piece{*to, {}, 0, line}}, line, to->size()}}, false});
        return;
    }
    why += branch != 0 ? ", under an undecided test" : open.empty() ? ", to a folder not known here" : " (" + open + ")";
    set_var("PWD", Var{{Value{{shell::Piece{"$PWD", "PWD" + std::string(1, kOpenWhy) + why, 0, line}}, line, 4}}, false});
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
        throw InputError(std::to_string(line), "the script's function calls, evals and loops read more than " +
                                                   std::to_string(kMaxCallTokens) +
                                                   " words (kMaxCallTokens): they run without end");
}

// A function the script defines and never names as a command does not run in bash. When the
// script launches nothing else, the uncalled ones are read at the end in the order defined, each
// on trial from the variables as the script leaves them, called with no arguments: one that
// launches is kept (the values read through it name its line), one that does not is undone, so
// a helper bash never runs changes nothing (a launch line in a function some other script calls
// is read, said, not lost).
void Interpreter::call_uncalled() {
    std::vector<std::pair<const std::string*, const Function*>> uncalled;
    for (const auto& [name, f] : functions_)
        if (named_.count(name) == 0) uncalled.emplace_back(&name, &f);
    std::sort(uncalled.begin(), uncalled.end(), [](const auto& a, const auto& b) { return a.second->order < b.second->order; });
    for (const auto& [name, f] : uncalled) {
        if (script_.launches > 0) return;
        const int line = note(f->line, "function " + *name + " is defined but never called: its body is read at the end, "
                                                          "called with no arguments");
        begin_subshell();
        const Function body = *f;  // the map may change under the call
        const std::size_t plain = plain_.size();
        call(body, {}, {true, line}, f->line, false);
        end_subshell(script_.launches > 0);
        if (script_.launches == 0) plain_.resize(plain);
    }
}

}  // namespace preflight::megatron_script::interp
