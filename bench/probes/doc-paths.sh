#!/bin/sh
# Every source file the docs name (`a/b.rs`, `name.rs`, and .js, .mjs, .py, .toml) in docs/*.md,
# ARCHITECTURE.md and README.md is a file of the repository: a path with folders must be the
# end of a tracked file's path (crate-relative paths such as `read/seen.rs` count), a bare name
# the name of one. Prints each that is not, and exits 1 if any.
#   sh bench/probes/doc-paths.sh
# Names of the user's files in examples (train.py, model.py) and of other projects' files
# (MemoryViz.js, torch/...) are not ours: they are left out below.
cd "$(git rev-parse --show-toplevel)" || exit 2
tracked=$(mktemp)
git ls-files > "$tracked"
missing=$(for doc in docs/*.md ARCHITECTURE.md README.md; do
  grep -oE '[A-Za-z0-9_./-]*[A-Za-z0-9_-]+\.(rs|js|mjs|py|toml)\b' "$doc" | sort -u | while read -r path; do
    case "$path" in
      http*|/*|*torch/*|train.py|model.py|module.py|adapters.py|MemoryViz.js) continue ;;
    esac
    pattern="(^|/)$(printf %s "${path#./}" | sed 's/[.]/\\./g')\$"
    grep -qE "$pattern" "$tracked" || echo "$doc: $path"
  done
done)
rm -f "$tracked"
[ -z "$missing" ] && exit 0
echo "$missing"
exit 1
