#!/usr/bin/env bash
# Builds grove, makes a small demo repository, runs two agents in parallel and shows
# what came back: plain git branches.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
echo "== building grove (release; the first build takes a few minutes, cargo shows its progress)"
cargo build --release --manifest-path "$here/Cargo.toml" -p grove-ctl
grove="$here/target/release/grove"

demo="$(mktemp -d /tmp/grove-demo.XXXXXX)"
export GROVE_HOME="$demo/home"
trap '"$grove" daemon stop >/dev/null 2>&1 || true' EXIT
repo="$demo/repo"
mkdir -p "$repo" && cd "$repo"
git init -q -b main
git -c user.name=demo -c user.email=demo@example.invalid commit -q --allow-empty -m "empty start"
printf 'hello\n' > greeting.txt
git add greeting.txt
git -c user.name=demo -c user.email=demo@example.invalid commit -q -m "add greeting"

echo "== two agents, each in its own worktree and branch"
a=$("$grove" spawn --name shout -- sh -c 'tr a-z A-Z < greeting.txt > LOUD.txt; echo "shouted"')
b=$("$grove" spawn --name count -- sh -c 'wc -c < greeting.txt > count.txt; echo "counted"')
"$grove" list
echo "== waiting"
"$grove" wait "$a" "$b"
echo "== what they left: ordinary branches"
git branch --list 'grove/*'
git log --oneline --all --graph
echo "== review one with plain git"
"$grove" diff "$a"
echo "== demo state is in $demo"
