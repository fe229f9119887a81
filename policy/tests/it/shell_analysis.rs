//! Table tests for shell analysis: what each command string would execute.

use cmdgate_policy::shell::{analyze, Analysis, Context, Limits, RedirectKind, Unanalyzable, Word};

/// Render every executed command as its argv: static words as-is, dynamic words as `⟪raw⟫`.
fn render(cmd: &str) -> Vec<String> {
    match analyze(cmd, &Limits::default()) {
        Analysis::Parsed(s) => s
            .commands
            .iter()
            .map(|c| {
                let mut parts: Vec<String> = c
                    .env
                    .iter()
                    .map(|a| format!("{}={}", a.name, text(&a.value)))
                    .collect();
                parts.extend(c.argv.iter().map(text));
                parts.join(" ")
            })
            .collect(),
        Analysis::Unanalyzable(u) => vec![format!("UNANALYZABLE {}", unanalyzable_kind(&u))],
    }
}

fn unanalyzable_kind(u: &Unanalyzable) -> &'static str {
    match u {
        Unanalyzable::TooLarge { .. } => "TooLarge",
        Unanalyzable::TooDeep { .. } => "TooDeep",
        Unanalyzable::TooManyCommands { .. } => "TooManyCommands",
        Unanalyzable::ParseError { .. } => "ParseError",
        Unanalyzable::BadInput { .. } => "BadInput",
    }
}

fn text(w: &Word) -> String {
    match w {
        Word::Static(s) => s.clone(),
        Word::Dynamic(s) => format!("⟪{s}⟫"),
    }
}

/// `runs!("input" => ["argv of each command", ...])`
macro_rules! runs {
    ($name:ident: $cmd:expr => [$($want:expr),* $(,)?]) => {
        #[test]
        fn $name() {
            let want: Vec<&str> = vec![$($want),*];
            assert_eq!(render($cmd), want, "analysis of {:?}", $cmd);
        }
    };
}

runs!(plain: "ls -la" => ["ls -la"]);
runs!(pipeline: "git log | head -n 5" => ["git log", "head -n 5"]);
runs!(sudo_opts: "sudo -u root -- rm x" => ["rm x"]);
runs!(timeout_signal: "timeout -s KILL 5 rm x" => ["rm x"]);
runs!(xargs_replace: "xargs -I{} rm {}" => ["rm ⟪{}⟫"]);
runs!(env_opts: "env -i -u X FOO=1 rm" => ["FOO=1 rm"]);
runs!(bash_c: "bash -c 'rm x'" => ["rm x"]);
runs!(cmdsub: "echo $(rm x)" => ["rm x", "echo ⟪$(rm x)⟫"]);
runs!(backtick_dq: "echo \"`rm x`\"" => ["rm x", "echo ⟪\"`rm x`\"⟫"]);
runs!(heredoc_sh: "sh <<EOF\nrm -rf x\nEOF\n" => ["rm -rf x"]);
runs!(herestring_bash: "bash <<< 'rm x'" => ["rm x"]);
runs!(ansi_c: "$'\\x72m' x" => ["rm x"]);
runs!(quotes: "r''m \\x" => ["rm x"]);
runs!(nested_bash: "bash -c \"bash -c 'rm x'\"" => ["rm x"]);
runs!(eval_: "eval 'rm x'" => ["rm x"]);
runs!(procsub: "diff <(ls a) <(ls b)" => ["ls a", "ls b", "diff ⟪<(ls a)⟫ ⟪<(ls b)⟫"]);
runs!(func: "f() { rm x; }; f" => ["rm x", "f"]);
runs!(tilde: "cat ~/.ssh/id_rsa" => ["cat ~/.ssh/id_rsa"]);
runs!(unterminated: "echo 'abc" => ["UNANALYZABLE ParseError"]);

/// Contexts of every command, in order.
fn contexts(cmd: &str) -> Vec<Context> {
    match analyze(cmd, &Limits::default()) {
        Analysis::Parsed(s) => s.commands.iter().map(|c| c.context).collect(),
        Analysis::Unanalyzable(u) => panic!("{cmd:?} unanalyzable: {u:?}"),
    }
}

/// `context!("input" => [Context, ...])`
macro_rules! context {
    ($name:ident: $cmd:expr => [$($want:ident),* $(,)?]) => {
        #[test]
        fn $name() {
            assert_eq!(contexts($cmd), vec![$(Context::$want),*], "contexts of {:?}", $cmd);
        }
    };
}

/// Redirections of the first command: (fd, kind, target).
fn redirects(cmd: &str) -> Vec<(Option<u32>, RedirectKind, String)> {
    match analyze(cmd, &Limits::default()) {
        Analysis::Parsed(s) => s.commands[0]
            .redirects
            .iter()
            .map(|r| (r.fd, r.kind, text(&r.target)))
            .collect(),
        Analysis::Unanalyzable(u) => panic!("{cmd:?} unanalyzable: {u:?}"),
    }
}

/// `redirects!("input" => [(fd, Kind, "target"), ...])`
macro_rules! redirects {
    ($name:ident: $cmd:expr => [$(($fd:expr, $kind:ident, $target:expr)),* $(,)?]) => {
        #[test]
        fn $name() {
            let want: Vec<(Option<u32>, RedirectKind, String)> = vec![$(($fd, RedirectKind::$kind, $target.to_owned())),*];
            assert_eq!(redirects($cmd), want, "redirects of {:?}", $cmd);
        }
    };
}

/// Wrappers peeled off the first command, each rendered as its argv.
fn wrappers(cmd: &str) -> Vec<String> {
    match analyze(cmd, &Limits::default()) {
        Analysis::Parsed(s) => s.commands[0]
            .wrappers
            .iter()
            .map(|w| w.iter().map(text).collect::<Vec<_>>().join(" "))
            .collect(),
        Analysis::Unanalyzable(u) => panic!("{cmd:?} unanalyzable: {u:?}"),
    }
}

macro_rules! wrappers {
    ($name:ident: $cmd:expr => [$($want:expr),* $(,)?]) => {
        #[test]
        fn $name() {
            let want: Vec<&str> = vec![$($want),*];
            assert_eq!(wrappers($cmd), want, "wrappers of {:?}", $cmd);
        }
    };
}

// ---- structure: every construct that runs code ----
runs!(and_or: "a && b || c" => ["a", "b", "c"]);
runs!(sequence: "a; b\nc" => ["a", "b", "c"]);
runs!(background: "a & b" => ["a", "b"]);
runs!(subshell: "(a; b)" => ["a", "b"]);
runs!(brace: "{ a; b; }" => ["a", "b"]);
runs!(if_all_branches: "if a; then b; elif c; then d; else e; fi" => ["a", "b", "c", "d", "e"]);
runs!(while_: "while a; do b; done" => ["a", "b"]);
runs!(until_: "until a; do b; done" => ["a", "b"]);
runs!(for_: "for x in 1 2; do echo $x; done" => ["x=⟪1 2⟫", "echo ⟪$x⟫"]);
runs!(for_single: "for x in 1; do :; done" => ["x=1", ":"]);
runs!(for_no_in: "for x; do :; done" => ["x=⟪\"$@\"⟫", ":"]);
runs!(arith_for: "for ((i=0;i<3;i++)); do b; done" => ["⟪$((i=0))⟫", "⟪$((i<3))⟫", "⟪$((i++))⟫", "b"]);
runs!(case_: "case $x in a) b;; c|d) e;; esac" => ["b", "e"]);
runs!(case_subst: "case $(a) in $(b)) c;; esac" => ["a", "b", "c"]);
runs!(function_kw: "function f { a; }; f" => ["a", "f"]);
runs!(function_redirect: "f() { a; } > out" => ["a"]);
runs!(coproc: "coproc a" => ["a"]);
runs!(coproc_named: "coproc N { a; }" => ["a"]);
runs!(negated: "! a" => ["a"]);
runs!(timed: "time a | b" => ["a", "b"]);
runs!(dbl_bracket: "[[ -f x && $y == z ]]" => ["[[ -f x && ⟪$y⟫ == z ]]"]);
runs!(dbl_bracket_subst: "[[ $(a) ]]" => ["a", "[[ -n ⟪$(a)⟫ ]]"]);
runs!(dbl_bracket_arith: "[[ $x -gt 2 ]]" => ["⟪$(($x))⟫", "[[ ⟪$x⟫ -gt 2 ]]"]);
runs!(dbl_bracket_arith_literal: "[[ 1 -lt 2 ]]" => ["[[ 1 -lt 2 ]]"]);
runs!(arith_cmd: "(( x++ ))" => ["⟪$((x++))⟫"]);
runs!(arith_cmd_literal: "(( 1 + 2 ))" => []);
runs!(arith_expansion_cmdsub: "echo $(( $(a) + 1 ))" => ["a", "⟪$(( $(a) + 1 ))⟫", "echo ⟪$(( $(a) + 1 ))⟫"]);
runs!(cmdsub_nested: "a $(b $(c))" => ["c", "b ⟪$(c)⟫", "a ⟪$(b $(c))⟫"]);
runs!(backticks: "a `b`" => ["b", "a ⟪`b`⟫"]);
runs!(backticks_escaped_dollar: "echo `echo \\$HOME`" => ["echo ⟪$HOME⟫", "echo ⟪`echo \\$HOME`⟫"]);
runs!(cmdsub_in_dquote: "echo \"x $(a) y\"" => ["a", "echo ⟪\"x $(a) y\"⟫"]);
runs!(cmdsub_in_assignment_prefix: "X=$(a) b" => ["a", "X=⟪$(a)⟫ b"]);
runs!(cmdsub_in_assignment_only: "X=$(a)" => ["a", "X=⟪$(a)⟫"]);
runs!(cmdsub_in_export: "export X=$(a)" => ["a", "export ⟪X=$(a)⟫"]);
runs!(cmdsub_in_redirect: "a > $(b)" => ["b", "a"]);
runs!(cmdsub_in_heredoc: "cat <<E\n$(a)\nE" => ["a", "cat"]);
runs!(cmdsub_not_in_quoted_heredoc: "cat <<'E'\n$(a)\nE" => ["cat"]);
runs!(cmdsub_in_herestring: "cat <<< $(a)" => ["a", "cat"]);
runs!(cmdsub_in_param_default: "echo ${x:-$(a)}" => ["a", "echo ⟪${x:-$(a)}⟫"]);
runs!(cmdsub_in_param_alt: "echo ${x:+`a`}" => ["a", "echo ⟪${x:+`a`}⟫"]);
runs!(cmdsub_in_param_replace: "echo ${x/$(a)/$(b)}" => ["a", "b", "echo ⟪${x/$(a)/$(b)}⟫"]);
runs!(param_substring: "echo ${x:$i:2}" => ["⟪$(($i))⟫", "echo ⟪${x:$i:2}⟫"]);
runs!(param_array_index: "echo ${a[$i]}" => ["⟪$(($i))⟫", "echo ⟪${a[$i]}⟫"]);
runs!(param_prompt: "echo ${x@P}" => ["⟪${x@P}⟫", "echo ⟪${x@P}⟫"]);
runs!(procsub_in: "a <(b)" => ["b", "a ⟪<(b)⟫"]);
runs!(procsub_out: "a >(b)" => ["b", "a ⟪>(b)⟫"]);
runs!(procsub_redirect: "a < <(b)" => ["b", "a"]);
runs!(array_assignment: "a=(x $(b))" => ["b", "a=⟪a=(x $(b))⟫"]);
runs!(array_element_assignment: "a[$(b)]=1" => ["b", "⟪$(($(b)))⟫", "a[$(b)]=1"]);
runs!(append_assignment: "PATH+=:/x" => ["PATH=⟪PATH+=:/x⟫"]);

// ---- words: quote removal and what is dynamic ----
runs!(single_quotes: "echo 'a b'" => ["echo a b"]);
runs!(double_quotes: "echo \"a b\"" => ["echo a b"]);
runs!(mixed_quotes: "e'c'\"h\"o x" => ["echo x"]);
runs!(escaped_space: "echo a\\ b" => ["echo a b"]);
runs!(escape_in_dquote: "echo \"a\\\"b\"" => ["echo a\"b"]);
runs!(ansi_c_newline: "echo $'a\\nb'" => ["echo a\nb"]);
runs!(ansi_c_hex: "echo $'\\x41'" => ["echo A"]);
runs!(ansi_c_unicode: "echo $'\\u00e9'" => ["echo é"]);
runs!(ansi_c_control: "echo $'\\cA'" => ["echo \u{1}"]);
runs!(ansi_c_nul: "echo $'a\\0b'" => ["echo ⟪$'a\\0b'⟫"]);
runs!(ansi_c_quote: "echo $'it\\'s'" => ["echo it's"]);
runs!(var: "echo $x" => ["echo ⟪$x⟫"]);
runs!(var_braced: "echo ${x}" => ["echo ⟪${x}⟫"]);
runs!(var_in_single: "echo '$x'" => ["echo $x"]);
runs!(special_param: "echo $? $$ $@" => ["echo ⟪$?⟫ ⟪$$⟫ ⟪$@⟫"]);
runs!(glob_star: "ls *.rs" => ["ls ⟪*.rs⟫"]);
runs!(glob_question: "ls a?" => ["ls ⟪a?⟫"]);
runs!(glob_bracket: "ls [ab]" => ["ls ⟪[ab]⟫"]);
runs!(glob_quoted: "ls '*.rs'" => ["ls *.rs"]);
runs!(lone_bracket: "[ -f x ]" => ["[ -f x ]"]);
runs!(extglob: "ls @(a|b)" => ["ls ⟪@(a|b)⟫"]);
runs!(brace_expansion: "echo {a,b}" => ["echo ⟪{a,b}⟫"]);
runs!(brace_range: "echo {1..3}" => ["echo ⟪{1..3}⟫"]);
runs!(brace_literal: "echo {}" => ["echo {}"]);
runs!(brace_single: "echo {x}" => ["echo {x}"]);
runs!(tilde_alone: "cd ~" => ["cd ~"]);
runs!(tilde_slash: "ls ~/src" => ["ls ~/src"]);
runs!(tilde_user_dynamic: "ls ~root" => ["ls ⟪~root⟫"]);
runs!(tilde_plus_dynamic: "ls ~+/x" => ["ls ⟪~+/x⟫"]);
runs!(tilde_quoted: "ls '~'" => ["ls ~"]);
runs!(tilde_middle: "echo a~b" => ["echo a~b"]);
runs!(arith: "echo $((1+2))" => ["echo ⟪$((1+2))⟫"]);
runs!(arith_hex: "echo $((0x1f + 2#101))" => ["echo ⟪$((0x1f + 2#101))⟫"]);
runs!(arith_var_runs: "echo $((x+1))" => ["⟪$((x+1))⟫", "echo ⟪$((x+1))⟫"]);
runs!(line_continuation: "ec\\\nho x" => ["echo x"]);
runs!(comment_ignored: "a # b; c" => ["a"]);
runs!(assignment_only: "x=1" => ["x=1"]);
runs!(assignment_then_command: "x=1 y=2 cmd" => ["x=1 y=2 cmd"]);
runs!(gettext_string: "echo $\"hi\"" => ["echo hi"]);
runs!(absolute_command: "/bin/rm x" => ["/bin/rm x"]);

// ---- wrappers ----
runs!(sudo_plain: "sudo rm x" => ["rm x"]);
runs!(sudo_user: "sudo -u bob rm x" => ["rm x"]);
runs!(sudo_attached: "sudo -ubob rm x" => ["rm x"]);
runs!(sudo_long: "sudo --user=bob --preserve-env rm x" => ["rm x"]);
runs!(sudo_cluster: "sudo -nE rm x" => ["rm x"]);
runs!(sudo_edit: "sudo -e /etc/hosts" => ["sudo -e /etc/hosts"]);
runs!(sudo_list: "sudo -l" => ["sudo -l"]);
runs!(sudo_unknown: "sudo --bogus rm x" => ["⟪--bogus rm x⟫ --bogus rm x"]);
runs!(sudo_path: "/usr/bin/sudo rm x" => ["rm x"]);
runs!(doas_: "doas -u root rm x" => ["rm x"]);
runs!(env_plain: "env rm x" => ["rm x"]);
runs!(env_assign: "env A=1 B=2 rm x" => ["A=1 B=2 rm x"]);
runs!(env_unset_chdir: "env -u A -C /tmp rm x" => ["rm x"]);
runs!(env_dash: "env - A=1 rm x" => ["A=1 rm x"]);
runs!(env_alone: "env" => ["env"]);
runs!(env_only_assign: "env A=1" => ["env A=1"]);
runs!(env_split_string: "env -S 'rm -f' x" => ["rm -f x"]);
runs!(env_split_long: "env --split-string='rm x'" => ["rm x"]);
runs!(env_dynamic_word: "env \"$A\" rm" => ["⟪\"$A\" rm⟫ ⟪\"$A\"⟫ rm"]);
runs!(command_plain: "command rm x" => ["rm x"]);
runs!(command_p: "command -p rm x" => ["rm x"]);
runs!(command_v: "command -v rm" => ["command -v rm"]);
runs!(builtin_: "builtin echo x" => ["echo x"]);
runs!(exec_: "exec -a name rm x" => ["rm x"]);
runs!(exec_redirect_only: "exec 2>/dev/null" => ["exec"]);
runs!(time_cmd: "/usr/bin/time -f %e -o out rm x" => ["rm x"]);
runs!(nice_n: "nice -n 5 rm x" => ["rm x"]);
runs!(nice_old: "nice -5 rm x" => ["rm x"]);
runs!(nohup_: "nohup rm x" => ["rm x"]);
runs!(timeout_plain: "timeout 5 rm x" => ["rm x"]);
runs!(timeout_kill_after: "timeout -k 1 --signal=TERM 5s rm x" => ["rm x"]);
runs!(timeout_attached: "timeout -sKILL 5 rm x" => ["rm x"]);
runs!(stdbuf_: "stdbuf -o L -eL rm x" => ["rm x"]);
runs!(ionice_: "ionice -c 3 rm x" => ["rm x"]);
runs!(ionice_pid: "ionice -p 1" => ["ionice -p 1"]);
runs!(setsid_: "setsid -f rm x" => ["rm x"]);
runs!(chrt_: "chrt -f 10 rm x" => ["rm x"]);
runs!(taskset_: "taskset -c 0 rm x" => ["rm x"]);
runs!(taskset_pid: "taskset -p 1" => ["taskset -p 1"]);
runs!(xargs_plain: "xargs rm" => ["rm ⟪<xargs input>⟫"]);
runs!(xargs_opts: "xargs -0 -n 1 -P 4 rm -f" => ["rm -f ⟪<xargs input>⟫"]);
runs!(xargs_default_echo: "xargs" => ["echo ⟪<xargs input>⟫"]);
runs!(xargs_i_legacy: "xargs -i rm {}" => ["rm ⟪{}⟫"]);
runs!(xargs_replace_long: "xargs --replace=F mv F F.bak" => ["mv ⟪F⟫ ⟪F.bak⟫"]);
runs!(xargs_sh_c: "xargs sh -c 'rm \"$1\"' _" => ["rm ⟪\"$1\"⟫"]);
runs!(watch_: "watch -n 1 rm x" => ["rm x"]);
runs!(watch_exec: "watch -x rm x" => ["rm x"]);
runs!(flock_cmd: "flock /tmp/l rm x" => ["rm x"]);
runs!(flock_c: "flock -w 5 /tmp/l -c 'rm x'" => ["rm x"]);
runs!(busybox_: "busybox rm x" => ["rm x"]);
runs!(unbuffer_: "unbuffer rm x" => ["rm x"]);
runs!(parallel_unknown: "parallel rm ::: a" => ["⟪rm ::: a⟫ rm ::: a"]);
runs!(wrapper_chain: "sudo env A=1 nice timeout 5 rm x" => ["A=1 rm x"]);
runs!(git_c_not_wrapper: "git -C /tmp rm x" => ["git -C /tmp rm x"]);
runs!(timeout_no_command: "timeout 5" => ["timeout 5"]);

// ---- re-entry ----
runs!(sh_c: "sh -c 'a; b'" => ["a", "b"]);
runs!(bash_lc: "bash -lc 'a | b'" => ["a", "b"]);
runs!(bash_opts_c: "bash -e -o pipefail -c 'a'" => ["a"]);
runs!(bash_c_args: "bash -c 'rm \"$0\"' x" => ["rm ⟪\"$0\"⟫"]);
runs!(zsh_c: "zsh -c a" => ["a"]);
runs!(dash_c: "dash -c a" => ["a"]);
runs!(ksh_c: "ksh -c a" => ["a"]);
runs!(bash_dynamic: "bash -c \"$X\"" => ["⟪\"$X\"⟫"]);
runs!(bash_script: "bash script.sh" => ["bash script.sh"]);
runs!(bash_stdin_pipe: "echo a | bash" => ["echo a", "bash"]);
runs!(bash_heredoc: "bash <<EOF\na\nb\nEOF" => ["a", "b"]);
runs!(bash_heredoc_quoted: "bash <<'EOF'\na $x\nEOF" => ["a ⟪$x⟫"]);
runs!(bash_heredoc_dynamic: "bash <<EOF\na $x\nEOF" => ["⟪a $x\n⟫"]);
runs!(bash_s_herestring: "bash -s <<< 'a'" => ["a"]);
runs!(sh_herestring: "sh <<< 'rm x'" => ["rm x"]);
runs!(eval_args: "eval a b" => ["a b"]);
runs!(eval_quoted: "eval 'a; b'" => ["a", "b"]);
runs!(eval_dynamic: "eval \"$x\"" => ["⟪\"$x\"⟫"]);
runs!(eval_nested: "eval \"eval 'a'\"" => ["a"]);
runs!(nested_three: "sh -c \"bash -c 'eval a'\"" => ["a"]);
runs!(source_not_reentered: "source f.sh" => ["source f.sh"]);
runs!(dot_not_reentered: ". f.sh" => [". f.sh"]);
runs!(trap_code: "trap 'a' EXIT" => ["trap a EXIT", "a"]);
runs!(trap_list: "trap -l" => ["trap -l"]);
runs!(sudo_bash_c: "sudo bash -c 'a'" => ["a"]);
runs!(xargs_bash_c: "xargs bash -c 'a'" => ["a"]);
runs!(env_prefix_inherited: "A=1 bash -c 'b'" => ["A=1 b"]);

// ---- contexts ----
context!(ctx_top: "a | b" => [TopLevel, TopLevel]);
context!(ctx_cmdsub: "a $(b)" => [CommandSubstitution, TopLevel]);
context!(ctx_backtick: "a `b`" => [CommandSubstitution, TopLevel]);
context!(ctx_procsub: "a <(b)" => [ProcessSubstitution, TopLevel]);
context!(ctx_function: "f() { a; }" => [FunctionBody]);
context!(ctx_reentered: "bash -c a" => [Reentered]);
context!(ctx_eval: "eval a" => [Reentered]);
context!(ctx_heredoc_shell: "sh <<E\na\nE" => [Reentered]);

// ---- redirections ----
redirects!(redir_write: "a > f" => [(None, Write, "f")]);
redirects!(redir_append: "a >> f" => [(None, Append, "f")]);
redirects!(redir_clobber: "a >| f" => [(None, Write, "f")]);
redirects!(redir_read: "a < f" => [(None, Read, "f")]);
redirects!(redir_readwrite: "a <> f" => [(None, ReadWrite, "f")]);
redirects!(redir_fd: "a 2> f" => [(Some(2), Write, "f")]);
redirects!(redir_dup: "a 2>&1" => [(Some(2), Duplicate, "1")]);
redirects!(redir_close: "a 2>&-" => [(Some(2), Duplicate, "-")]);
redirects!(redir_dup_file: "a >& f" => [(None, WriteBoth, "f")]);
redirects!(redir_both: "a &> f" => [(None, WriteBoth, "f")]);
redirects!(redir_both_append: "a &>> f" => [(None, AppendBoth, "f")]);
redirects!(redir_heredoc: "a <<E\nx\nE" => [(None, HereDoc, "x\n")]);
redirects!(redir_herestring: "a <<< 'x y'" => [(None, HereString, "x y")]);
redirects!(redir_dynamic_target: "a > $f" => [(None, Write, "⟪$f⟫")]);
redirects!(redir_tilde: "a > ~/.bashrc" => [(None, Write, "~/.bashrc")]);
redirects!(redir_group_inherited: "{ a; } > f" => [(None, Write, "f")]);
redirects!(redir_subshell_inherited: "(a) 2>/dev/null" => [(Some(2), Write, "/dev/null")]);
redirects!(redir_order: "a < in > out" => [(None, Read, "in"), (None, Write, "out")]);
redirects!(redir_bash_c_inherited: "bash -c 'a' > f" => [(None, Write, "f")]);

// ---- wrappers recorded ----
wrappers!(wrap_sudo: "sudo -u root -- rm x" => ["sudo -u root --"]);
wrappers!(wrap_chain: "nice timeout 5 rm" => ["nice", "timeout 5"]);
wrappers!(wrap_bash_c: "bash -c 'rm'" => ["bash -c rm"]);
wrappers!(wrap_none: "rm x" => []);

// ---- unanalyzable ----
runs!(bad_unterminated_single: "echo 'abc" => ["UNANALYZABLE ParseError"]);
runs!(bad_unterminated_double: "echo \"abc" => ["UNANALYZABLE ParseError"]);
runs!(bad_unterminated_cmdsub: "echo $(ls" => ["UNANALYZABLE ParseError"]);
runs!(bad_unterminated_backtick: "echo `ls" => ["UNANALYZABLE ParseError"]);
runs!(bad_unterminated_if: "if a; then b" => ["UNANALYZABLE ParseError"]);
runs!(bad_unterminated_brace: "{ a;" => ["UNANALYZABLE ParseError"]);
runs!(bad_unterminated_subshell: "(a" => ["UNANALYZABLE ParseError"]);
runs!(bad_stray_then: "then a" => ["UNANALYZABLE ParseError"]);
runs!(bad_pipe_end: "a |" => ["UNANALYZABLE ParseError"]);
runs!(bad_bash_c_inner: "bash -c 'echo \"x'" => ["UNANALYZABLE ParseError"]);
runs!(bad_nul: "a\0b" => ["UNANALYZABLE BadInput"]);
runs!(bad_tilde_number: "ls ~99999999999999999999999" => ["UNANALYZABLE BadInput"]);
runs!(bad_deep_parens: &format!("{}a{}", "(".repeat(60), ")".repeat(60)) => ["UNANALYZABLE TooDeep"]);
runs!(bad_deep_cmdsub: &format!("a {}b{}", "$(".repeat(60), ")".repeat(60)) => ["UNANALYZABLE TooDeep"]);
runs!(bad_deep_if: &format!("{}a{}", "if a; then ".repeat(60), "; fi".repeat(60)) => ["UNANALYZABLE TooDeep"]);
runs!(shallow_reentry: "eval eval a" => ["a"]);

#[test]
fn too_large() {
    let limits = Limits {
        max_len: 10,
        ..Limits::default()
    };
    assert!(matches!(
        analyze("echo 0123456789", &limits),
        Analysis::Unanalyzable(Unanalyzable::TooLarge { len: 15, max: 10 })
    ));
}

#[test]
fn too_many_commands() {
    let cmd = vec!["a"; 600].join(";");
    assert!(matches!(
        analyze(&cmd, &Limits::default()),
        Analysis::Unanalyzable(Unanalyzable::TooManyCommands { .. })
    ));
}

#[test]
fn too_deep_reentry() {
    // Each `eval` re-enters the rest of its arguments one level deeper.
    let cmd = format!("{}a", "eval ".repeat(20));
    assert!(matches!(
        analyze(&cmd, &Limits::default()),
        Analysis::Unanalyzable(Unanalyzable::TooDeep { .. })
    ));
}

#[test]
fn functions_are_listed() {
    let Analysis::Parsed(s) = analyze("f() { a; }; function g { b; }", &Limits::default()) else {
        panic!()
    };
    assert_eq!(s.functions, vec!["f".to_owned(), "g".to_owned()]);
}
// brush-parser's tokenizer allocates forever on these (found by proptest); refused up front.
runs!(bad_heredoc_operator_delimiter: "$( << (( x #" => ["UNANALYZABLE ParseError"]);
// brush-parser took the first of two blanks as an empty here-tag inside a substitution and looped
// at the end of the input, allocating without bound (found by `shell_properties` in CI).
runs!(bad_heredoc_two_blanks: "$(<<  n " => ["UNANALYZABLE ParseError"]);
runs!(bad_heredoc_two_blanks_tab: "$(cat <<-\t n\t" => ["UNANALYZABLE ParseError"]);
runs!(bad_heredoc_two_blanks_top: "cat <<  EOF" => ["UNANALYZABLE ParseError"]);
// The same loop with a closing brace for a tag inside `${` (also found by `shell_properties`).
runs!(bad_heredoc_brace_delimiter: "\"${<< } $(  " => ["UNANALYZABLE ParseError"]);
runs!(heredoc_quoted_punctuated: "cat <<'END_OF-TEXT.v2'\nx\nEND_OF-TEXT.v2\n" => ["cat"]);
runs!(bad_heredoc_paren_delimiter: "$( << )) #" => ["UNANALYZABLE ParseError"]);
runs!(bad_heredoc_no_delimiter: "cat <<" => ["UNANALYZABLE ParseError"]);
runs!(heredoc_dash: "cat <<-EOF\n\tx\nEOF" => ["cat"]);
runs!(shift_in_arith: "echo $(( 1 << 2 ))" => ["echo ⟪$(( 1 << 2 ))⟫"]);
// brush-parser panics on an fd number that does not fit an i32: refused up front.
runs!(bad_huge_fd: "echo 99999999999>x" => ["UNANALYZABLE BadInput"]);
redirects!(redir_big_fd_ok: "a 255>f" => [(Some(255), Write, "f")]);
// A trailing backslash joins the next line into the command (found by proptest).
runs!(continuation_joins_next_line: "[ \\\nrm x" => ["[ rm x"]);
// brush-parser backtracks exponentially on unclosed parentheses (found by fuzzing): bounded.
runs!(bad_unclosed_parens: "((((((dire&ho (((((((((((((Z(((((((((((((((((((((abc" => ["UNANALYZABLE TooDeep"]);
runs!(nested_parens_ok: "(cd x && (ls; (pwd)))" => ["cd x", "ls", "pwd"]);
// brush-parser reads `( (` as arithmetic: the command is then a dynamic arithmetic one, never a read.
runs!(spaced_double_paren: "( ( a ) )" => ["⟪$((a))⟫"]);
runs!(arith_parens_ok: "echo $(( ((1+2)*(3+4)) ))" => ["echo ⟪$(( ((1+2)*(3+4)) ))⟫"]);
// brush-parser backtracks exponentially on unclosed nested `case` too: bounded.
runs!(bad_unclosed_cases: &"case x in a) ".repeat(16) => ["UNANALYZABLE TooDeep"]);
runs!(nested_case_ok: "case a in a) case b in b) x;; esac;; esac" => ["x"]);
// brush-parser's word parser backtracks exponentially on unclosed nested expansions (fuzzing).
runs!(bad_unclosed_expansions: &format!("cat <<EOF\n{}\nEOF", "${x/$(a/".repeat(8)) => ["UNANALYZABLE TooDeep"]);
runs!(nested_expansions_ok: "echo \"${x:-$(dirname $(dirname $(pwd)))}\"" => ["pwd", "dirname ⟪$(pwd)⟫", "dirname ⟪$(dirname $(pwd))⟫", "echo ⟪\"${x:-$(dirname $(dirname $(pwd)))}\"⟫"]);
runs!(bad_unclosed_array_index: &format!("eval {}", "${a[$i}QQ".repeat(8)) => ["UNANALYZABLE TooDeep"]);
