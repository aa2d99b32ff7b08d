#!/usr/bin/env bash
# Refreshes the committed Envoy descriptor set from the envoy-types crate that Cargo.lock resolves.
# envoy-types ships src/generated/types.bin (a FileDescriptorSet of every proto it was built from)
# but does not export it, so xdsd-source keeps a copy; the crate's tests fail when the copy and
# the dependency drift apart. Run this after bumping envoy-types, then commit the result.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
crate="$(dirname "$here")"
cargo="${CARGO:-cargo}"

metadata="$("$cargo" metadata --format-version 1 --manifest-path "$crate/Cargo.toml")"
read -r version manifest < <(
  printf '%s' "$metadata" | python3 -c '
import json, sys
pkgs = [p for p in json.load(sys.stdin)["packages"] if p["name"] == "envoy-types"]
if len(pkgs) != 1:
    sys.exit("expected exactly one envoy-types package in cargo metadata, found %d" % len(pkgs))
print(pkgs[0]["version"], pkgs[0]["manifest_path"])
')

src="$(dirname "$manifest")/src/generated/types.bin"
[[ -f "$src" ]] || { echo "no descriptor set at $src" >&2; exit 1; }

dest="$here/envoy-types-$version.bin"
for old in "$here"/envoy-types-*.bin; do
  [[ -e "$old" && "$old" != "$dest" ]] && rm -v "$old"
done
cp "$src" "$dest"

# The version is spelled once, in a macro, because include_bytes! needs a literal path.
sed -i -E "/^macro_rules! envoy_types_version/,/^\}/ s/\"[^\"]*\"/\"$version\"/" "$crate/src/descriptors.rs"
grep -A3 "^macro_rules! envoy_types_version" "$crate/src/descriptors.rs" | grep -q "\"$version\"" \
  || { echo "could not update the version in src/descriptors.rs" >&2; exit 1; }
echo "descriptors: envoy-types $version -> $dest"
