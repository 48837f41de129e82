#!/usr/bin/env bash
# Build the web UI (web/) into src/lorastudio/web_dist/, which `lorastudio serve` mounts at /.
# Also copies the API docs viewers (swagger-ui-dist, redoc: devDependencies) into
# web_dist/docs-assets/ (api/docs_pages.py).
# Idempotent: `npm ci` only when web/node_modules does not match web/package-lock.json, the
# API types regenerated from the server's OpenAPI schema only when the API code changed, and
# the build skipped when nothing it depends on changed since the last build (stamp files).
# Needs Node >= 20.19 + npm, and the venv (.venv) for the schema dump.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
WEB="$ROOT/web"
DIST="$ROOT/src/lorastudio/web_dist"
PY="${LORASTUDIO_PYTHON:-$ROOT/.venv/bin/python}"
say() { printf '\033[1m[web]\033[0m %s\n' "$*"; }

if ! command -v npm >/dev/null 2>&1; then
  say "npm not found: install Node.js 20.19+ (e.g. apt-get install nodejs npm) to build the UI"
  exit 1
fi

# hash of a list of files/folders (contents and names), stable across runs
tree_hash() {
  find "$@" -type f ! -name '*.tsbuildinfo' -print0 2>/dev/null | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1
}

# 1. dependencies: npm ci when package-lock.json changed or node_modules is missing.
deps_want=$(sha256sum "$WEB/package-lock.json" | cut -d' ' -f1)
deps_have=$(cat "$WEB/node_modules/.lorastudio-deps" 2>/dev/null || true)
if [ "$deps_want" != "$deps_have" ] || [ ! -d "$WEB/node_modules" ]; then
  say "installing web dependencies (npm ci)"
  (cd "$WEB" && npm ci --no-audit --no-fund --loglevel=error)
  echo "$deps_want" > "$WEB/node_modules/.lorastudio-deps"
else
  say "web dependencies up to date"
fi

# 2. API types, generated from the server's OpenAPI schema (plus TrainConfig and the events).
# TrainConfig is config.py + its field groups config_fields_*.py + the config_*.py models they use
# (and the web tests' copy of the config rules, from config*.py and the family specs' supports,
# and of the new dataset name's rule, from data/paths.py, data/name_rule.py and data/joiners.py)
api_want=$(tree_hash "$ROOT/src/lorastudio/api" "$ROOT"/src/lorastudio/config*.py "$ROOT/src/lorastudio/families" \
  "$ROOT/src/lorastudio/data/paths.py" "$ROOT/src/lorastudio/data/name_rule.py" "$ROOT/src/lorastudio/data/joiners.py" \
  "$ROOT/src/lorastudio/training/events.py" "$WEB/scripts/dump_schema.py" "$WEB/scripts/routes.mjs" \
  "$WEB/scripts/dump_rules.py")
api_have=$(cat "$WEB/.api-stamp" 2>/dev/null || true)
if [ "$api_want" != "$api_have" ] || [ ! -f "$WEB/src/api/schema.d.ts" ]; then
  say "generating API types from the OpenAPI schema"
  tmp=$(mktemp "$WEB/.openapi.XXXXXX.json")
  trap 'rm -f "$tmp"' EXIT
  "$PY" "$WEB/scripts/dump_schema.py" > "$tmp"
  mv "$tmp" "$WEB/openapi.json"
  trap - EXIT
  (cd "$WEB" && npm run --silent gen:api >/dev/null)
  "$PY" "$WEB/scripts/dump_rules.py" > "$WEB/src/test/serverRules.gen.ts.tmp"
  mv "$WEB/src/test/serverRules.gen.ts.tmp" "$WEB/src/test/serverRules.gen.ts"
  echo "$api_want" > "$WEB/.api-stamp"
fi

# 3. build (tsc type-check + vite), skipped when web/ is unchanged since the last build.
build_want=$(tree_hash "$WEB/src" "$WEB/public" "$WEB/index.html" "$WEB/package-lock.json" "$WEB/vite.config.ts" \
  "$WEB/tsconfig.json" "$ROOT/scripts/build_web.sh")
build_have=$(cat "$DIST/.build-stamp" 2>/dev/null || true)
if [ "$build_want" = "$build_have" ] && [ -f "$DIST/index.html" ]; then
  say "web UI up to date ($DIST)"
  exit 0
fi
say "building the web UI"
# the build's id (web/vite.config.ts): the bundle and dist/build-id.txt, which the server says on
# its /api answers so that a page of another build asks to be reloaded (api/web_build.py)
(cd "$WEB" && LORASTUDIO_WEB_BUILD="$build_want" npm run --silent build)
# publish: stage next to the target, then swap (no half-copied UI is ever served)
stage="$DIST.staging.$$"
rm -rf "$stage"
cp -r "$WEB/dist" "$stage"
# the API docs pages' viewers (api/docs_pages.py): served by the studio, never a CDN, so /docs and
# /redoc work on a host without internet access. swagger-init.js came from web/public/docs-assets.
NM="$WEB/node_modules"
cp "$NM/swagger-ui-dist/swagger-ui-bundle.js" "$NM/swagger-ui-dist/swagger-ui.css" "$stage/docs-assets/"
cp "$NM/swagger-ui-dist/LICENSE" "$stage/docs-assets/swagger-ui-dist.LICENSE"
cp "$NM/swagger-ui-dist/NOTICE" "$stage/docs-assets/swagger-ui-dist.NOTICE"
cp "$NM/redoc/bundles/redoc.standalone.js" "$stage/docs-assets/"
cp "$NM/redoc/LICENSE" "$stage/docs-assets/redoc.LICENSE"
echo "$build_want" > "$stage/.build-stamp"
rm -rf "$DIST.old"
[ -d "$DIST" ] && mv "$DIST" "$DIST.old"
mv "$stage" "$DIST"
rm -rf "$DIST.old"
say "web UI built into $DIST"
