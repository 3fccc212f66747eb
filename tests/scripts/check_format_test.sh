#!/usr/bin/env bash
# scripts/check-format.sh in a throwaway git repository with the project's .clang-format:
# a badly formatted new file fails the check naming file:line, once formatted it passes;
# only changed lines count (an old unformatted line elsewhere is left alone) unless --all;
# the base is the merge-base with origin/main when there is one; a missing clang-format is a
# clear error. Skipped (77) without clang-format.
set -uo pipefail
# The checks are single-quoted on purpose: eval expands them when they run.
# shellcheck disable=SC2016
root=$1
source "$(dirname "$0")/check_lib.sh"
command -v clang-format >/dev/null || { echo "no clang-format: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
repo=$work/repo
git init -q "$repo" && cd "$repo" || exit 1
git config user.email test@example.invalid && git config user.name test && git config commit.gpgsign false
cp "$root/.clang-format" .
check_format() { bash "$root/scripts/check-format.sh" "$@" > "$work/out.txt" 2>&1; }

# Base: one formatted file and one old unformatted line (line 2 of old.cc).
printf 'int good() { return 1; }\n' > good.cc
printf '#include <vector>\nint   old( ) {return 2;}\n\nint keep() { return 3; }\n' > old.cc
git add . && git commit -qm base
check "the base alone: HEAD~1 does not exist, the whole commit is new and old.cc:2 is named" \
  eval '! check_format && grep -qx "old.cc:2" "$work/out.txt"'

# A commit adding a badly formatted file (line 1 fine, line 2 not) and touching a formatted
# line of old.cc.
printf 'int fine() { return 0; }\nint  bad(int *p){return *p;}\n' > src_bad.cc
sed -i 's/return 3;/return 4;/' old.cc
git add . && git commit -qm "bad file"
check "changed against HEAD~1 (no origin/main): fails" eval '! check_format'
check "names src_bad.cc:2" eval 'grep -qx "src_bad.cc:2" "$work/out.txt"'
check "does not name the formatted line src_bad.cc:1" eval '! grep -qx "src_bad.cc:1" "$work/out.txt"'
check "leaves the unchanged unformatted old.cc:2 alone" eval '! grep -q "^old.cc:" "$work/out.txt"'
check "--all names old.cc:2 as well" eval 'check_format --all; grep -qx "old.cc:2" "$work/out.txt"'
check "--base HEAD (nothing changed): passes" eval 'check_format --base HEAD'

# The merge-base with origin/main is the default base when origin/main exists.
git update-ref refs/remotes/origin/main HEAD
check "merge-base with origin/main (= HEAD here): passes" eval 'check_format'
git update-ref -d refs/remotes/origin/main

# An uncommitted edit counts too.
clang-format -i src_bad.cc
check "src_bad.cc formatted in the working tree: passes" eval 'check_format'
git commit -qam "formatted"
check "src_bad.cc formatted and committed: passes" eval 'check_format && grep -q "check-format: ok" "$work/out.txt"'

check "a missing clang-format: exit status 2, says so" \
  eval 'CLANG_FORMAT=/nonexistent/clang-format check_format; [[ $? == 2 ]] && grep -q "not found" "$work/out.txt"'
check "an unknown revision: exit status 2" eval 'check_format --base no-such-rev; [[ $? == 2 ]]'
finish check_format_script "$work/out.txt"
