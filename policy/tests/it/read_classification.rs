//! Table tests for read classification: one line per case, reading like the policy itself.
//! `read!` cases must be allowed by the hook's fast path; `not_read!` cases must not, and the
//! reason shown to the model must mention the given fragment.

use cmdgate_policy::shell::read::{classify_analysis, ReadPolicy, ReadVerdict};
use cmdgate_policy::shell::{analyze, Limits};

const HOME: &str = "/home/agent";

fn policy() -> ReadPolicy<'static> {
    let mut p = ReadPolicy::new(HOME);
    p.cwd = Some("/home/agent/project".to_owned());
    p.project = Some("/home/agent/project".to_owned());
    p
}

fn verdict(cmd: &str) -> ReadVerdict {
    classify_analysis(&analyze(cmd, &Limits::default()), &policy())
}

/// The verdict when tier 0 of a map vouches for every command it is asked about. Tier 0 only adds
/// reads: every `read!` case must stay one (the hook does not verify a map whose tier 0 could only
/// vouch for a string the built-in list already reads, `hook/src/bash.rs`).
fn vouched_by_tier_zero(cmd: &str) -> ReadVerdict {
    let everything = |_: &[&str]| true;
    let mut p = policy();
    p.extension = Some(&everything);
    classify_analysis(&analyze(cmd, &Limits::default()), &p)
}

macro_rules! read {
    ($name:ident: $cmd:expr) => {
        #[test]
        fn $name() {
            let v = verdict($cmd);
            assert_eq!(v, ReadVerdict::PureRead, "{:?} should be a pure read", $cmd);
            assert_eq!(
                vouched_by_tier_zero($cmd),
                ReadVerdict::PureRead,
                "{:?}: tier 0 vouching for its commands made it no read",
                $cmd
            );
        }
    };
}

macro_rules! not_read {
    ($name:ident: $cmd:expr => $why:expr) => {
        #[test]
        fn $name() {
            match verdict($cmd) {
                ReadVerdict::PureRead => panic!("{:?} must not be a read", $cmd),
                ReadVerdict::NotRead { reason, .. } => {
                    let text = reason.to_string();
                    assert!(
                        text.contains($why),
                        "{:?}: reason {:?} should mention {:?}",
                        $cmd,
                        text,
                        $why
                    );
                }
            }
        }
    };
}

// ---- everyday reads ----
read!(ls: "ls -la");
read!(git_log_head: "git log | head");
read!(git_log_oneline: "git log --oneline -n 20");
read!(git_status: "git status --short");
read!(git_diff: "git diff HEAD~1 -- src/");
read!(git_show: "git show HEAD --stat");
read!(cat_file: "cat README.md");
read!(grep_r: "grep -rn TODO src");
read!(grep_pipe_wc: "grep -c foo src/main.rs | wc -l");
read!(head_n: "head -n 50 Cargo.toml");
read!(tail_f: "tail -n 100 log.txt");
read!(wc_l: "wc -l src/*.rs");
read!(find_name: "find . -name '*.rs' -type f");
read!(find_maxdepth: "find src -maxdepth 2 -newer Cargo.toml -print");
read!(rg_plain: "rg -n 'fn main' src");
read!(rg_zip: "rg -z needle logs");
read!(ag_plain: "ag TODO src");
read!(fd_plain: "fd -e rs src");
read!(pwd: "pwd");
read!(which_: "which cargo");
read!(type_: "type -a ls");
read!(command_v: "command -v git");
read!(file_: "file target/debug/cmdgate-hook");
read!(stat_: "stat -c %s Cargo.lock");
read!(du_sh: "du -sh target");
read!(df_h: "df -h .");
read!(tree_l: "tree -L 2 src");
read!(sort_uniq: "sort names.txt | uniq -c | sort -rn");
read!(cut_tr: "cut -d: -f1 /etc/passwd | tr a-z A-Z");
read!(column_t: "column -t data.tsv");
read!(jq_: "jq '.dependencies | keys' package.json");
read!(yq_: "yq '.services' compose.yaml");
read!(diff_: "diff -u a.txt b.txt");
read!(diff_procsub: "diff <(sort a) <(sort b)");
read!(cmp_: "cmp a.bin b.bin");
read!(sha256: "sha256sum Cargo.lock");
read!(echo_: "echo hello world");
read!(echo_var: "echo $HOME");
read!(echo_cmdsub_read: "echo $(git rev-parse HEAD)");
read!(printf_: "printf '%s\\n' a b c");
not_read!(env_print: "env" => "prints the whole environment");
read!(printenv_: "printenv PATH");
read!(id_: "id -u");
read!(whoami_: "whoami");
read!(uname_: "uname -a");
read!(date_: "date +%Y-%m-%d");
read!(date_utc: "date -u -d '1 day ago'");
read!(ps_: "ps aux | grep cargo");
read!(true_false: "true && false || true");
read!(test_: "test -f Cargo.toml && echo yes");
read!(bracket: "[ -d src ] && ls src");
read!(double_bracket: "[[ -n $HOME ]] && echo set");
read!(basename_: "basename /a/b/c.txt .txt");
read!(dirname_: "dirname /a/b/c.txt");
read!(realpath_: "realpath ../x");
read!(readlink_: "readlink -f target");
read!(less_: "less README.md");
read!(more_: "more README.md");
read!(man_: "man 1 ls");
read!(bat_: "bat src/lib.rs");
read!(seq_: "seq 1 10");
read!(xxd_: "xxd -l 64 target/debug/cmdgate-hook");
read!(od_: "od -c file.bin | head");
read!(strings_: "strings a.out | grep GLIBC");
read!(hostname_: "hostname");
read!(hostname_f: "hostname -f");
read!(sed_n_p: "sed -n '1,20p' src/main.rs");
read!(sed_subst: "sed 's/foo/bar/g' input.txt");
read!(sed_e_multiple: "sed -e 's/a/b/' -e '/^#/d' f.txt");
read!(sed_regex_addr: "sed -n '/start/,/end/p' f");
read!(sed_q: "sed 10q f.txt");
read!(sed_pipe_delim: "sed 's|/usr|/opt|g' paths");
read!(awk_print: "awk '{print $1}' data.txt");
read!(awk_comparison: "awk '$3 > 100 {print $1}' data.txt");
read!(awk_f: "awk -F: '{print $1}' /etc/passwd");
read!(awk_sum: "awk '{s+=$2} END {print s}' nums");
read!(awk_or: "awk '$1 == \"a\" || $1 == \"b\"' f");
read!(awk_printf_paren: "awk '{printf(\"%s\\n\", ($1 > 5))}' f");
read!(git_branch_list: "git branch");
read!(git_branch_a: "git branch -a -vv");
read!(git_branch_list_pattern: "git branch --list 'feat/*'");
read!(git_branch_contains: "git branch --contains HEAD~3");
read!(git_branch_show_current: "git branch --show-current");
read!(git_tag_list: "git tag -l 'v1.*'");
read!(git_tag_bare: "git tag");
read!(git_remote_v: "git remote -v");
read!(git_remote_get_url: "git remote get-url origin");
read!(git_stash_list: "git stash list");
read!(git_stash_show: "git stash show -p stash@{0}");
read!(git_config_get: "git config --get user.email");
read!(git_config_list: "git config --list --show-origin");
read!(git_config_get_new: "git config get user.name");
read!(git_rev_parse: "git rev-parse --abbrev-ref HEAD");
read!(git_ls_files: "git ls-files | wc -l");
read!(git_blame: "git blame -L 10,20 src/lib.rs");
read!(git_c_dir: "git -C ../other log --oneline");
read!(git_no_pager: "git --no-pager diff --stat");
read!(git_log_graph: "git log --graph --decorate --all");
read!(git_shortlog: "git shortlog -sn");
read!(git_describe: "git describe --tags");
read!(git_grep: "git grep -n TODO");
read!(git_cat_file: "git cat-file -p HEAD");
read!(git_reflog: "git reflog -n 10");
read!(git_worktree_list: "git worktree list");
read!(git_merge_base: "git merge-base main HEAD");
read!(git_diff_no_ext: "git diff --no-ext-diff");
read!(git_version: "git --version");
read!(cd_then_log: "cd /work/main && git log -n 3");
read!(cd_home: "cd && ls");
read!(subshell_cd: "(cd src && ls)");
not_read!(for_loop_var_arg: "for f in *.rs; do wc -l $f; done" => "only known at run time");
read!(for_loop_static: "for f in a b; do echo $f; done");
read!(while_read: "ls | head -n 3");
read!(if_else: "if [ -f x ]; then cat x; else echo none; fi");
read!(case_: "case $1 in a) echo a;; *) echo other;; esac");
read!(brace_group: "{ ls; pwd; } 2>&1 | head");
read!(stderr_devnull: "ls nope 2>/dev/null");
read!(both_devnull: "ls nope &>/dev/null");
read!(dup_fd: "cargo_out=1; ls 2>&1");
read!(assign_lower: "n=5; head -n 5 f");
read!(xargs_echo_like: "ls | xargs echo");
read!(xargs_wc_static: "echo a | xargs -0 echo");
read!(timeout_read: "timeout 5 git status");
read!(nice_read: "nice -n 10 du -sh .");
read!(env_lang: "LANG=C sort f.txt");
read!(lc_all: "LC_ALL=C grep -c x f");
read!(tz_date: "TZ=UTC date");
read!(env_wrapper_safe: "env LANG=C ls");
read!(bash_c_read: "bash -c 'git log | head'");
read!(sh_c_read: "sh -c 'ls -la'");
read!(bash_lc_read: "bash -lc 'pwd'");
read!(eval_read: "eval 'ls -la'");
read!(heredoc_cat: "cat <<EOF\nhello\nEOF");
read!(herestring_grep: "grep x <<< 'a x b'");
read!(heredoc_sh_read: "sh <<'EOF'\nls\npwd\nEOF");
read!(usr_bin_ls: "/usr/bin/ls -l");
read!(comment: "ls # list files");
read!(function_read: "f() { ls; }; f");
read!(glob_cat: "cat src/*.rs");
read!(glob_brace: "ls src/{a,b}.rs");
read!(home_var_path: "ls $HOME/project");
read!(tilde_path: "ls ~/project");
read!(cat_env_example_dir: "ls config");
read!(pipeline_long: "git log --format=%an | sort | uniq -c | sort -rn | head -5");
read!(time_keyword: "time ls");
read!(bang_pipeline: "! grep -q x f");
read!(arith_literal: "echo $((1 + 2))");
read!(stat_proc_subst: "cat <(echo hi)");
read!(redirect_from_file: "wc -l < Cargo.toml");
read!(grep_e_flag: "grep -e -x -- f.txt");
read!(command_p_read: "command -p ls");
read!(exec_read: "exec ls");
read!(colon: ":");
read!(man_k: "man -k socket");

// ---- writes and code execution ----
not_read!(rm: "rm -rf target" => "not on the read-only command list");
not_read!(touch: "touch x" => "not on the read-only");
not_read!(mkdir: "mkdir -p out" => "not on the read-only");
not_read!(cp: "cp a b" => "not on the read-only");
not_read!(mv: "mv a b" => "not on the read-only");
not_read!(cargo_build: "cargo build" => "not on the read-only");
not_read!(redirect_write: "ls > out.txt" => "writes to `out.txt`");
not_read!(redirect_append: "echo hi >> ~/.bashrc" => "writes");
not_read!(bashrc_overwrite: "ls > ~/.bashrc" => "writes to `~/.bashrc`");
not_read!(redirect_readwrite: "cat <> f" => "writes");
not_read!(redirect_readwrite_devnull: "cat <> /dev/null" => "writes");
not_read!(redirect_both: "ls &> out" => "writes");
not_read!(redirect_dup_file: "ls >& out" => "writes");
not_read!(redirect_dynamic_dup: "ls >&$fd" => "writes");
not_read!(redirect_clobber: "ls >| out" => "writes");
not_read!(redirect_group: "{ ls; } > out" => "writes");
not_read!(redirect_subshell: "(ls) > out" => "writes");
not_read!(redirect_only: "> out" => "writes");
not_read!(tee: "ls | tee out" => "not on the read-only");
not_read!(find_exec: "find . -exec rm {} \\;" => "-exec");
not_read!(find_execdir: "find . -execdir sh -c 'x' \\;" => "-execdir");
not_read!(find_ok: "find . -ok rm {} \\;" => "-ok");
not_read!(find_okdir: "find . -okdir rm {} \\;" => "-okdir");
not_read!(find_delete: "find . -name '*.o' -delete" => "deletes files");
not_read!(find_fprint: "find . -fprint out" => "writes to a file");
not_read!(find_fprint0: "find . -fprint0 out" => "writes");
not_read!(find_fprintf: "find . -fprintf out %p" => "writes");
not_read!(find_fls: "find . -fls out" => "writes");
not_read!(find_dynamic: "find . $ACTION" => "only known at run time");
not_read!(find_glob: "find * -name x" => "only known at run time");
not_read!(sort_o: "sort -o out in" => "writes a file");
not_read!(sort_output: "sort --output=out in" => "writes");
not_read!(sort_output_abbrev: "sort --out=x in" => "writes");
not_read!(sort_cluster: "sort -ro out in" => "writes");
not_read!(sort_compress: "sort --compress-program=sh in" => "runs a program");
not_read!(sort_glob: "sort *.txt" => "only known at run time");
not_read!(tree_o: "tree -o out.txt" => "writes files");
not_read!(tree_r: "tree -R -H x" => "writes files");
not_read!(sed_i: "sed -i 's/a/b/' f" => "edits files in place");
not_read!(sed_i_suffix: "sed -i.bak 's/a/b/' f" => "in place");
not_read!(sed_in_place: "sed --in-place 's/a/b/' f" => "in place");
not_read!(sed_in_place_abbrev: "sed --in-pl 's/a/b/' f" => "in place");
not_read!(sed_cluster_i: "sed -ni 's/a/b/p' f" => "in place");
not_read!(sed_e_cmd: "sed 'e id' f" => "runs a shell command");
not_read!(sed_w_cmd: "sed 'w out' f" => "writes a file");
not_read!(sed_big_w_cmd: "sed 'W out' f" => "writes a file");
not_read!(sed_s_w: "sed 's/a/b/w out' f" => "writes a file");
not_read!(sed_s_e: "sed 's/.*/id/e' f" => "runs the pattern space");
not_read!(sed_s_ge: "sed 's/x/y/ge' f" => "runs the pattern space");
not_read!(sed_addr_w: "sed -n '/x/w out' f" => "writes a file");
not_read!(sed_r: "sed 'r /etc/shadow' f" => "reads a file");
not_read!(sed_f: "sed -f script.sed f" => "from a file");
not_read!(sed_unknown: "sed 'k' f" => "cannot be proven harmless");
not_read!(sed_second_e: "sed -e p -e 'w x' f" => "writes");
not_read!(awk_system: "awk '{system(\"rm x\")}' f" => "system()");
not_read!(awk_print_redirect: "awk '{print > \"out\"}' f" => "redirects print output");
not_read!(awk_print_append: "awk '{print $1 >> \"out\"}' f" => "redirects print output");
not_read!(awk_printf_redirect: "awk '{printf(\"%s\", $1) > \"out\"}' f" => "redirects");
not_read!(awk_pipe: "awk '{print | \"sh\"}' f" => "pipes");
not_read!(awk_getline_cmd: "awk 'BEGIN {\"id\" | getline x}' f" => "pipes");
not_read!(awk_getline: "awk 'BEGIN {getline x < \"/etc/shadow\"}'" => "getline");
not_read!(awk_coprocess: "gawk '{print |& \"sh\"}' f" => "pipes");
not_read!(awk_load: "gawk '@load \"x\"' f" => "@-directives");
not_read!(awk_progfile: "awk -f prog.awk f" => "loads program files");
not_read!(awk_dump: "gawk -d/tmp/x 1 f" => "writes dumps");
not_read!(git_c: "git -c core.pager=sh log" => "sets configuration");
not_read!(git_config_env: "git --config-env=core.pager=X log" => "sets configuration");
not_read!(git_output: "git log --output=/tmp/x" => "writes a file");
not_read!(git_output_abbrev: "git diff --out=x" => "writes a file");
not_read!(git_ext_diff: "git diff --ext-diff" => "runs a program");
not_read!(git_exec_path: "git --exec-path=/tmp/evil status" => "another directory");
not_read!(git_paginate: "git -p log" => "pager");
not_read!(git_paginate_long: "git --paginate log" => "pager");
not_read!(git_git_dir: "git --git-dir=/tmp/evil/.git log" => "not vetted");
not_read!(git_work_tree: "git --work-tree=/tmp status" => "not vetted");
not_read!(git_commit: "git commit -m x" => "git commit");
not_read!(git_push: "git push" => "git push");
not_read!(git_global_then_write: "git -C repo --no-pager push --force" => "git push");
not_read!(git_checkout: "git checkout main" => "git checkout");
not_read!(git_reset: "git reset --hard" => "git reset");
not_read!(git_branch_create: "git branch newfeature" => "creates a branch");
not_read!(git_branch_delete: "git branch -D old" => "deletes");
not_read!(git_branch_move: "git branch -m a b" => "renames");
not_read!(git_branch_upstream: "git branch --set-upstream-to=origin/x" => "reconfigures");
not_read!(git_tag_create: "git tag v1.0" => "creates a tag");
not_read!(git_tag_delete: "git tag -d v1.0" => "deletes");
not_read!(git_tag_annotate: "git tag -a v1 -m x" => "creates");
not_read!(git_stash_push: "git stash" => "git stash");
not_read!(git_stash_drop: "git stash drop" => "git stash");
not_read!(git_config_set: "git config user.name x" => "git config");
not_read!(git_config_get_and_set: "git config --get x --unset y" => "git config");
not_read!(git_remote_add: "git remote add x y" => "git remote");
not_read!(git_reflog_expire: "git reflog expire --all" => "git reflog");
not_read!(git_grep_pager: "git grep -Ovim x" => "pager");
not_read!(git_grep_pager_long: "git grep --open-files-in-pager=vim x" => "runs a program");
not_read!(git_unknown_global: "git --super-prefix=x log" => "not known to be read-only");
not_read!(git_alias: "git lg" => "git lg");
not_read!(git_dynamic: "git $SUB" => "only known at run time");
not_read!(git_fetch: "git fetch" => "git fetch");
not_read!(git_clean: "git clean -fdx" => "git clean");
not_read!(rg_pre: "rg --pre sh x" => "runs a program");
not_read!(rg_pre_eq: "rg --pre=./evil x" => "runs a program");
not_read!(rg_pre_glob: "rg --pre-glob '*' x" => "runs a program");
not_read!(rg_pre_abbrev: "rg --pr=sh x" => "runs a program");
not_read!(rg_hostname_bin: "rg --hostname-bin=./x --hyperlink-format=default x" => "runs a program");
not_read!(rg_glob_arg: "rg foo *.rs" => "only known at run time");
not_read!(ag_pager: "ag --pager 'sh -c x' foo" => "pager");
not_read!(fd_exec: "fd -e rs -x rm" => "runs a command");
not_read!(fd_exec_long: "fd . --exec-batch rm" => "runs a command");
not_read!(date_s: "date -s '2020-01-01'" => "sets the system clock");
not_read!(date_set: "date --set='2020-01-01'" => "sets the system clock");
not_read!(date_cluster: "date -us x" => "sets the system clock");
not_read!(hostname_set: "hostname evil" => "sets the host name");
not_read!(hostname_file: "hostname -F /etc/x" => "sets the host name");
not_read!(yq_inplace: "yq -i '.a = 1' f.yaml" => "edits files in place");
not_read!(yq_inplace_long: "yq --inplace '.a=1' f.yaml" => "in place");
not_read!(uniq_output: "uniq in out" => "output file");
not_read!(xxd_output: "xxd in out" => "output file");
not_read!(shuf_o: "shuf -o out in" => "writes");
not_read!(file_compile: "file -C -m magic" => "writes");
not_read!(less_plus: "less '+!rm x' f" => "shell escapes");
not_read!(less_log: "less -o log f" => "writes a log file");
not_read!(man_pager: "man -P 'sh -c x' ls" => "pager");
not_read!(man_path: "man ./evil.1" => "formatter");
not_read!(bat_pager: "bat --pager='sh -c x' f" => "pager");
not_read!(printf_v: "printf -v PATH /tmp" => "assigns a shell variable");
not_read!(printf_dyn_first: "printf $X y" => "could expand to -v");
not_read!(test_v_array: "test -v 'a[$(rm x)]'" => "array subscript");
not_read!(env_prefix_pager: "PAGER='sh -c x' git log" => "PAGER");
not_read!(env_prefix_git: "GIT_PAGER=x git log" => "GIT_PAGER");
not_read!(env_prefix_git_ssh: "GIT_SSH_COMMAND=x git log" => "GIT_SSH_COMMAND");
not_read!(env_prefix_ld_preload: "LD_PRELOAD=/tmp/x.so ls" => "LD_PRELOAD");
not_read!(env_prefix_ld_library: "LD_LIBRARY_PATH=/tmp ls" => "LD_LIBRARY_PATH");
not_read!(env_prefix_bash_env: "BASH_ENV=/tmp/x bash -c ls" => "BASH_ENV");
not_read!(env_prefix_env: "ENV=/tmp/x sh -c ls" => "`ENV=`");
not_read!(env_prefix_path: "PATH=/tmp/evil ls" => "PATH");
not_read!(env_prefix_prompt: "PROMPT_COMMAND=x ls" => "PROMPT_COMMAND");
not_read!(env_prefix_less: "LESSOPEN='|x %s' less f" => "LESSOPEN");
not_read!(env_prefix_editor: "EDITOR=x git log" => "EDITOR");
not_read!(env_wrapper_pager: "env PAGER=x git log" => "PAGER");
not_read!(env_wrapper_ld: "env -i LD_PRELOAD=x ls" => "LD_PRELOAD");
not_read!(env_split: "env -S 'rm -rf x'" => "rm");
not_read!(env_p: "env -P /tmp ls" => "-P changes where programs are found");
not_read!(assign_path: "PATH=/tmp/evil; ls" => "assigning `PATH`");
not_read!(assign_ifs: "IFS=x; ls" => "IFS");
not_read!(assign_proxy: "https_proxy=http://evil; ls" => "https_proxy");
not_read!(assign_array_index: "a[$(rm x)]=1" => "rm");
not_read!(for_path: "for PATH in /tmp; do ls; done" => "assigning `PATH`");
not_read!(export_: "export PATH=/tmp" => "export");
not_read!(alias_: "alias ls='rm -rf ~'" => "alias");
not_read!(source_: "source ./env.sh" => "source");
not_read!(dot_source: ". ./env.sh" => "`.`");
not_read!(bash_script_file: "bash script.sh" => "bash");
not_read!(python_c: "python3 -c 'print(1)'" => "python3");
not_read!(node_e: "node -e 'x'" => "node");
not_read!(sudo_ls: "sudo ls" => "other privileges");
not_read!(doas_ls: "doas ls" => "other privileges");
not_read!(nohup_ls: "nohup ls" => "nohup.out");
not_read!(watch_ls: "watch ls" => "forever");
not_read!(flock_ls: "flock /tmp/l ls" => "lock file");
not_read!(time_o: "/usr/bin/time -o out ls" => "writes its report");
not_read!(local_ls: "./ls" => "./ls");
not_read!(home_bin_ls: "~/bin/ls" => "not on the read-only");
not_read!(wrapper_local: "./timeout 5 ls" => "not a system program");
not_read!(parallel_: "parallel rm ::: a b" => "not allowed for reads");
not_read!(xargs_rm: "ls | xargs rm" => "`rm`");
not_read!(xargs_sh: "ls | xargs sh -c 'rm $0'" => "rm");
not_read!(xargs_rg: "ls | xargs rg x" => "only known at run time");
not_read!(xargs_cat: "echo ~/.ssh/id_rsa | xargs cat" => "secret");
not_read!(xargs_cat_hidden: "git ls-files | xargs cat" => "only known at run time");
not_read!(trap_: "trap 'rm -rf x' EXIT; ls" => "trap");
not_read!(coproc_: "coproc rm x" => "rm");
not_read!(background_rm: "ls & rm x" => "rm");
not_read!(arith_var: "echo $((x))" => "only known at run time");
not_read!(arith_cmd: "(( x = 1 ))" => "only known at run time");
not_read!(dbl_bracket_arith: "[[ $x -eq 1 ]]" => "only known at run time");
not_read!(prompt_expansion: "echo ${x@P}" => "only known at run time");
not_read!(param_default_cmdsub: "echo ${x:-$(rm y)}" => "rm");
not_read!(cd_dynamic: "cd $DIR && ls" => "only known at run time");
not_read!(cd_dash: "cd - && ls" => "only known at run time");

// ---- bypass tricks ----
not_read!(quote_split: "r''m -rf x" => "`rm`");
not_read!(dquote_split: "r\"\"m -rf x" => "`rm`");
not_read!(backslash: "\\rm -rf x" => "`rm`");
not_read!(ansi_c_name: "$'\\x72m' -rf x" => "`rm`");
not_read!(ansi_c_octal: "$'\\162m' x" => "`rm`");
not_read!(ifs_trick: "rm${IFS}-rf${IFS}x" => "only known at run time");
not_read!(var_command: "X=rm; $X -rf y" => "assigning `X`");
not_read!(var_command_lower: "x=rm; $x -rf y" => "only known at run time");
not_read!(brace_expansion_cmd: "{rm,-rf,x}" => "only known at run time");
not_read!(glob_command: "/bin/r? x" => "only known at run time");
not_read!(command_p: "command -p rm x" => "`rm`");
not_read!(builtin_eval: "builtin eval 'rm x'" => "`rm`");
not_read!(exec_rm: "exec rm x" => "`rm`");
not_read!(nested_bash: "bash -c \"bash -c 'rm x'\"" => "`rm`");
not_read!(bash_c_dynamic: "bash -c \"$CMD\"" => "only known at run time");
not_read!(backtick_in_dquote: "echo \"`rm x`\"" => "`rm`");
not_read!(cmdsub_in_arg: "ls $(rm x)" => "`rm`");
not_read!(cmdsub_in_redirect: "cat < $(rm x)" => "`rm`");
not_read!(cmdsub_in_assignment: "X=$(rm x) ls" => "`rm`");
not_read!(cmdsub_in_heredoc: "cat <<EOF\n$(rm x)\nEOF" => "`rm`");
not_read!(heredoc_to_sh: "sh <<EOF\nrm -rf x\nEOF" => "`rm`");
not_read!(heredoc_dynamic_to_sh: "sh <<EOF\n$CMD\nEOF" => "only known at run time");
not_read!(herestring_bash: "bash <<< 'rm x'" => "`rm`");
not_read!(pipe_to_sh: "echo 'rm x' | sh" => "`sh`");
not_read!(procsub_write: "ls >(rm x)" => "`rm`");
not_read!(procsub_read: "cat <(rm x)" => "`rm`");
not_read!(function_then_call: "ls() { rm -rf x; }; ls" => "`rm`");
not_read!(eval_: "eval rm x" => "`rm`");
not_read!(eval_dynamic: "eval \"$X\"" => "only known at run time");
not_read!(eval_concat: "eval r\"m\" x" => "`rm`");
not_read!(env_s_split: "env -S 'rm x'" => "`rm`");
not_read!(env_dynamic_assign: "env \"$A\" ls" => "only known at run time");
not_read!(sudo_opts: "sudo -u root -- rm x" => "other privileges");
not_read!(timeout_rm: "timeout -s KILL 5 rm x" => "`rm`");
not_read!(xargs_i: "xargs -I{} rm {}" => "`rm`");
not_read!(env_i_rm: "env -i -u X LANG=C rm" => "`rm`");
not_read!(env_assign_unsafe: "env -i -u X FOO=1 ls" => "FOO");
not_read!(nice_rm: "nice -10 rm x" => "`rm`");
not_read!(stdbuf_rm: "stdbuf -oL rm x" => "`rm`");
not_read!(busybox_rm: "busybox rm x" => "`rm`");
not_read!(wrapper_unknown_opt: "timeout --weird 5 rm x" => "only known at run time");
not_read!(wrapper_chain: "nice timeout 5 env -i rm x" => "`rm`");
not_read!(subshell_rm: "(rm x)" => "`rm`");
not_read!(if_body_rm: "if true; then rm x; fi" => "`rm`");
not_read!(while_body_rm: "while false; do rm x; done" => "`rm`");
not_read!(until_cond_rm: "until rm x; do :; done" => "`rm`");
not_read!(case_body_rm: "case a in a) rm x;; esac" => "`rm`");
not_read!(for_values_cmdsub: "for f in $(rm x); do :; done" => "`rm`");
not_read!(and_list_rm: "ls && rm x" => "`rm`");
not_read!(or_list_rm: "ls || rm x" => "`rm`");
not_read!(semicolon_rm: "ls; rm x" => "`rm`");
not_read!(newline_rm: "ls\nrm x" => "`rm`");
not_read!(line_continuation: "r\\\nm x" => "`rm`");
not_read!(tilde_user: "cat ~root/.bashrc" => "only known at run time");
not_read!(dynamic_cat: "cat $FILE" => "only known at run time");
not_read!(dynamic_cat_cmdsub: "cat $(echo ~/.ssh/id_rsa)" => "secret");
not_read!(dynamic_cat_cmdsub_hidden: "cat $(echo fi*)" => "only known at run time");
not_read!(glob_dash: "cat -*" => "only known at run time");
not_read!(shell_rcfile: "bash --rcfile x -c ls" => "runs a file");
not_read!(fish_c: "fish -c 'rm x'" => "not allowed for reads");
not_read!(git_c_via_bash: "bash -c 'git -c alias.x=!sh x'" => "sets configuration");
not_read!(env_prefix_reentered: "PAGER=x bash -c 'git log'" => "PAGER");

// ---- secret paths ----
not_read!(ssh_key: "cat ~/.ssh/id_rsa" => "secret-path list");
not_read!(ssh_dir_ls: "ls ~/.ssh" => "secret-path list");
not_read!(ssh_abs: "cat /home/agent/.ssh/config" => "secret");
not_read!(ssh_home_var: "cat $HOME/.ssh/id_ed25519" => "secret");
not_read!(ssh_home_braced: "cat ${HOME}/.ssh/config" => "secret");
not_read!(ssh_relative_up: "cat ../.ssh/config" => "secret");
not_read!(ssh_dotdot: "cat /home/agent/project/../.ssh/config" => "secret");
not_read!(ssh_glob: "cat ~/.ss?/id_*" => "secret");
not_read!(ssh_glob_dir: "cat ~/.*/id_rsa" => "secret");
not_read!(ssh_quoted: "cat ~/'.ssh'/config" => "secret");
not_read!(ssh_cd: "cd ~/.ssh && cat config" => "secret");
not_read!(ssh_cd_home: "cd ~ && cat .ssh/config" => "secret");
not_read!(gh_cd_config: "cd ~/.config && cat gh/hosts.yml" => "secret");
not_read!(dotenv: "cat .env" => "secret");
not_read!(dotenv_local: "cat .env.local" => "secret");
not_read!(dotenv_sub: "grep KEY config/.env.production" => "secret");
not_read!(dotenv_glob: "cat .env*" => "secret");
not_read!(aws: "cat ~/.aws/credentials" => "secret");
not_read!(netrc: "cat ~/.netrc" => "secret");
not_read!(docker_config: "cat ~/.docker/config.json" => "secret");
not_read!(shadow: "cat /etc/shadow" => "secret");
not_read!(gshadow: "head /etc/gshadow" => "secret");
not_read!(shadow_relative: "cat ../../etc/shadow" => "secret");
not_read!(gh_config: "cat ~/.config/gh/hosts.yml" => "secret");
not_read!(gnupg: "ls ~/.gnupg/private-keys-v1.d" => "secret");
not_read!(keyrings: "cat ~/.local/share/keyrings/login.keyring" => "secret");
not_read!(kube: "cat ~/.kube/config" => "secret");
not_read!(pem: "cat server.pem" => "secret");
not_read!(key_file: "cat tls/private.key" => "secret");
not_read!(pem_glob: "cat *.pem" => "secret");
not_read!(id_ed25519: "cat id_ed25519" => "secret");
not_read!(secret_redirect: "wc -c < ~/.ssh/id_rsa" => "secret");
not_read!(secret_git_show: "git show HEAD:.env" => "secret");
not_read!(secret_grep_file_flag: "grep --file=/home/agent/.ssh/id_rsa x" => "secret");
not_read!(secret_in_cmdsub: "echo $(cat ~/.aws/credentials)" => "secret");
not_read!(secret_in_bash_c: "bash -c 'cat ~/.ssh/id_rsa'" => "secret");
not_read!(secret_proc_environ: "cat /proc/1/environ" => "secret");
not_read!(secret_sed: "sed -n p ~/.netrc" => "secret");
not_read!(secret_cd_dynamic_home: "cd $HOME/.aws && ls" => "secret");

// ---- unanalyzable ----
not_read!(unterminated_quote: "echo 'abc" => "could not be analysed");
not_read!(unterminated_dquote: "echo \"abc" => "could not be analysed");
not_read!(unterminated_cmdsub: "echo $(ls" => "could not be analysed");
not_read!(unterminated_backtick: "echo `ls" => "could not be analysed");
not_read!(unterminated_if: "if true; then ls" => "could not be analysed");
not_read!(nul_byte: "ls\0rm" => "could not be analysed");
not_read!(too_deep: "echo $(echo $(echo $(echo $(echo $(echo $(echo $(echo $(echo $(echo $(echo $(echo $(echo $(echo $(echo $(echo $(echo $(echo $(echo ls))))))))))))))))))" => "could not be analysed");
not_read!(hidden_pem: "cat .server.pem" => "secret");
not_read!(dotglob_pem: "cat .*.pem" => "secret");
read!(pattern_arg_literal_star: "find . -name '*.key.txt.bak.rs' -newer x");
not_read!(dev_tcp_read: "cat < /dev/tcp/example.com/80" => "network connection");
not_read!(dev_udp_read: "head -c1 < /dev/udp/10.0.0.1/53" => "network connection");
not_read!(spaced_double_paren_not_read: "( ( rm x ) )" => "only known at run time");

// ---- recursive content reads (policy/src/shell/read/recursive.rs) ----
// Above or at a secret directory: every search reads it.
not_read!(rec_grep_r_home: "grep -r KEY ~" => "holds secret paths");
not_read!(rec_grep_big_r_home_abs: "grep -R KEY /home/agent" => "holds secret paths");
not_read!(rec_grep_r_home_var: "grep -r KEY \"$HOME\"" => "holds secret paths");
not_read!(rec_grep_r_slash_home: "grep -rn 'PRIVATE KEY' /home" => "holds secret paths");
not_read!(rec_grep_r_root: "grep -r KEY /" => "holds secret paths");
not_read!(rec_grep_r_etc: "grep -r sshd /etc" => "holds secret paths");
not_read!(rec_grep_r_config: "grep -r oauth ~/.config" => "holds secret paths");
not_read!(rec_grep_r_up: "grep -r KEY ../.." => "holds secret paths");
not_read!(rec_grep_cd_home: "cd ~ && grep -r KEY ." => "holds secret paths");
not_read!(rec_grep_d_recurse: "grep -d recurse KEY ~" => "holds secret paths");
not_read!(rec_grep_directories_recurse: "grep --directories=recurse KEY ~" => "holds secret paths");
not_read!(rec_grep_recursive_abbrev: "grep --recur KEY ~" => "holds secret paths");
not_read!(rec_grep_e_pattern: "grep -r -e KEY ~" => "holds secret paths");
not_read!(rec_grep_home_glob: "grep -r KEY /home/*" => "secret");
not_read!(rec_grep_include_home: "grep -r --include='[!.]*.txt' KEY ~" => "holds secret paths");
not_read!(rec_rg_home: "rg KEY ~" => "holds secret paths");
not_read!(rec_rg_root: "rg -uu 'BEGIN OPENSSH' /" => "holds secret paths");
not_read!(rec_rg_files_with_matches: "rg -l AKIA ~" => "holds secret paths");
not_read!(rec_ag_home: "ag KEY ~" => "holds secret paths");
not_read!(rec_diff_r_home: "diff -r ~ /tmp/x" => "holds secret paths");
not_read!(rec_xargs_free: "rg KEY /proc" => "holds secret paths");
// The working directory (usually the project root, where `.env` lives), above it, or outside the
// project: secret files may be anywhere under it.
not_read!(rec_grep_r_dot: "grep -r DB_PASSWORD ." => "may hold secret files");
not_read!(rec_grep_r_no_operand: "grep -r DB_PASSWORD" => "may hold secret files");
not_read!(rec_grep_rl_dot: "grep -rl x ." => "may hold secret files");
not_read!(rec_rg_no_path: "rg DB_PASSWORD" => "may hold secret files");
not_read!(rec_rg_dot: "rg -n x ." => "may hold secret files");
not_read!(rec_rg_e_no_path: "rg -e x" => "may hold secret files");
not_read!(rec_ag_no_path: "ag x" => "may hold secret files");
not_read!(rec_git_grep_no_index: "git grep --no-index KEY" => "may hold secret files");
not_read!(rec_git_grep_untracked: "git grep --untracked KEY" => "may hold secret files");
not_read!(rec_outside_project: "grep -r KEY /srv/app" => "may hold secret files");
not_read!(rec_cd_outside: "cd /srv && grep -r KEY app" => "may hold secret files");
not_read!(rec_sibling_project: "rg KEY ../other" => "may hold secret files");
not_read!(rec_cd_sub_dot: "cd services/api && grep -r KEY ." => "may hold secret files");
// Following symbolic links: a link in the tree can lead anywhere.
not_read!(rec_grep_big_r_sub: "grep -R TODO src" => "may hold secret files");
not_read!(rec_rg_follow: "rg -L TODO src" => "may hold secret files");
not_read!(rec_diff_r: "diff -r a b" => "may hold secret files");
// Filters: `*.rs` also picks `.env.rs` (a `.env.*` file), `*` picks `.env`; negations exclude
// nothing from what the rest selects.
not_read!(rec_include_star_rs: "grep -r --include='*.rs' TODO ." => "may hold secret files");
not_read!(rec_rg_glob_star: "rg -g '*' x ." => "may hold secret files");
not_read!(rec_rg_glob_negated: "rg -g '!*.md' x ." => "may hold secret files");
not_read!(rec_rg_type_not_counted: "rg -t rust x ." => "may hold secret files");
not_read!(rec_rg_glob_pem_brace: "rg -g '[!.]*.{rs,pem}' x ." => "may hold secret files");
// Named secrets and globs that could match them (the argument rule).
not_read!(rec_cat_ssh_glob: "cat ~/.ssh/*" => "secret");
not_read!(rec_find_pem_names: "find ~ -name '*.pem'" => "secret");
not_read!(rec_grep_r_ssh: "grep -r KEY ~/.ssh" => "secret");
not_read!(rec_tar_home: "tar c ~" => "not on the read-only command list");
not_read!(rec_zip_dir: "zip -r x.zip src" => "not on the read-only command list");
// Near misses: a subdirectory below the working directory inside the project, or a filter no
// secret name can match.
read!(rec_grep_r_src: "grep -r TODO src/");
read!(rec_rg_src: "rg fn src");
read!(rec_grep_rn_docs: "grep -rn x ./docs");
read!(rec_grep_r_two_dirs: "grep -r -e TODO src tests");
read!(rec_cd_sub_then_sub: "cd crates && grep -r TODO core");
read!(rec_grep_include_no_dot: "grep -r --include='[!.]*.rs' TODO .");
read!(rec_rg_glob_no_dot: "rg -g '[!.]*.{rs,md}' x .");
// `*.toml` can select `secrets.toml`, a secret by its name, anywhere in the tree.
not_read!(rec_rg_glob_secret_name: "rg -g '[!.]*.{rs,toml}' x ." => "secret");
read!(rec_rg_glob_literal_outside: "rg -g Cargo.toml version /srv");
not_read!(rec_rg_glob_up_to_home: "rg -g Cargo.toml version .." => "holds secret paths");
read!(rec_git_grep_tracked: "git grep -n KEY");
read!(rec_grep_single_file: "grep -n x README.md");
// Names-only listings stay reads: names, not contents.
read!(rec_ls_r_home: "ls -R ~");
read!(rec_find_home_names: "find ~ -name '*.rs'");
read!(rec_du_home: "du -sh ~");
read!(rec_rg_files: "rg --files ~");
read!(rec_tree_root: "tree -L 2 /");

// ---- rule 3: the working directory / project root, judged by a one-level listing ----
// The caller lists (this crate does no IO): a fake file system of directory → entries.

/// Classifies `cmd` run from `cwd` in /home/agent/project with `tree` as the only listable
/// directories (anything else: unreadable).
fn listed(cmd: &str, cwd: &str, tree: &[(&str, &[&str])]) -> Result<(), String> {
    // The place is passed as the command names it (`/cwd/.`, `/cwd/../..`): resolve it as the OS.
    let list = |dir: &str| -> Option<Vec<String>> {
        let mut comps: Vec<&str> = Vec::new();
        for c in dir.split('/').filter(|c| !c.is_empty() && *c != ".") {
            if c == ".." {
                comps.pop();
            } else {
                comps.push(c);
            }
        }
        let dir = format!("/{}", comps.join("/"));
        tree.iter()
            .find(|(d, _)| *d == dir)
            .map(|(_, e)| e.iter().map(|s| (*s).to_owned()).collect())
    };
    let mut p = policy();
    p.cwd = Some(cwd.to_owned());
    p.listing = Some(&list);
    match classify_analysis(&analyze(cmd, &Limits::default()), &p) {
        ReadVerdict::PureRead => Ok(()),
        ReadVerdict::NotRead { reason, .. } => Err(reason.to_string()),
    }
}

const PROJECT: &str = "/home/agent/project";
const CLEAN: &[&str] = &[
    "src",
    "Cargo.toml",
    "README.md",
    ".git",
    ".gitignore",
    "target",
];

#[test]
fn rec_listing_clean_root_is_a_read() {
    for cmd in [
        "grep -r DB_PASSWORD .",
        "grep -rn x",
        "rg DB_PASSWORD",
        "rg -n x .",
        "ag x",
        "git grep --no-index KEY",
        "grep -r x /home/agent/project",
    ] {
        assert_eq!(listed(cmd, PROJECT, &[(PROJECT, CLEAN)]), Ok(()), "{cmd}");
    }
}

#[test]
fn rec_listing_secret_entries_are_named() {
    for (entry, shown) in [
        (".env", "`./.env`"),
        (".env.production", "`./.env.production`"),
        ("id_rsa", "`./id_rsa`"),
        ("server.pem", "`./server.pem`"),
        ("TLS.KEY", "`./TLS.KEY`"),
        (".ENV", "`./.ENV`"),
        (".ssh", "`./.ssh`"),
        (".aws", "`./.aws`"),
        (".gnupg", "`./.gnupg`"),
        (".netrc", "`./.netrc`"),
    ] {
        let mut entries = CLEAN.to_vec();
        entries.push(entry);
        for cmd in ["grep -r TODO .", "rg TODO"] {
            let why = listed(cmd, PROJECT, &[(PROJECT, &entries)]).unwrap_err();
            assert!(
                why.contains(shown) && why.contains("secret-path list"),
                "{cmd} with {entry}: {why}"
            );
        }
    }
}

#[test]
fn rec_listing_follows_secret_paths_down() {
    // `.config` is only secret where it holds `gh`, `gcloud`, `hub`; `.cargo` where it holds
    // `credentials`.
    let root: &[&str] = &["src", ".config", ".cargo"];
    let config_ok: &[&str] = &["nvim"];
    let cargo_ok: &[&str] = &["config.toml"];
    let config_gh: &[&str] = &["nvim", "gh"];
    let cargo_cred: &[&str] = &["config.toml", "credentials.toml"];
    let at = |d: &str| format!("{PROJECT}/{d}");
    let (c, g) = (at(".config"), at(".cargo"));
    assert_eq!(
        listed(
            "rg x",
            PROJECT,
            &[(PROJECT, root), (&c, config_ok), (&g, cargo_ok)]
        ),
        Ok(())
    );
    let why = listed(
        "rg x",
        PROJECT,
        &[(PROJECT, root), (&c, config_gh), (&g, cargo_ok)],
    )
    .unwrap_err();
    assert!(why.contains("`./.config/gh`"), "{why}");
    let why = listed(
        "rg x",
        PROJECT,
        &[(PROJECT, root), (&c, config_ok), (&g, cargo_cred)],
    )
    .unwrap_err();
    assert!(why.contains("`./.cargo/credentials.toml`"), "{why}");
    // A directory on the way that cannot be listed: not a read.
    let why = listed("rg x", PROJECT, &[(PROJECT, root), (&c, config_ok)]).unwrap_err();
    assert!(why.contains("could not be listed"), "{why}");
}

#[test]
fn rec_listing_unavailable_or_too_long_is_not_a_read() {
    // No listing for the directory (unreadable).
    let why = listed("grep -r x .", PROJECT, &[]).unwrap_err();
    assert!(why.contains("`.` could not be listed"), "{why}");
    // More entries than the bound.
    let many: Vec<String> = (0..=cmdgate_policy::shell::read::MAX_LISTING)
        .map(|i| format!("f{i}.txt"))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let why = listed("rg x", PROJECT, &[(PROJECT, &many)]).unwrap_err();
    assert!(why.contains("more than 4096 entries"), "{why}");
    // No listing given at all (the daemon's rule editor, `cmdgate explain` without a cwd).
    match verdict("grep -r x .") {
        ReadVerdict::NotRead { reason, .. } => {
            assert!(reason.to_string().contains("may hold secret files"))
        }
        ReadVerdict::PureRead => panic!("no listing: not a read"),
    }
}

#[test]
fn rec_listing_keeps_the_other_rules() {
    let tree: &[(&str, &[&str])] = &[
        (PROJECT, CLEAN),
        ("/home/agent", CLEAN),
        ("/srv/app", CLEAN),
    ];
    for (cmd, cwd, why) in [
        // Following links: a link in the tree can lead anywhere.
        ("grep -R x .", PROJECT, "may hold secret files"),
        ("rg -L x", PROJECT, "may hold secret files"),
        // Above the project, above a secret directory, outside the project.
        ("grep -r x ..", PROJECT, "holds secret paths"),
        ("grep -r x /srv/app", PROJECT, "may hold secret files"),
        ("grep -r x .", "/srv/app", "may hold secret files"),
        // Only known at run time.
        ("grep -r x \"$DIR\"", PROJECT, "only known at run time"),
    ] {
        let err = listed(cmd, cwd, tree).unwrap_err();
        assert!(err.contains(why), "{cmd} in {cwd}: {err}");
    }
}

#[test]
fn rec_listing_covers_a_working_directory_below_the_place() {
    // Searching the project root from `services/api`: the root and the cwd are both listed.
    let cwd = format!("{PROJECT}/services/api");
    let api_env: &[&str] = &["main.rs", ".env"];
    let api_ok: &[&str] = &["main.rs"];
    let why = listed(
        &format!("grep -r x {PROJECT}"),
        &cwd,
        &[(PROJECT, CLEAN), (&cwd, api_env)],
    )
    .unwrap_err();
    assert!(why.contains("`./services/api/.env`"), "{why}");
    assert_eq!(
        listed("grep -r x ../..", &cwd, &[(PROJECT, CLEAN), (&cwd, api_ok)]),
        Ok(())
    );
    // The cwd itself, a subdirectory of the project.
    assert_eq!(listed("rg x", &cwd, &[(&cwd, api_ok)]), Ok(()));
    let why = listed("rg x", &cwd, &[(&cwd, api_env)]).unwrap_err();
    assert!(why.contains("`./.env`"), "{why}");
}

#[test]
fn globs_that_could_name_a_secret_are_judged_by_a_listing_of_their_directory() {
    // `*.json` could match `credentials.json`: a listing tells whether it does, here.
    let clean: &[&str] = &["package.json", "tsconfig.json", "Cargo.toml", "src"];
    let with_key: &[&str] = &["package.json", "credentials.json", "src"];
    let sub_clean: &[&str] = &["a.json"];
    let sub = format!("{PROJECT}/conf");
    for cmd in [
        "jq . *.json",
        "cat *.toml",
        "head -3 conf/*.json",
        "wc -l *.json conf/*.json",
    ] {
        assert_eq!(
            listed(cmd, PROJECT, &[(PROJECT, clean), (&sub, sub_clean)]),
            Ok(()),
            "{cmd}"
        );
    }
    for cmd in ["jq . *.json", "cat *s.json", "wc -l *.json conf/*.json"] {
        let why = listed(cmd, PROJECT, &[(PROJECT, with_key), (&sub, sub_clean)]).unwrap_err();
        assert!(why.contains("secret-path list"), "{cmd}: {why}");
    }
    // No listing (unreadable directory), or wildcards above the last component: not a read.
    assert!(listed("cat *.json", PROJECT, &[]).is_err());
    assert!(listed("cat */*.json", PROJECT, &[(PROJECT, clean)]).is_err());
    // A glob no secret name can match needs no listing.
    assert_eq!(listed("cat *.rs", PROJECT, &[]), Ok(()));
}

#[test]
fn an_unquoted_glob_that_matches_nothing_is_the_word_as_typed() {
    // `grep -rn 'def add' --include=*.py .`: bash passes `--include=*.py` on when no file in the
    // directory matches it (and drops it under nullglob: both forms must be reads).
    let clean: &[&str] = &["src", "Cargo.toml", "README.md", "setup.py"];
    let src: &[&str] = &["a.py"];
    let sub = format!("{PROJECT}/src");
    for cmd in [
        "grep -rn 'def add' --include=*.py .",
        "grep -rn 'def add' --include=*.py",
        "grep -rn TODO --include=*.rs --exclude-dir=target src",
        "grep -rn x --include=*.{rs,py} src",
        "rg -n x --glob=*.py src",
    ] {
        if cmd.contains('{') {
            // Brace expansion happens whatever matches: still a run-time word.
            assert!(
                listed(cmd, PROJECT, &[(PROJECT, clean), (&sub, src)]).is_err(),
                "{cmd}"
            );
            continue;
        }
        assert_eq!(
            listed(cmd, PROJECT, &[(PROJECT, clean), (&sub, src)]),
            Ok(()),
            "{cmd}"
        );
    }
    // A file named like the option makes the word expand: not known before it runs.
    let trap: &[&str] = &["src", "--include=evil.py"];
    let why = listed("grep -rn x --include=*.py .", PROJECT, &[(PROJECT, trap)]).unwrap_err();
    assert!(why.contains("only known at run time"), "{why}");
    // A secret at the top of the searched directory still refuses the search.
    let with_env: &[&str] = &["src", ".env"];
    let why = listed(
        "grep -rn x --include=*.py .",
        PROJECT,
        &[(PROJECT, with_env)],
    )
    .unwrap_err();
    assert!(why.contains(".env"), "{why}");
    // No listing: the word is unknown.
    assert!(listed("grep -rn x --include=*.py .", PROJECT, &[]).is_err());
}
